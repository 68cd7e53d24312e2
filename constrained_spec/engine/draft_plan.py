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

The gain per token is the pair's, the machine's and the output's: it is what the draft saves beyond
the free proposers, so it depends on how much of the output they already find. Measured for the
default pair on this project's CPU host (:func:`default_gain`): about 0 for JSON Schema outputs
(``DRAFT_GAIN_PER_TOKEN``; grammar strings write the keys and punctuation, prompt lookup copies the
values), so there "auto" uses the draft only where its prefill is hidden; 0.4 for a Lark grammar's
output (``DRAFT_GAIN_PER_TOKEN_LARK``; SQL, arithmetic, nested JSON: nothing forced, little to
copy), so there it uses the draft unless the output is short after a long prompt.
These constants are the AVX512 host's: where the verify is flatter (an AVX2 CPU) the draft pays
more, where it grows linearly (llama.cpp's Q4_K) less. So by default (``DecodeConfig.calibrate_plan``)
a Generator times a few forwards right after loading, caches them per host, models, runtime and
threads, and models the gain per kind of output from those costs and the measurements above
(``engine.plan_costs``); the prefill figure is then measured too. ``DecodeConfig.draft_gain_per_token``
sets one figure for every output and wins over both. A pair on another device keeps its draft (no
measurement there).

The inputs are the prompt's length, the grammar, the budget, the devices and the cost figures
(constants, or costs read from the cache or measured at load and then learnt from the forwards
requests run, ``engine.live_costs``), never a clock per request: the learnt figures reach the plan
only where one moves by more than ``live_costs.PLAN_TOLERANCE``, so once they settle on a host a
seed reproduces its sample whatever the machine's load, run after run (``calibrate_plan=False``:
the constants, always; timing-driven choices, like ``adaptive``, do not reproduce). Exact either way: without the draft the loop still verifies every proposal
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
#: thread, -0.088 greedy and -0.028 at T = 0.7 with two (2026-12-02,
#: ``docs/results/2026-12-02-tuned-draft-gain``). On
#: this AVX512 host a 6-token verify costs 1.98x a one-token forward and a draft forward about a
#: third of one, so the draft's tokens pay for their forwards and no more: 0, and on a CPU the draft
#: is used only where its prefill costs no wait (overlapped). Where a verify is flatter (the
#: AVX2 host measured on 2026-12-01: 1.4x) the draft pays; set the field there.
DRAFT_GAIN_PER_TOKEN = config.DRAFT_GAIN_PER_TOKEN
#: the same for a Lark grammar's output: the 3 CFG prompts (SQL, nested JSON, arithmetic), two
#: threads, greedy, decode seconds per token without the draft (grammar strings + prompt lookup:
#: 1.31 tokens per target forward) against with it, over target-only's seconds per forward: 0.40
#: (``docs/results/2026-12-02-cfg-draft-gain``: 1.14x against 1.83x decode; again the same day, beside a
#: late-join trial: nested JSON 1.33x against 1.96x, SQL 0.76x against 1.46x)
DRAFT_GAIN_PER_TOKEN_LARK = config.DRAFT_GAIN_PER_TOKEN_LARK
#: the draft's prefill per prompt token, in one-token target forwards: int8w 0.5B draft against the
#: fp16w 1.5B target, 0.020 with one thread and 0.019 with two (median over the same 8 prompts)
DRAFT_PREFILL_PER_TOKEN = 0.02
#: bytes per token when turning a grammar's byte bound into a token count (Qwen2's tokenizer spends
#: 2.5-4 bytes per token on compact JSON; 2 leans toward using the draft)
BYTES_PER_TOKEN = 2.0
#: the tokens expected where the grammar does not bound the output (the budget caps it too)
EXPECTED_UNBOUNDED = 256


@dataclass(frozen=True)
class DraftPlan:
    """The decision, and the figures it was made of in words (``DecodeStats.draft_plan_reason``)."""

    use_draft: bool
    reason: str


def default_gain(kind: str) -> float:
    """The measured gain per token for a constraint of this kind ("lark", "json", "pydantic", "regex")."""
    return DRAFT_GAIN_PER_TOKEN_LARK if kind == "lark" else DRAFT_GAIN_PER_TOKEN


def expected_new_tokens(budget: int, bound_bytes: int | None) -> int:
    """Tokens a request is expected to generate: its budget, capped by the grammar's byte bound."""
    cap = EXPECTED_UNBOUNDED if bound_bytes is None else math.ceil(bound_bytes / BYTES_PER_TOKEN)
    return max(1, min(budget, cap))


def plan_draft(mode: str, prefill_tokens: int, expected_tokens: int, overlapped: bool, on_cpu: bool = True,
               gain_per_token: float = DRAFT_GAIN_PER_TOKEN, prefill_per_token: float = DRAFT_PREFILL_PER_TOKEN,
               source: str = "") -> DraftPlan:
    """Use the draft model for this request? ``mode``: "auto" (by the rule above) or "always".
    The constants were measured on CPUs only: a pair on another device keeps its draft.
    ``source``: where the figures come from, appended to the reason ("constant", "measured on this host ...")."""
    if mode == "always":
        return DraftPlan(True, "always")
    if not on_cpu:
        return DraftPlan(True, "not on the CPU: the constants are CPU measurements")
    gain = expected_tokens * gain_per_token
    cost = 0.0 if overlapped else prefill_tokens * prefill_per_token  # an overlapped prefill costs no wait
    where = (" (prefill overlapped)" if overlapped else "") + (f"; {source}" if source else "")
    if gain >= cost:
        return DraftPlan(True, f"gain {gain:.2f} >= prefill {cost:.2f} target forwards{where}")
    return DraftPlan(False, f"gain {gain:.2f} < prefill {cost:.2f} target forwards{where}")
