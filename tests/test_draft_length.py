"""Adaptive draft length: the rate model picks k from acceptance and the measured cost curve."""

from __future__ import annotations

from constrained_spec.draft_length import AdaptiveDraftLength, CostCurve, expected_tokens


def test_expected_tokens_formula():
    assert expected_tokens(0.0, 4) == 1.0
    assert abs(expected_tokens(0.5, 2) - 1.75) < 1e-9  # 1 + 0.5 + 0.25
    assert abs(expected_tokens(1.0, 3) - 4.0) < 1e-4


def test_choice_follows_the_cost_curve_and_acceptance():
    policy = AdaptiveDraftLength(max_k=8, acceptance=0.95)
    for n in range(1, 10):  # flat verify cost: long blocks are cheap
        policy.target.observe(n, 0.30)
    policy.draft.observe(1, 0.01)
    assert policy.choose() == 8
    steep = AdaptiveDraftLength(max_k=8, acceptance=0.5)
    for n in range(1, 10):  # each verified token costs a full forward: drafting never pays
        steep.target.observe(n, 0.30 * n)
    steep.draft.observe(1, 0.1)
    assert steep.choose() in (0, 1) and steep.rate(0) >= steep.rate(4)


def test_k0_is_probed_now_and_then_and_acceptance_learns():
    policy = AdaptiveDraftLength(max_k=4, acceptance=0.1, explore_every=3)
    for n in range(1, 6):
        policy.target.observe(n, 0.3 * n)
    policy.draft.observe(1, 0.2)
    picks = [policy.choose() for _ in range(6)]
    assert picks.count(0) == 4 and all(k > 0 for k in picks if k)
    for _ in range(50):
        policy.observe_block(4, 4, [1.0, 1.0, 1.0, 1.0])
    assert policy.acceptance > 0.9


def test_cost_curve_interpolates():
    curve = CostCurve()
    curve.observe(1, 1.0)
    curve.observe(5, 3.0)
    assert abs(curve(3) - 2.0) < 1e-9 and curve(9) == 3.0


def test_measured_steps_override_the_formula():
    """The i.i.d. formula prefers short blocks here; measured steps show long ones deliver more."""
    policy = AdaptiveDraftLength(max_k=5, acceptance=0.6)
    for n in range(1, 7):
        policy.target.observe(n, 0.30)
    policy.draft.observe(1, 0.08)
    formula_pick = policy.choose()
    assert formula_pick < 5
    for _ in range(30):  # what really happened: k=5 steps commit 5 tokens in 0.5 s, short ones 1.5 in 0.35 s
        for k in range(1, 6):
            tokens, seconds = (5, 0.5) if k == 5 else (1.5, 0.35)
            policy.observe_step(k, tokens, seconds)
    assert policy.choose() == 5
    assert policy.rate(5) > 1.5 * policy.rate(formula_pick)


def test_a_k_measured_in_other_text_returns_to_the_prior():
    """Bad steps at k=5 (say in a long free-form string) must not shut k=5 out for good."""
    policy = AdaptiveDraftLength(max_k=5, acceptance=0.9)
    for n in range(1, 7):
        policy.target.observe(n, 0.30)
    policy.draft.observe(1, 0.05)
    prior = policy.rate(5)
    for _ in range(20):
        policy.observe_step(5, 1, 0.6)  # k=5 did badly
    assert policy.rate(5) < 0.5 * prior
    for _ in range(200):
        policy.observe_step(2, 3, 0.4)  # meanwhile only k=2 was chosen
    assert abs(policy.rate(5) - prior) < 0.05 * prior


def test_each_kind_of_text_keeps_its_own_measurements():
    """Long blocks pay in structure and not in free text: the two choices must not mix."""
    policy = AdaptiveDraftLength(max_k=5, acceptance=0.8)
    for n in range(1, 7):
        policy.target.observe(n, 0.30)
    policy.draft.observe(1, 0.08)
    for _ in range(40):
        for k in range(1, 6):
            policy.observe_step(k, 5 if k == 5 else 2, 0.5, "structure")
            policy.observe_step(k, 1 if k == 5 else 2, 0.5 if k == 5 else 0.3, "free")
    assert policy.choose(context="structure") == 5
    assert policy.choose(context="free") < 5
