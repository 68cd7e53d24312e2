"""Whether a request uses the draft model at all: decided on its end-to-end cost, before the prefill.

The draft model costs twice: its prefill (reading the prompt, before the first token) and its
forwards while decoding; it pays back a share of a target forward per generated token, beyond what
the free proposers (grammar-forced strings, prompt lookup) already save. So the draft is used iff

    expected new tokens * gain per token >= draft prefill tokens * DRAFT_PREFILL_PER_TOKEN,

both sides in units of one target forward of one token; a draft prefill that runs beside the
target's (``engine.prefill``) costs no wait (0). Expected new tokens: the request's budget, capped
by the longest output its grammar allows (``grammar.length_bound``: bytes, at ``BYTES_PER_TOKEN`` per
token) and, where the grammar is unbounded, by ``EXPECTED_UNBOUNDED``: a long prompt before a short
answer (``{"answer":"yes"}`` after a 900-token tool list) is where a draft repays its prefill least.

The gain per token is the pair's and the machine's: measured for the default pair on this
project's CPU host it is about 0 (``DRAFT_GAIN_PER_TOKEN``), so on a CPU "auto" uses the draft only
where its prefill is hidden; ``DecodeConfig.draft_gain_per_token`` sets it for a machine where the
draft pays. A pair on another device keeps its draft (no measurement there).

**The draft joins late where the free proposers fall short.** A request that starts without the
draft (the rule above said no) is watched while it decodes: its coverage, generated tokens per
target forward, says how much the free proposers find in this output. JSON with its keys and copied
values gets about 2 tokens a forward from them, and there the draft adds nothing; a Lark grammar's
SQL or arithmetic gets about 1.3, and there the draft model's tokens save 0.4 target forwards per
token (the default pair, two threads, ``results/bench-cfg-s15-t2``). So after
``JOIN_MIN_TOKENS`` tokens and ``JOIN_MIN_VERIFIES`` verifies, the draft is brought in (its prefill
then reads the prompt and the output so far) as soon as

    remaining expected tokens * gain at this coverage >= draft prefill tokens * DRAFT_PREFILL_PER_TOKEN,

with the gain :func:`gain_at_coverage`, a line in 1 / coverage through those two measurements.
Coverage cannot tell structure the draft predicts well (a grammar's nested JSON) from prose it
predicts badly, so the join is a trial: once the draft has decoded as much again, its tokens per
cost unit (:func:`decode_cost`: a verify of n rows and the draft's forwards, in target forwards)
are weighed against the same measure before it joined, and it leaves for good where it lowers them
(:func:`draft_pays`). It joins at most once.

The inputs are the prompt's length, the grammar, the budget, the devices, the tokens decoded and
the forwards they took, and constants, never a clock: a seed reproduces its sample whatever the machine's load (timing-driven choices, like
``adaptive``, do not). Exact either way: without the draft the loop still verifies every proposal
against the target (``tests/engine/test_distribution.py`` covers both paths).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from constrained_spec import config

#: target forwards the draft model saves per generated token beyond what the free proposers save
#: (``DecodeConfig.draft_gain_per_token`` overrides it): the default pair on CPUs. Measured on the 8
#: tuned prompts (the default mode with the draft always used against grammar strings + prompt
#: lookup alone, decode seconds per token over target-only's, median over prompts): -0.001 with one
#: thread, -0.088 greedy and -0.028 at T = 0.7 with two (``results/bench-tuned-s14-plan-*``). On
#: this AVX512 host a 6-token verify costs 1.98x a one-token forward and a draft forward about a
#: third of one, so the draft's tokens pay for their forwards and no more: 0, and on a CPU the draft
#: is used only where its prefill costs no wait (overlapped). Where a verify is flatter (session
#: 1's AVX2 host: 1.4x) the draft pays; set the field there.
DRAFT_GAIN_PER_TOKEN = config.DRAFT_GAIN_PER_TOKEN
#: the draft's prefill per prompt token, in one-token target forwards: int8w 0.5B draft against the
#: fp16w 1.5B target, 0.020 with one thread and 0.019 with two (median over the same 8 prompts)
DRAFT_PREFILL_PER_TOKEN = 0.02
#: bytes per token when turning a grammar's byte bound into a token count (Qwen2's tokenizer spends
#: 2.5-4 bytes per token on compact JSON; 2 leans toward using the draft)
BYTES_PER_TOKEN = 2.0
#: the tokens expected where the grammar does not bound the output (the budget caps it too)
EXPECTED_UNBOUNDED = 256
#: a request that started without the draft is judged for a late join only after this many
#: generated tokens and target verifies (fewer say little about the output's coverage)
JOIN_MIN_TOKENS = 16
JOIN_MIN_VERIFIES = 4
#: the coverage (generated tokens per target forward without the draft) where the draft model saves
#: nothing, and the slope of its saving in 1 / coverage. Fitted on the default pair, two threads,
#: greedy: the tuned JSON workload covers 2.06 tokens a forward and the draft saved -0.05 target
#: forwards per token (``results/bench-tuned-s14-plan-t2``); the CFG workload covers 1.31 and the
#: draft saved 0.40 (``results/bench-cfg-s15-t2``): 0.40 / (1 / 1.31 - 1 / 2.0) = 1.5
BREAK_EVEN_COVERAGE = 2.0
GAIN_SLOPE = 1.5
#: the decode costs the join's trial weighs, in one-token target forwards: each verify row past the
#: first, and one draft forward. The default pair, two threads on this project's 2-core AVX512 host,
#: 800 tokens of context: the fp16w target 113 ms for one token and 216 ms for six, the int8w draft
#: 43 ms (``python benchmarks/dtype_probe.py --models qwen2.5-coder-1.5b qwen2.5-coder-0.5b --dtypes
#: fp16w int8w --new 1 3 6 9 12 16 --context 800 --threads 2``)
VERIFY_ROW_COST = 0.18
DRAFT_FORWARD_COST = 0.38


@dataclass(frozen=True)
class DraftPlan:
    """The decision, and the figures it was made of in words (``DecodeStats.draft_plan_reason``)."""

    use_draft: bool
    reason: str


def expected_new_tokens(budget: int, bound_bytes: int | None) -> int:
    """Tokens a request is expected to generate: its budget, capped by the grammar's byte bound."""
    cap = EXPECTED_UNBOUNDED if bound_bytes is None else math.ceil(bound_bytes / BYTES_PER_TOKEN)
    return max(1, min(budget, cap))


def gain_at_coverage(coverage: float) -> float:
    """Target forwards the draft model is expected to save per generated token where the free
    proposers alone cover ``coverage`` generated tokens per target forward (see the module text)."""
    return GAIN_SLOPE * (1.0 / max(coverage, 1e-9) - 1.0 / BREAK_EVEN_COVERAGE)


def join_draft(generated: int, target_forwards: int, expected_tokens: int, prefill_tokens: int,
               gain_per_token: float = DRAFT_GAIN_PER_TOKEN, prefill_per_token: float = DRAFT_PREFILL_PER_TOKEN) -> bool:
    """Whether a request decoding without the draft should bring it in now: ``generated`` tokens
    took ``target_forwards`` verifies, ``expected_tokens`` are expected in all, and the draft's
    prefill would read ``prefill_tokens``. The gain is the larger of the configured one and the
    coverage's (:func:`gain_at_coverage`)."""
    if generated < JOIN_MIN_TOKENS or target_forwards < JOIN_MIN_VERIFIES:
        return False
    gain = max(gain_per_token, gain_at_coverage(generated / target_forwards))
    return gain > 0 and (expected_tokens - generated) * gain >= prefill_tokens * prefill_per_token


def decode_cost(target_forwards: int, verified_drafts: int, draft_forwards: int) -> float:
    """Decode cost in one-token target forwards: verifies, their drafted rows, draft forwards."""
    return target_forwards + VERIFY_ROW_COST * verified_drafts + DRAFT_FORWARD_COST * draft_forwards


def draft_pays(before: tuple[int, float], since: tuple[int, float]) -> bool | None:
    """The join's trial: (tokens, :func:`decode_cost`) before the draft joined and since. None
    while the trial has too little evidence (``JOIN_MIN_TOKENS`` tokens since the join); else
    whether the draft's tokens per cost are at least those before it."""
    tokens_before, cost_before = before
    tokens_since, cost_since = since
    if tokens_since < JOIN_MIN_TOKENS or cost_since <= 0 or cost_before <= 0:
        return None
    return tokens_since / cost_since >= tokens_before / cost_before


def plan_draft(mode: str, prefill_tokens: int, expected_tokens: int, overlapped: bool, on_cpu: bool = True,
               gain_per_token: float = DRAFT_GAIN_PER_TOKEN, prefill_per_token: float = DRAFT_PREFILL_PER_TOKEN) -> DraftPlan:
    """Use the draft model for this request? ``mode``: "auto" (by the rule above) or "always".
    The constants were measured on CPUs only: a pair on another device keeps its draft."""
    if mode == "always":
        return DraftPlan(True, "always")
    if not on_cpu:
        return DraftPlan(True, "not on the CPU: the constants are CPU measurements")
    gain = expected_tokens * gain_per_token
    cost = 0.0 if overlapped else prefill_tokens * prefill_per_token  # an overlapped prefill costs no wait
    where = " (prefill overlapped)" if overlapped else ""
    if gain >= cost:
        return DraftPlan(True, f"gain {gain:.2f} >= prefill {cost:.2f} target forwards{where}")
    return DraftPlan(False, f"gain {gain:.2f} < prefill {cost:.2f} target forwards{where}")
