"""The prompt's prefill into the target's and the draft's caches: one after the other, or the
draft's on a second thread while the target's runs (``DecodeConfig.prefill_overlap``).

Prefill is compute-bound on a CPU, so where torch's threads leave cores idle (a benchmark's one
thread on a 2-core host, a deployment that pins fewer threads than it has cores) the draft's
prefill can run on an idle core and cost the user no wait: the target's prefill is the longer of
the two. Where torch already uses every core, a second thread only takes cores from the target's
prefill, so ``"auto"`` overlaps only when twice torch's threads fit in the cores this process may
use, only on the CPU, and only a prompt long enough to be worth a thread. Exact either way: the
caches hold the same keys and values; only the order in which the two models compute them changes.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch

__all__ = ["OVERLAP_MIN_TOKENS", "PrefillTimes", "draft_prefill_length", "on_cpu", "overlap_pays", "prefill_pair", "usable_cores"]


@dataclass(frozen=True)
class PrefillTimes:
    """The draft's own prefill seconds, and whether it ran beside the target's."""

    draft_seconds: float
    overlapped: bool


def draft_prefill_length(prompt_len: int, draft_offset: int) -> int:
    """Tokens the draft prefills: the prompt from ``draft_offset`` on, less its last token (whose
    logits come with the first step)."""
    return max(0, prompt_len - 1 - draft_offset)


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity where the OS says; else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: "auto" overlaps only a draft prefill of at least this many tokens: below it the prefill is
#: short, and a thread's start and the hand-offs of the interpreter lock between the two threads
#: cost about as much as they save (measured on the tests' tiny pure-Python models: about 10% slower)
OVERLAP_MIN_TOKENS = 64


def overlap_pays(target: Any, draft: Any, mode: str, draft_tokens: int = OVERLAP_MIN_TOKENS) -> bool:
    """Whether the draft's prefill (``draft_tokens`` long) should run beside the target's: ``mode``
    "on"/"off" says so; "auto" says yes only for two CPU models when twice torch's threads fit in
    the usable cores and the draft prefills at least :data:`OVERLAP_MIN_TOKENS` tokens."""
    if draft is None or mode == "off":
        return False
    if mode == "on":
        return True
    if draft_tokens < OVERLAP_MIN_TOKENS:
        return False
    return on_cpu(target, draft) and 2 * torch.get_num_threads() <= usable_cores()


def on_cpu(*models: Any) -> bool:
    """Whether every model given runs on the CPU."""
    return all(getattr(getattr(m, "device", None), "type", "cpu") == "cpu" for m in models)


def _prefill_one(model: Any, tokens: Sequence[int]) -> float:
    """Reset ``model``'s cache and prefill ``tokens`` (none: only the reset); its seconds."""
    start = time.perf_counter()
    model.reset()
    if tokens:
        model.prefill(list(tokens))
    return time.perf_counter() - start


def prefill_pair(target: Any, draft: Any, prompt_ids: Sequence[int], draft_offset: int, overlap: bool) -> PrefillTimes:
    """Prefill every prompt token but the last (its logits come with the first step) into the
    target, and from ``draft_offset`` on into the draft (None: no draft). With ``overlap`` the
    draft's runs on a worker thread beside the target's; an error in either is raised here, after
    both have stopped."""
    target_tokens = prompt_ids[:-1]
    draft_tokens = prompt_ids[draft_offset:-1]
    if draft is None or not overlap:
        _prefill_one(target, target_tokens)
        draft_seconds = _prefill_one(draft, draft_tokens) if draft is not None else 0.0
        return PrefillTimes(draft_seconds, False)
    outcome: dict[str, Any] = {}

    def run_draft() -> None:
        try:
            outcome["seconds"] = _prefill_one(draft, draft_tokens)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc

    worker = threading.Thread(target=run_draft, name="constrained-spec-draft-prefill", daemon=True)
    worker.start()
    try:
        _prefill_one(target, target_tokens)
    finally:
        worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return PrefillTimes(outcome["seconds"], True)
