"""Adaptive draft length: a block grows while one more position is worth its cost."""

from __future__ import annotations

from constrained_spec.engine.draft_length import AdaptiveDraftLength, CostCurve


def with_costs(rule: AdaptiveDraftLength, verify: float = 0.30, draft: float = 0.05, step_at: int | None = None) -> AdaptiveDraftLength:
    """Flat verify cost (doubling from ``step_at`` tokens fed) and a fixed draft forward cost."""
    for n in range(1, rule.max_k + 3):
        rule.target.observe(n, verify * (2 if step_at is not None and n >= step_at else 1))
    rule.draft.observe(1, draft)
    return rule


def test_cost_curve_interpolates():
    curve = CostCurve()
    curve.observe(1, 1.0)
    curve.observe(5, 3.0)
    assert abs(curve(3) - 2.0) < 1e-9 and curve(9) == 3.0


def test_a_draft_forward_is_spent_only_where_its_token_is_likely_kept():
    rule = with_costs(AdaptiveDraftLength(max_k=8), draft=0.1)
    for _ in range(50):  # confident draft tokens are kept, unsure ones rejected
        rule.observe_block(["model", "model"], [0.95, 0.15], 1)
    assert rule.keep.rate("model", 0.95) > 0.9 and rule.keep.rate("model", 0.15) < 0.2
    assert rule.worth_proposing(1.0, "model", 0.95, fed=2)
    assert not rule.worth_proposing(1.0, "model", 0.15, fed=2)
    # a zero-cost proposal is worth a (free) verify row even where a draft forward is not
    assert rule.worth_proposing(0.15, "grammar", None, fed=2)


def test_the_chance_of_reaching_a_position_decides_its_worth():
    rule = with_costs(AdaptiveDraftLength(max_k=8), draft=0.1)
    assert abs(rule.token_value() - 0.30) < 1e-9  # a kept token saves one target forward
    assert rule.worth_proposing(1.0, "model", 0.85, fed=1)
    assert not rule.worth_proposing(0.2, "model", 0.85, fed=1)  # unlikely to get this far


def test_a_verify_row_that_costs_a_second_pass_must_pay_for_it():
    rule = with_costs(AdaptiveDraftLength(max_k=8), step_at=7)  # 7 tokens fed cost twice 6
    assert rule.worth_proposing(0.9, "grammar", None, fed=5)  # the 6th row is free
    assert not rule.worth_proposing(0.9, "grammar", None, fed=6)  # the 7th costs a pass for 0.8 token


def test_only_judged_positions_teach_keep_rates():
    rule = AdaptiveDraftLength(max_k=8)
    before = rule.keep.rate("lookup")
    for _ in range(40):  # the first lookup token rejected: the three after it were never judged
        rule.observe_block(["lookup", "lookup", "lookup", "lookup"], [None] * 4, 0)
    assert rule.keep.rate("lookup") < 0.1 < before
    judged = rule.keep.running("lookup").judged
    assert judged < 1 / (1 - rule.keep.decay) + 1e-6  # one judged position per block, not four
    for _ in range(200):  # rates follow the text: the lookup starts to be right
        rule.observe_block(["lookup", "lookup"], [None] * 2, 2)
    assert rule.keep.rate("lookup") > 0.9


def test_a_source_the_rule_stopped_using_is_tried_again():
    """A stretch of rejected draft tokens must not shut the draft out for good."""
    rule = with_costs(AdaptiveDraftLength(max_k=8), draft=0.1)
    for _ in range(60):
        rule.observe_block(["model"], [None], 0)
    assert not rule.worth_proposing(1.0, "model", None, fed=1)
    for _ in range(150):  # verifies of zero-cost proposals only
        rule.observe_block(["grammar"], [None], 1)
    assert rule.worth_proposing(1.0, "model", None, fed=1)


def test_before_any_measurement_the_rule_drafts_from_priors_and_then_learns_costs():
    """No calibration: a verify of a few rows counts as flat and a draft forward as ``draft_prior``
    of a target forward, until decoding has measured them."""
    rule = AdaptiveDraftLength(max_k=5)
    assert not rule.calibrated
    assert rule.worth_proposing(1.0, "model", None, fed=1)  # 0.7 kept > 0.3 of a forward
    assert rule.worth_proposing(0.5, "grammar", None, fed=4)  # a zero-cost row is free while flat
    assert not rule.worth_proposing(0.35, "model", None, fed=2)  # 0.245 < 0.3
    # measured: the draft costs half a target forward here, so it must be likelier kept to pay
    for n in (1, 2, 3):
        rule.target.observe(n, 0.2)
    rule.draft.observe(1, 0.1)
    assert rule.calibrated and abs(rule.draft_cost() - 0.1) < 1e-12
    assert not rule.worth_proposing(0.6, "model", None, fed=1)  # 0.6 * 0.7 * 0.2 = 0.084 < 0.1
