"""Argument types and the model options the commands (and the benchmark runner) share.

Every type raises ``argparse.ArgumentTypeError`` with a one-line message; nothing here imports torch.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

from constrained_spec.config import (
    DEFAULT_DRAFT,
    DEFAULT_TARGET,
    DEVICE_HELP,
    DTYPE_CHOICES,
    PREFILL_DTYPES,
    PROPOSERS,
    RUNTIMES,
    ModelConfig,
    normalize_device,
)
from constrained_spec.errors import ConfigError


def number_type(kind: type, low: float, *, low_open: bool = False, high: float | None = None, rule: str = "") -> Callable[[str], float]:
    """An argparse type for ``kind`` (int or float) values >= ``low`` (> with ``low_open``) and <=
    ``high``; ``rule`` is how the message states the range."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if value < low or (low_open and value == low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    return parse


non_negative_float = number_type(float, 0, rule=">= 0")
non_negative_int = number_type(int, 0, rule=">= 0")
positive_int = number_type(int, 1, rule=">= 1")
probability = number_type(float, 0, low_open=True, high=1, rule="in (0, 1]")


def proposer_list(text: str) -> tuple[str, ...]:
    """``draft,grammar,lookup`` (any subset), ``all`` or ``none``."""
    word = text.strip().lower()
    if word in {"none", ""}:
        return ()
    if word == "all":
        return PROPOSERS
    names = tuple(dict.fromkeys(n.strip() for n in word.split(",") if n.strip()))
    unknown = [n for n in names if n not in PROPOSERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown proposer(s) {', '.join(unknown)}; choose from {', '.join(PROPOSERS)}, all or none")
    return names


def device_name(text: str) -> str:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (whether it exists is checked when the models load)."""
    try:
        return normalize_device(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_model_arguments(p: argparse.ArgumentParser, allow_no_draft: bool = True) -> None:
    """The model options every command shares: --model, --draft, --cache-dir, --dtype, --draft-dtype, --device,
    --prefill-dtype, --draft-prefill-dtype."""
    none = ", or 'none' for target-only decoding (no draft, no proposer)" if allow_no_draft else ""
    p.add_argument("--model", default=DEFAULT_TARGET, help=f"target: offline name, folder, .gguf or hub id (default {DEFAULT_TARGET})")
    p.add_argument("--draft", default=DEFAULT_DRAFT, help=f"draft model{none} (default {DEFAULT_DRAFT})")
    p.add_argument("--cache-dir", default=None, help="cache for models and compiled automata (default: $CONSTRAINED_SPEC_CACHE or the user cache dir)")
    p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES, help="weights dtype (auto: fastest measured here, per model role)")
    p.add_argument("--draft-dtype", default=None, choices=DTYPE_CHOICES, help="the draft's weights dtype (default: as --dtype)")
    p.add_argument("--device", default="auto", type=device_name,
                   help=f"where the models run: {DEVICE_HELP}; on CUDA auto dtype is bf16 (fp16w/int8w are CPU-only)")
    p.add_argument("--prefill-dtype", default="same", choices=PREFILL_DTYPES,
                   help="prefill prompts through a second copy of the target's linear weights in this dtype (bf16: about 2x "
                        "faster prompts on CPUs with AVX512-BF16, 2.6 GB more memory for the default target; same: the decode weights)")
    p.add_argument("--draft-prefill-dtype", default=None, choices=PREFILL_DTYPES, help="the same for the draft (default: same)")
    p.add_argument("--runtime", default="auto", choices=RUNTIMES,
                   help="what runs the models: torch (transformers), llamacpp (llama.cpp on the GGUF as stored, CPU; needs "
                        "llama-cpp-python: make install-llamacpp) or auto (the faster measured here for GGUF-backed models on the CPU)")


def add_prompt_cache_argument(p: argparse.ArgumentParser) -> None:
    """--prompt-cache-mb: prefilled prompts kept on disk for later runs (llama.cpp runtime)."""
    p.add_argument("--prompt-cache-mb", type=non_negative_int, default=512,
                   help="llama.cpp runtime: keep prefilled prompts on disk (MiB per model, in the cache folder) so a later run "
                        "whose prompt starts the same way (--schema-hint-place system) restores that part instead of computing it; "
                        "bitwise the same cache either way (default 512; 0: none)")


def model_config(args: argparse.Namespace) -> ModelConfig:
    """The :class:`ModelConfig` of the options :func:`add_model_arguments` added (``--draft none``: no draft)."""
    draft = None if str(args.draft).strip().lower() in {"none", ""} else args.draft
    return ModelConfig(model=args.model, draft=draft, dtype=args.dtype, draft_dtype=args.draft_dtype, cache_dir=args.cache_dir,
                       device=getattr(args, "device", "auto"), prefill_dtype=getattr(args, "prefill_dtype", "same"),
                       draft_prefill_dtype=getattr(args, "draft_prefill_dtype", None), runtime=getattr(args, "runtime", "auto"),
                       prompt_cache_mb=getattr(args, "prompt_cache_mb", 0))
