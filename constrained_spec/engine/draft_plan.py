"""Whether a request uses the draft model at all: decided on its end-to-end cost, before the prefill.

The draft model costs twice: its prefill (reading the prompt, before the first token) and its
forwards while decoding; it pays back a share of a target forward per generated token. For a long
prompt and a short answer (``{"answer":"yes"}`` after a 900-token tool list) the prefill alone
costs more than the draft can save, and the request is faster with the free proposers only
(grammar-forced strings, prompt lookup) and the target. So the draft is used iff

    expected new tokens * DRAFT_GAIN_PER_TOKEN >= draft prefill tokens * DRAFT_PREFILL_PER_TOKEN,

both sides in units of one target forward of one token. Expected new tokens: the request's budget,
capped by the longest output its grammar allows (``grammar.length_bound``: bytes, at
``BYTES_PER_TOKEN`` per token) and, where the grammar is unbounded, by ``EXPECTED_UNBOUNDED``. A draft
prefill that runs beside the target's (``engine.prefill``) costs no wait: the draft is then always
used.

The inputs are the prompt's length, the grammar, the budget and constants, never a clock: a seed
reproduces its sample whatever the machine's load (timing-driven choices, like ``adaptive``, do
not). Exact either way: without the draft the loop still verifies every proposal against the
target (``tests/engine/test_distribution.py`` covers both paths).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: target forwards the draft model saves per generated token, beyond the free proposers: the default
#: pair on the 8 tuned prompts, greedy, 2 threads (the measurement is in README's Speed section)
DRAFT_GAIN_PER_TOKEN = 0.25
#: the draft's prefill per prompt token, in one-token target forwards: int8w 0.5B draft against the
#: fp16w 1.5B target, 2.4 s for 800 tokens against 134 ms (one thread; 2 threads alike)
DRAFT_PREFILL_PER_TOKEN = 0.022
#: bytes per token when turning a grammar's byte bound into a token count (Qwen2's tokenizer spends
#: 2.5-4 bytes per token on compact JSON; 2 leans toward using the draft)
BYTES_PER_TOKEN = 2.0
#: the tokens expected where the grammar does not bound the output (the budget caps it too)
EXPECTED_UNBOUNDED = 256


@dataclass(frozen=True)
class DraftPlan:
    """The decision and what it was made of (kept in the stats)."""

    use_draft: bool
    expected_tokens: int
    prefill_tokens: int
    reason: str


def expected_new_tokens(budget: int, bound_bytes: int | None) -> int:
    """Tokens a request is expected to generate: its budget, capped by the grammar's byte bound."""
    cap = EXPECTED_UNBOUNDED if bound_bytes is None else math.ceil(bound_bytes / BYTES_PER_TOKEN)
    return max(1, min(budget, cap))


def plan_draft(mode: str, prefill_tokens: int, expected_tokens: int, overlapped: bool,
               gain_per_token: float = DRAFT_GAIN_PER_TOKEN, prefill_per_token: float = DRAFT_PREFILL_PER_TOKEN) -> DraftPlan:
    """Use the draft model for this request? ``mode``: "auto" (by the rule above) or "always"."""
    if mode == "always":
        return DraftPlan(True, expected_tokens, prefill_tokens, "always")
    if overlapped:
        return DraftPlan(True, expected_tokens, prefill_tokens, "prefill overlapped")
    gain = expected_tokens * gain_per_token
    cost = prefill_tokens * prefill_per_token
    if gain >= cost:
        return DraftPlan(True, expected_tokens, prefill_tokens, f"gain {gain:.2f} >= prefill {cost:.2f} target forwards")
    return DraftPlan(False, expected_tokens, prefill_tokens, f"gain {gain:.2f} < prefill {cost:.2f} target forwards")
