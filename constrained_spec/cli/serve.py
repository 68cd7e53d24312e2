"""``constrained-spec serve``: load the models, then serve the OpenAI-compatible endpoint
(:mod:`constrained_spec.serving`) with uvicorn, on 127.0.0.1 unless ``--host`` says otherwise."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from typing import Sequence

from constrained_spec.cli.args import add_model_arguments, model_config
from constrained_spec.config import DRAFT_PLANS, NUM_DRAFT_TOKENS, SCHEMA_HINT_PLACES, SCHEMA_HINT_STYLES, DecodeConfig
from constrained_spec.serving.config import ServerConfig
from constrained_spec.serving.limits import API_KEY_ENV

__all__ = ["DEFAULT_MAX_BATCH_SIZE", "build_parser", "main"]

#: rows decoded together by default; their caches take slots * batch-max-tokens positions per model
#: (the default Qwen pair in fp32 caches: 1.8 GiB target + 0.75 GiB draft at 8 x 4096)
DEFAULT_MAX_BATCH_SIZE = 8
#: the flags' defaults are the config's
SERVER_DEFAULTS = ServerConfig()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="constrained-spec serve", description="Serve an OpenAI-compatible /v1/chat/completions endpoint.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8000)
    add_model_arguments(p)
    p.add_argument("-k", "--num-draft-tokens", type=int, default=NUM_DRAFT_TOKENS, help=f"draft tokens per step (default {NUM_DRAFT_TOKENS})")
    p.add_argument("--draft-plan", default="auto", choices=DRAFT_PLANS,
                   help="auto (default): use the draft model only where it repays its prefill; always: for every request")
    p.add_argument("--max-new-tokens", type=int, default=512, help="default max_tokens when a request gives none")
    p.add_argument("--max-tokens-limit", type=int, default=None, help="refuse requests asking for more max_tokens")
    p.add_argument("--max-queue", type=int, default=SERVER_DEFAULTS.max_queue, help="requests that may wait beyond the running ones (429 beyond)")
    p.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE,
                   help=f"requests decoded at once as rows of one batch (continuous batching; 1: one at a time; default {DEFAULT_MAX_BATCH_SIZE})")
    p.add_argument("--batch-max-tokens", type=int, default=4096,
                   help="tokens (prompt + output) one batch row holds; its KV cache is preallocated (default 4096)")
    p.add_argument("--prefix-cache-mb", type=int, default=1024,
                   help="MiB per model kept for prompt prefixes that later requests reuse (0: none; default 1024)")
    p.add_argument("--schema-hint", default="types", choices=SCHEMA_HINT_STYLES,
                   help="how prompts write a response_format schema: types (a short type sketch, the default), full (json.dumps) "
                        "or compact")
    p.add_argument("--schema-hint-place", default=None, choices=SCHEMA_HINT_PLACES,
                   help="where prompts write that schema: system (first, in a system message: requests with the same schema "
                        "share their first tokens, which --prefix-cache-mb reuses; the default) or user (after the messages' "
                        "text; the default with --ray, whose replicas do not take system yet)")
    p.add_argument("--timeout", type=float, default=SERVER_DEFAULTS.request_timeout, help="seconds per request, waiting included (504 after)")
    p.add_argument("--model-name", default=None, help="the model id reported by /v1/models and in responses")
    p.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' on every route but /health (default: ${API_KEY_ENV} if set, else no key)")
    p.add_argument("--max-body-bytes", type=int, default=SERVER_DEFAULTS.max_body_bytes, help=f"largest request body in bytes, 413 beyond (default {SERVER_DEFAULTS.max_body_bytes})")
    p.add_argument("--max-schema-chars", type=int, default=SERVER_DEFAULTS.max_schema_chars,
                   help=f"largest response_format schema / tools as compact JSON, 400 beyond (default {SERVER_DEFAULTS.max_schema_chars})")
    p.add_argument("--max-grammar-chars", type=int, default=SERVER_DEFAULTS.max_grammar_chars,
                   help=f"largest grammar / regex text of a request in characters, 400 beyond (default {SERVER_DEFAULTS.max_grammar_chars})")
    p.add_argument("--compile-timeout", type=float, default=60.0,
                   help="seconds one token-automaton build may take (the automaton engine), 400 beyond (default 60)")
    p.add_argument("--compile-threads", type=int, default=2, help="threads that compile constraints, off the generation workers (default 2)")
    p.add_argument("--max-compile-queue", type=int, default=SERVER_DEFAULTS.max_compile_queue,
                   help=f"compiles that may wait beyond the running ones, 429 beyond (default {SERVER_DEFAULTS.max_compile_queue}); "
                        "a constraint compiled before never waits")
    p.add_argument("--max-compiles-per-client", type=int, default=SERVER_DEFAULTS.max_compiles_per_client,
                   help=f"new constraint compiles one client (by address) may have under way at once, 429 beyond (default {SERVER_DEFAULTS.max_compiles_per_client})")
    p.add_argument("--compile-budget", type=float, default=SERVER_DEFAULTS.compile_budget,
                   help=f"seconds one compile may run before it is stopped, 400 compile_limit (default {SERVER_DEFAULTS.compile_budget:g}; 0: none)")
    p.add_argument("--max-schema-properties", type=int, default=SERVER_DEFAULTS.max_schema_properties,
                   help=f"properties a request's schemas may declare in all, 400 compile_limit beyond, before compiling (default {SERVER_DEFAULTS.max_schema_properties})")
    p.add_argument("--body-timeout", type=float, default=SERVER_DEFAULTS.body_timeout,
                   help=f"seconds a request's whole body may take to arrive, 408 and the connection closed after (default {SERVER_DEFAULTS.body_timeout:g}; 0: none)")
    p.add_argument("--max-body-readers", type=int, default=SERVER_DEFAULTS.max_body_readers,
                   help=f"requests that may be sending their bodies at once, 429 beyond (default {SERVER_DEFAULTS.max_body_readers})")
    p.add_argument("--shutdown-timeout", type=float, default=SERVER_DEFAULTS.shutdown_timeout,
                   help=f"seconds requests in flight at SIGTERM may take to finish; then they are cancelled (default {SERVER_DEFAULTS.shutdown_timeout:g}; 0: none)")
    p.add_argument("--log-level", default="info")
    from constrained_spec.cli.ray_serve import add_ray_arguments

    add_ray_arguments(p)
    return p


def server_config(args: argparse.Namespace) -> ServerConfig:
    """The :class:`ServerConfig` of the parsed arguments: the key from ``--api-key`` or
    ``$CONSTRAINED_SPEC_API_KEY``; 0 seconds: no limit."""
    from constrained_spec.serving.app import public_model_id

    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    return ServerConfig(model_name=args.model_name or public_model_id(args.model), max_queue=args.max_queue, request_timeout=args.timeout,
                        max_tokens_limit=args.max_tokens_limit, api_key=api_key, max_body_bytes=args.max_body_bytes,
                        max_schema_chars=args.max_schema_chars, max_grammar_chars=args.max_grammar_chars,
                        compile_threads=args.compile_threads, max_compile_queue=args.max_compile_queue,
                        max_compiles_per_client=args.max_compiles_per_client, compile_budget=args.compile_budget or None,
                        max_schema_properties=args.max_schema_properties, body_timeout=args.body_timeout or None,
                        max_body_readers=args.max_body_readers, shutdown_timeout=args.shutdown_timeout or None)


def main(argv: Sequence[str] | None = None) -> int:
    """Load the models, then run uvicorn until interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)  # before the heavy imports: --help and bad arguments stay fast
    if args.ray and args.schema_hint_place == "system":
        parser.error("--schema-hint-place system is not passed to Ray replicas yet; leave it out with --ray")
    args.schema_hint_place = args.schema_hint_place or ("user" if args.ray else "system")
    config = server_config(args)
    if args.ray:  # the replicas load the models; this process only deploys them
        from constrained_spec.cli.ray_serve import run_ray

        return run_ray(args, dataclasses.asdict(config))
    import uvicorn

    from constrained_spec.api import Generator
    from constrained_spec.serving import create_app

    generator = Generator.from_config(model_config(args), DecodeConfig(num_draft_tokens=args.num_draft_tokens, draft_plan=args.draft_plan),
                                      max_new_tokens=args.max_new_tokens, compile_timeout=args.compile_timeout,
                                      max_batch_size=args.max_batch_size, batch_max_tokens=args.batch_max_tokens,
                                      prefix_cache_mb=args.prefix_cache_mb, schema_hint_style=args.schema_hint,
                                      schema_hint_place=args.schema_hint_place)
    app = create_app(generator, config)
    # on SIGTERM uvicorn stops accepting, gives the requests in flight shutdown_timeout seconds, then
    # cancels them; the app's shutdown then cancels what still generates and waits for its rows to be freed
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level,
                timeout_graceful_shutdown=None if config.shutdown_timeout is None else math.ceil(config.shutdown_timeout))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
