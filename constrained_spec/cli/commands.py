"""The command line: ``constrained-spec generate | fetch-models | serve``.

Values go to stdout (JSON for a schema, the text itself for a regex or a Lark grammar); stats,
progress and errors go to stderr. Every error prints one line,
``constrained-spec: error: ...``, never a traceback: exit status 2 for what the user passed (an
argument, a missing file, an invalid schema, grammar or regex), 1 for what went wrong while running
(a model that cannot be loaded, a token budget that ran out, a disk error).

Arguments, files and the constraint (schema -> regex, regex syntax) are checked before any model
loads, and this module imports neither torch nor transformers until a command needs a model, so
``--help`` and argument errors answer in a fraction of a second.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from constrained_spec.cli.args import (
    add_model_arguments,
    add_prompt_cache_argument,
    model_config,
    non_negative_float,
    non_negative_int,
    number_type,
    positive_int,
    probability,
    proposer_list,
)
from constrained_spec.config import (
    DRAFT_PLANS,
    DTYPE_CHOICES,
    MAX_PARTICLES,
    NUM_DRAFT_TOKENS,
    PROPOSERS,
    RUNTIMES,
    SCHEMA_HINT_PLACES,
    SCHEMA_HINT_STYLES,
    DecodeConfig,
)
from constrained_spec.errors import (
    ConstrainedSpecError,
    GrammarError,
    ModelLoadError,
    SchemaError,
    VocabularyMismatchError,
)

PROG = "constrained-spec"
#: what to install for ``serve``
SERVER_EXTRA = "pip install 'constrained-spec[server]'"


class UsageError(ConstrainedSpecError):
    """A command-line argument or input file that cannot be used (exit status 2)."""


#: errors about what the user passed: exit status 2 (as argparse's); every other error exits 1
#: a share in [0, 1] (``--ess-threshold``)
unit_interval = number_type(float, 0, high=1, rule="in [0, 1]")

USAGE_ERRORS: tuple[type[BaseException], ...] = (UsageError, SchemaError, GrammarError, VocabularyMismatchError)


def one_line(message: object) -> str:
    """``message`` as a single line (newlines folded into spaces)."""
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {one_line(message)} (see '{self.prog} --help')\n")


# -- checks that need no model -------------------------------------------------------------------


def read_input_file(name: str, what: str) -> str:
    """The text of a file the user named; a missing file, a folder or unreadable bytes is a UsageError."""
    path = Path(name).expanduser()
    if not path.exists():
        raise UsageError(f"{what} file {name!r} does not exist")
    if path.is_dir():
        raise UsageError(f"{what} file {name!r} is a directory, not a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} file {name!r} is not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} file {name!r}: {exc.strerror or exc}") from None


def check_regex(pattern: str) -> None:
    """Raise :class:`GrammarError` where the grammar engine cannot parse ``pattern`` (no vocabulary
    needed, no torch): llguidance reads it as the lazy engine will (Rust regex syntax); Python's ``re``
    explains the error where it rejects the pattern too.
    """
    import re

    from llguidance import LLMatcher

    if not LLMatcher.validate_grammar(LLMatcher.grammar_from_regex(pattern)):
        return
    try:
        re.compile(pattern)
        detail = "not valid in the Rust regex syntax the grammar engine reads (no look-around, no backreferences)"
    except re.error as py_exc:
        detail = str(py_exc)
    raise GrammarError(f"invalid regex {pattern[:200]!r}: {detail}") from None


def check_lark(text: str, name: str) -> None:
    """Raise :class:`GrammarError` where lark cannot load the grammar of file ``name``, or llguidance
    (which enforces it) refuses it; no vocabulary needed, neither imports torch."""
    from llguidance import LLMatcher

    from constrained_spec.grammar.lark_check import check_lark_grammar

    try:
        check_lark_grammar(text)
    except GrammarError as exc:
        raise GrammarError(f"{name}: {exc}") from None
    error = LLMatcher.validate_grammar(LLMatcher.grammar_from_lark(text))
    if error:
        raise GrammarError(f"{name}: llguidance cannot compile the grammar: {one_line(error)}")


def schema_options(args: argparse.Namespace) -> Any:
    """The SchemaOptions the generate arguments ask for."""
    from constrained_spec.grammar.json_schema import SchemaOptions

    return SchemaOptions(whitespace=args.whitespace, property_order=args.property_order,
                         additional_properties=getattr(args, "additional_properties", "declared"),
                         draft=getattr(args, "schema_draft", None))


def compile_constraint(args: argparse.Namespace) -> Any:
    """The OutputSpec of --schema / --regex / --grammar: files read, the schema compiled to its
    regex, the regex parsed, a Lark grammar (``.lark`` file) loaded by lark and checked by
    llguidance. Raises UsageError, SchemaError or GrammarError; loads no model."""
    from constrained_spec.grammar import CFG, Regex, output_spec
    from constrained_spec.progress import progress_after

    given = [name for name in ("schema", "regex", "grammar") if getattr(args, name) is not None]
    if len(given) > 1:
        raise UsageError(f"pass one of --schema, --regex or --grammar, not {' and '.join('--' + g for g in given)}")
    if not given:
        raise UsageError("pass --schema FILE, --regex PATTERN or --grammar FILE (.regex or .lark)")
    progress = args.progress or None
    if args.grammar is not None:
        if Path(args.grammar).suffix == ".lark":
            text = read_input_file(args.grammar, "grammar")
            with progress_after("checking the grammar", enabled=progress):
                check_lark(text, args.grammar)
            return output_spec(CFG(text))
        pattern = read_input_file(args.grammar, "grammar").strip()
    elif args.regex is not None:
        pattern = args.regex
    else:
        text = read_input_file(args.schema, "schema")
        with progress_after("compiling the schema", enabled=progress):
            return output_spec(text, schema_options(args))
    with progress_after("parsing the regex", enabled=progress):
        check_regex(pattern)
    return output_spec(Regex(pattern))


def check_model_spec(spec: str, flag: str, role: str, args: argparse.Namespace) -> None:
    """A model path that does not exist (or is not a model) is a UsageError, found without loading.

    Offline short names and hub ids are left to the loader (fetching, converting, the hub).
    """
    from constrained_spec.models.store.sources import lookup

    if lookup(spec) is not None and not os.path.exists(spec):
        return
    from constrained_spec.models.torch.resolve import resolve_model_path

    try:  # a concrete dtype: "auto" would measure this machine (torch) for a tag the check ignores
        resolve_model_path(spec, args.cache_dir, "fp32", progress=False, role=role)
    except ModelLoadError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _draft_spec(args: argparse.Namespace) -> str | None:
    return model_config(args).draft


# -- commands ------------------------------------------------------------------------------------


def check_alignment(args: argparse.Namespace) -> None:
    """``--alignment smc`` needs a temperature (``engine.smc``): a UsageError before anything loads."""
    if args.alignment != "smc":
        return
    if args.temperature <= 0:
        raise UsageError("--alignment smc samples P(output | constraint) and needs --temperature > 0 (greedy has no such distribution)")
    if args.particles > MAX_PARTICLES:
        raise UsageError(f"--particles must be at most {MAX_PARTICLES}")


def check_job(args: argparse.Namespace) -> tuple[list[Any], set[int]] | None:
    """``--input``: the job's lines and those an earlier run recorded in ``--output`` (its stopped
    tail cut off); None for one ``--prompt``. UsageError for a wrong combination or file."""
    from constrained_spec.cli.batch_job import parse_job, recorded_lines

    if (args.prompt is None) == (args.input is None):
        raise UsageError("pass one of --prompt TEXT or --input FILE.jsonl" if args.prompt is None else
                         "pass --prompt or --input, not both")
    if args.input is None:
        for flag, value in (("--output", args.output), ("--batch-size", args.batch_size)):
            if value is not None:
                raise UsageError(f"{flag} needs --input FILE.jsonl (a job of many prompts)")
        return None
    lines = parse_job(read_input_file(args.input, "input"))
    if args.output is None:
        return lines, set()
    output = Path(args.output).expanduser()
    if output.is_dir():
        raise UsageError(f"output file {args.output!r} is a directory")
    if not output.parent.is_dir():
        raise UsageError(f"the folder of output file {args.output!r} does not exist")
    if output.exists() and output.resolve() == Path(args.input).expanduser().resolve():
        raise UsageError("--output must not be the --input file")
    return lines, recorded_lines(output)


def _run_job(args: argparse.Namespace, gen: Any, compiled: Any, lines: list[Any], done: set[int], run_options: dict[str, Any]) -> int:
    """Decode the job's lines not yet recorded, writing their records in input order (``cli.batch_job``)."""
    from tqdm import tqdm

    from constrained_spec.cli.batch_job import run_job

    def decode(part: Sequence[Any]) -> list[Any]:
        return gen.run_batch([{"prompt": line.prompt, "output_type": compiled, **run_options} for line in part], return_exceptions=True)

    def record(result: Any) -> dict[str, Any]:
        out = {"value": json.loads(result.text)} if compiled.spec.kind not in ("regex", "lark") else {"text": result.text}
        return {**out, "stats": result.stats.as_dict()} if args.stats else out

    rows = args.batch_size or 1
    show = bool(args.progress or sys.stderr.isatty())
    with contextlib.ExitStack() as stack:
        out = sys.stdout if args.output is None else stack.enter_context(open(args.output, "a", encoding="utf-8"))
        bar = stack.enter_context(tqdm(total=len(lines), initial=len(lines) - len([x for x in lines if x.number not in done]),
                                       file=sys.stderr, disable=not show, unit="doc", desc="documents"))
        summary = run_job(lines, decode, out, record, chunk=rows * 2 if rows > 1 else 1, done=done, progress=bar)
    errors = summary.errors or []
    named = f" (line{'s' if len(errors) > 1 else ''} {', '.join(map(str, errors[:20]))}{', ...' if len(errors) > 20 else ''})" if errors else ""
    print(f"{PROG}: {summary.written} record(s) written, {len(errors)} error(s){named}, {summary.resumed} from an earlier run",
          file=sys.stderr)
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    check_alignment(args)
    job = check_job(args)
    spec = compile_constraint(args)
    draft = _draft_spec(args)
    proposers = args.proposers if args.proposers is not None else (PROPOSERS if draft else ())
    if "draft" in proposers and draft is None:
        raise UsageError("--proposers draft needs a draft model, and --draft is none")
    if args.num_draft_tokens == 0 or "draft" not in proposers:
        draft = None  # target-only, or proposals from the grammar / the prompt only: the draft is not loaded
    check_model_spec(args.model, "--model", "target", args)
    if draft is not None:
        check_model_spec(draft, "--draft", "draft", args)

    if job is not None and not [line for line in job[0] if line.number not in job[1]]:
        print(f"{PROG}: nothing to do: every line of {args.input} is recorded in {args.output}", file=sys.stderr)
        return 0

    from constrained_spec.api import Generator  # torch and transformers from here on
    from constrained_spec.progress import progress_after

    decode = DecodeConfig(num_draft_tokens=args.num_draft_tokens, proposers=proposers, verify_backend=args.backend,
                          debug_checks=args.debug_checks, draft_plan=args.draft_plan)
    models = dataclasses.replace(model_config(args), draft=draft)
    batch = {"max_batch_size": args.batch_size} if job is not None and (args.batch_size or 1) > 1 else {}
    gen = Generator.from_config(models, decode, schema_options=schema_options(args), max_new_tokens=args.max_new_tokens,
                                schema_hint_style=args.schema_hint, schema_hint_place=args.schema_hint_place, **batch)
    with progress_after("compiling the constraint", enabled=args.progress or None):
        compiled = gen.compile(spec)
    run_options = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed,
                   "schema_in_prompt": not args.no_schema_in_prompt, "alignment": args.alignment, "particles": args.particles,
                   "ess_threshold": args.ess_threshold}
    if job is not None:
        return _run_job(args, gen, compiled, job[0], job[1], run_options)
    result = gen.run(args.prompt, compiled, **run_options)
    print(result.text if spec.kind in ("regex", "lark") else json.dumps(json.loads(result.text), ensure_ascii=False))
    if args.stats:
        print(json.dumps(result.stats.as_dict(), indent=2), file=sys.stderr)
        if result.smc is not None:
            print(json.dumps(dataclasses.asdict(result.smc), indent=2), file=sys.stderr)
    return 0


def _cmd_fetch_models(args: argparse.Namespace) -> int:
    from constrained_spec.config import DEFAULT_DRAFT, DEFAULT_TARGET
    from constrained_spec.models.runtime import resolve_runtime
    from constrained_spec.models.torch.devices import resolve_device
    from constrained_spec.models.torch.resolve import fetch_default_models

    if resolve_runtime(args.runtime, DEFAULT_TARGET, resolve_device("auto"), args.dtype) == "llamacpp":
        # the GGUFs as stored and their tokenizers: nothing to convert on this runtime
        from constrained_spec.models.llamacpp.model import gguf_tokenizer
        from constrained_spec.models.store.fetch import fetch_gguf

        for name in (DEFAULT_DRAFT, DEFAULT_TARGET):
            path = fetch_gguf(name, args.cache_dir, True)
            gguf_tokenizer(path, args.cache_dir)
            print(f"{name}: {path}")
        return 0
    paths = fetch_default_models(cache_dir=args.cache_dir, dtype=args.dtype, progress=True)
    for name, path in (paths.items() if isinstance(paths, dict) else enumerate(paths)):
        print(f"{name}: {path}")
    return 0


def missing_server_modules() -> list[str]:
    """The modules of the ``server`` extra that cannot be imported here."""
    import importlib

    missing = []
    for name in ("fastapi", "uvicorn"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _cmd_serve(args: argparse.Namespace, rest: list[str]) -> int:
    if not {"-h", "--help"} & set(rest):
        missing = missing_server_modules()
        if missing:
            raise ConstrainedSpecError(f"serve needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                                       f"not installed: {SERVER_EXTRA}")
    from constrained_spec.cli import serve

    return int(serve.main(rest) or 0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Exact grammar-constrained speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate one value for a JSON Schema, a regex or a Lark grammar")
    g.add_argument("--schema", help="JSON Schema file")
    g.add_argument("--regex", help="a regex the whole output must match (instead of --schema)")
    g.add_argument("--grammar", help="a .regex file (one regex) or a .lark file (a Lark grammar, start rule 'start'), "
                                     "e.g. from grammars/ (instead of --schema); the text is printed as generated")
    g.add_argument("--prompt", default=None, help="the user prompt (or --input)")
    g.add_argument("--input", default=None,
                   help="a job of many documents: a JSONL file, one prompt per line ({\"prompt\": ..., \"id\": ...} or a JSON "
                        "string); one JSON line per input line is written, in order: {\"line\", \"id\", \"value\"} or "
                        "{\"line\", \"id\", \"error\"} (docs/cli.md)")
    g.add_argument("--output", default=None,
                   help="with --input: the JSONL file to write (default stdout); where it exists, the lines it records are "
                        "skipped and new ones appended (resume)")
    g.add_argument("--batch-size", type=positive_int, default=None,
                   help="with --input: decode up to this many documents together as rows of one batch (default 1: one after another)")
    add_model_arguments(g)
    add_prompt_cache_argument(g)
    g.add_argument("--num-draft-tokens", "-k", type=non_negative_int, default=NUM_DRAFT_TOKENS,
                   help=f"proposed tokens per step (0 = target only; default {NUM_DRAFT_TOKENS})")
    g.add_argument("--proposers", type=proposer_list, default=None,
                   help=f"proposal sources: a comma list of {', '.join(PROPOSERS)}, or all, or none "
                        "(default: all with a draft model, none with --draft none)")
    g.add_argument("--draft-plan", default="auto", choices=DRAFT_PLANS,
                   help="auto (default): use the draft model only where it repays its prefill (on a CPU, for JSON: where the "
                        "prefill runs beside the target's; a Lark grammar's output keeps it); always: whenever the proposers name it")
    g.add_argument("--temperature", type=non_negative_float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", type=non_negative_int, default=0, help="0 = no top-k cut (default)")
    g.add_argument("--top-p", type=probability, default=1.0, help="in (0, 1]; 1 = no nucleus cut (default)")
    g.add_argument("--seed", type=int, default=None, help="random seed (default: fresh randomness; a seed reproduces a sample)")
    g.add_argument("--alignment", default="local", choices=["local", "smc"],
                   help="local (default): each token masked to the grammar and renormalised; smc: sample what the model means "
                        "under the constraint, P(output | constraint), with --particles decodes (needs --temperature > 0; docs/smc.md)")
    g.add_argument("--particles", type=positive_int, default=4, help="particles for --alignment smc (default 4)")
    g.add_argument("--ess-threshold", type=unit_interval, default=0.5,
                   help="--alignment smc resamples when the effective sample size falls under this share of the particles (default 0.5)")
    g.add_argument("--max-new-tokens", type=positive_int, default=512)
    g.add_argument("--whitespace", default="compact", choices=["compact", "flexible"])
    g.add_argument("--property-order", default="schema", choices=["schema", "any"])
    g.add_argument("--additional-properties", default="declared", choices=["declared", "spec"],
                   help="declared (default): objects get only their declared properties; spec: also the additional "
                        "properties the schema allows (where additionalProperties is absent)")
    g.add_argument("--schema-draft", default=None, choices=["2020-12", "2019-09", "7", "6", "4"],
                   help="JSON Schema draft of a schema without $schema (default 2020-12; a $schema in the schema wins)")
    g.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"], help="verify kernel")
    g.add_argument("--no-schema-in-prompt", action="store_true", help="do not append the schema to the prompt")
    g.add_argument("--schema-hint", default="types", choices=SCHEMA_HINT_STYLES,
                   help="how the prompt writes the schema: types (a short type sketch: keys, types, values, bounds, descriptions; "
                        "about half the prompt tokens; the default), full (json.dumps) or compact (no spaces)")
    g.add_argument("--schema-hint-place", default="system", choices=SCHEMA_HINT_PLACES,
                   help="where the prompt writes the schema: system (first, in a system message: prompts with the same schema "
                        "share their first tokens; the default) or user (after the prompt's text)")
    g.add_argument("--debug-checks", action="store_true", help="check cache/automaton invariants after every step")
    g.add_argument("--stats", action="store_true", help="print decoding stats to stderr")
    g.add_argument("--progress", action="store_true",
                   help="show progress of compilation past a second on stderr even when it is not a terminal")
    g.set_defaults(func=_cmd_generate)

    f = sub.add_parser("fetch-models", help="download and verify the default model pair ahead of time (and convert it for the torch runtime)")
    f.add_argument("--cache-dir", default=None)
    f.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES)
    f.add_argument("--runtime", default="auto", choices=RUNTIMES,
                   help="the runtime to prepare for: auto (llama.cpp on a CPU where llama-cpp-python is installed: the GGUFs "
                        "and their tokenizers), torch (download and convert), llamacpp")
    f.set_defaults(func=_cmd_fetch_models)

    s = sub.add_parser("serve", help=f"OpenAI-compatible HTTP server (see `serve --help`; needs {SERVER_EXTRA})", add_help=False)
    s.set_defaults(func=_cmd_serve, passthrough=True)
    return parser


def _fail(message: object, status: int) -> int:
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr)
    return status


def show_library_notes() -> None:
    """The library logs what it is doing (converting a model, fetching tokenizer files) to the
    ``constrained_spec`` logger; the command shows those notes on stderr."""
    import logging

    logger = logging.getLogger("constrained_spec")
    if not any(getattr(h, "_constrained_spec_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[constrained-spec] %(message)s"))
        handler._constrained_spec_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``constrained-spec`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    show_library_notes()
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    try:
        if getattr(args, "passthrough", False):
            return args.func(args, rest)
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        return args.func(args)
    except USAGE_ERRORS as exc:
        return _fail(exc, 2)
    except ConstrainedSpecError as exc:  # a model that cannot load, a token budget that ran out...
        return _fail(exc, 1)
    except OSError as exc:
        return _fail(f"{type(exc).__name__}: {exc}", 1)
    except MemoryError:
        return _fail("out of memory", 1)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
