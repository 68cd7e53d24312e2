"""One request as the decode loop needs it (:class:`DecodeRequest`): what the request builder
(``engine.request``), SMC (``engine.smc``) and the batch rows read, in a module of its own so that none
of them imports another for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from constrained_spec.config import DecodeConfig
from constrained_spec.engine.stats import DecodeHooks
from constrained_spec.grammar.matcher import GrammarMatcher
from constrained_spec.sampling import SamplingPolicy

__all__ = ["DecodeRequest"]


@dataclass(frozen=True)
class DecodeRequest:
    """One request as the decode loop needs it: the prompt's ids, a fresh matcher per decode
    (``new_matcher``), the sampling policy (its seed seeds the request's generator), the decode
    config, the token budget and hooks, and what the proposers and the draft plan read of the
    constraint: ``grammar_key`` (its grammar strings' cache key), ``kind`` ("json", "lark"...: the
    draft's gain per token) and ``output_bound`` (the most UTF-8 bytes of an output; None: unbounded)."""

    prompt_ids: list[int]
    new_matcher: Callable[[], GrammarMatcher]
    policy: SamplingPolicy
    config: DecodeConfig
    max_new_tokens: int
    grammar_key: str
    kind: str = "regex"
    output_bound: int | None = None
    hooks: DecodeHooks | None = None
