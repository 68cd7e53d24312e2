"""The command line: ``constrained-spec generate | fetch-models | coverage | bench | serve``.

Values go to stdout as JSON; stats, progress and errors go to stderr. Errors of the library's
hierarchy print one clear line and exit with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from .errors import ConstrainedSpecError, GrammarError


def add_model_arguments(p: argparse.ArgumentParser, allow_no_draft: bool = True) -> None:
    """The model options every command shares: --model, --draft, --cache-dir, --dtype, --draft-dtype."""
    from .api import DEFAULT_DRAFT, DEFAULT_TARGET
    from .model_store import DTYPE_CHOICES

    none = ", or 'none' for target-only decoding" if allow_no_draft else ""
    p.add_argument("--model", default=DEFAULT_TARGET, help=f"target: offline name, folder, .gguf or hub id (default {DEFAULT_TARGET})")
    p.add_argument("--draft", default=DEFAULT_DRAFT, help=f"draft model{none} (default {DEFAULT_DRAFT})")
    p.add_argument("--cache-dir", default=None, help="cache for models and compiled automata (default: $CONSTRAINED_SPEC_CACHE or the user cache dir)")
    p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES, help="weights dtype (auto: fastest measured here, per model role)")
    p.add_argument("--draft-dtype", default=None, choices=DTYPE_CHOICES, help="the draft's weights dtype (default: as --dtype)")


def _cmd_generate(args: argparse.Namespace) -> int:
    from .api import Generator
    from .grammar import Regex
    from .grammar.json_schema import SchemaOptions

    if sum(bool(x) for x in (args.schema, args.regex, args.grammar)) > 1:
        raise ConstrainedSpecError("pass one of --schema, --regex or --grammar")
    if args.grammar:
        path = Path(args.grammar)
        if path.suffix == ".lark":
            raise GrammarError(f"{args.grammar}: Lark (context-free) grammars are not supported yet; use a .regex file or a JSON Schema")
        if not path.exists():
            raise ConstrainedSpecError(f"grammar file {args.grammar!r} does not exist")
        args.regex = path.read_text().strip()
    if args.regex:
        output_type: object = Regex(args.regex)
    elif args.schema:
        path = Path(args.schema)
        if not path.exists():
            raise ConstrainedSpecError(f"schema file {args.schema!r} does not exist")
        output_type = path.read_text()
    else:
        raise ConstrainedSpecError("pass --schema FILE, --regex PATTERN or --grammar FILE.regex")
    options = SchemaOptions(whitespace=args.whitespace, property_order=args.property_order,
                            draft=args.schema_draft)
    draft = None if str(args.draft).lower() in {"none", ""} else args.draft
    gen = Generator(args.model, draft, num_draft_tokens=args.num_draft_tokens, schema_options=options,
                    cache_dir=args.cache_dir, dtype=args.dtype, draft_dtype=args.draft_dtype, verify_backend=args.backend,
                    max_new_tokens=args.max_new_tokens, debug_checks=args.debug_checks)
    result = gen.run(args.prompt, output_type, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                     seed=args.seed, schema_in_prompt=not args.no_schema_in_prompt)
    print(result.text if args.regex else json.dumps(json.loads(result.text), ensure_ascii=False))
    if args.stats:
        print(json.dumps(result.stats.as_dict(), indent=2), file=sys.stderr)
    return 0


def _cmd_fetch_models(args: argparse.Namespace) -> int:
    from .model_store import fetch_default_models

    paths = fetch_default_models(cache_dir=args.cache_dir, dtype=args.dtype, progress=True)
    for name, path in (paths.items() if isinstance(paths, dict) else enumerate(paths)):
        print(f"{name}: {path}")
    return 0


def _cmd_coverage(args: argparse.Namespace, rest: list[str]) -> int:
    from . import coverage

    return int(coverage.main(rest) or 0)


def _cmd_bench(args: argparse.Namespace, rest: list[str]) -> int:
    from . import bench

    return int(bench.main(rest) or 0)


def _cmd_serve(args: argparse.Namespace, rest: list[str]) -> int:
    from . import server

    return int(server.main(rest) or 0)


def build_parser() -> argparse.ArgumentParser:
    from .api import NUM_DRAFT_TOKENS
    from .model_store import DTYPE_CHOICES

    parser = argparse.ArgumentParser(prog="constrained-spec", description="Exact grammar-constrained speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate one value for a JSON Schema or regex")
    g.add_argument("--schema", help="JSON Schema file")
    g.add_argument("--regex", help="a regex the whole output must match (instead of --schema)")
    g.add_argument("--grammar", help="a .regex file from grammars/ (instead of --schema)")
    g.add_argument("--prompt", required=True, help="the user prompt")
    add_model_arguments(g)
    g.add_argument("--num-draft-tokens", "-k", type=int, default=NUM_DRAFT_TOKENS, help=f"draft length k (0 = target only; default {NUM_DRAFT_TOKENS})")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--max-new-tokens", type=int, default=512)
    g.add_argument("--whitespace", default="compact", choices=["compact", "flexible"])
    g.add_argument("--property-order", default="schema", choices=["schema", "any"])
    g.add_argument("--schema-draft", default=None, choices=["2020-12", "2019-09", "7", "6", "4"],
                   help="JSON Schema draft of a schema without $schema (default 2020-12; a $schema in the schema wins)")
    g.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"], help="verify kernel")
    g.add_argument("--no-schema-in-prompt", action="store_true", help="do not append the schema to the prompt")
    g.add_argument("--debug-checks", action="store_true", help="check cache/automaton invariants after every step")
    g.add_argument("--stats", action="store_true", help="print decoding stats to stderr")
    g.set_defaults(func=_cmd_generate)

    f = sub.add_parser("fetch-models", help="download, verify and convert the default model pair ahead of time")
    f.add_argument("--cache-dir", default=None)
    f.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES)
    f.set_defaults(func=_cmd_fetch_models)

    c = sub.add_parser("coverage", help="run schema test files through the compiler (see `coverage --help`)", add_help=False)
    c.set_defaults(func=_cmd_coverage, passthrough=True)
    b = sub.add_parser("bench", help="speed benchmark against the baselines (see `bench --help`)", add_help=False)
    b.set_defaults(func=_cmd_bench, passthrough=True)
    s = sub.add_parser("serve", help="OpenAI-compatible HTTP server (see `serve --help`)", add_help=False)
    s.set_defaults(func=_cmd_serve, passthrough=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``constrained-spec`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    try:
        if getattr(args, "passthrough", False):
            return args.func(args, rest)
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        return args.func(args)
    except ConstrainedSpecError as exc:
        print(f"constrained-spec: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
