"""The draft plan on costs measured where it runs (``engine.plan_costs``, ``models.cost_cache``).

The decisions are tested on synthetic cost figures (no clock): the AVX512 host the constants were
measured on, a host whose verify is flat, a runtime whose verify grows linearly. The measurement
itself runs on the tiny models and is only checked for finite positive figures and its time."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from tiny_models import tiny_llama

from constrained_spec.config import DecodeConfig
from constrained_spec.engine import plan_costs
from constrained_spec.engine.draft_plan import DRAFT_PREFILL_PER_TOKEN, default_gain, plan_draft
from constrained_spec.engine.plan_costs import SIZES, HostCosts, calibrated_costs, gain_per_token, measure_costs
from constrained_spec.engine.request import RequestBuilder
from constrained_spec.errors import ConfigError
from constrained_spec.models import cost_cache
from constrained_spec.models.torch.hf import HFModel

#: the calibration as the library has it (``tests/conftest.py`` turns it off for every other test)
CALIBRATE_PLAN = RequestBuilder.calibrate_plan


@pytest.fixture(autouse=True)
def _calibration_on(monkeypatch):
    monkeypatch.setattr(RequestBuilder, "calibrate_plan", CALIBRATE_PLAN)


#: the AVX512 host of the constants: fp16w torch, a 6-token verify 1.98x one token (linear between),
#: the int8w draft's forward 0.27 of the target's (``AdaptiveDraftLength.draft_prior``), prefill 0.02
AVX512 = HostCosts({1: 1.0, 2: 1.196, 3: 1.392, 6: 1.98}, 0.27, DRAFT_PREFILL_PER_TOKEN, "2026-12-02")
#: the same with a draft forward of a third (the brief's round figure)
AVX512_THIRD = HostCosts(AVX512.verify, 1 / 3, DRAFT_PREFILL_PER_TOKEN, "2026-12-02")
#: a host where the verify is flat: 6 tokens 1.4x one (fp16w torch on AVX2), the same draft share
FLAT = HostCosts({1: 1.0, 2: 1.08, 3: 1.16, 6: 1.4}, 0.27, DRAFT_PREFILL_PER_TOKEN, "2026-12-03")
#: a runtime whose verify grows linearly (llama.cpp Q4_K on this CPU: 5 tokens 4.2x one)
LINEAR = HostCosts({1: 1.0, 2: 1.8, 3: 2.6, 6: 5.0}, 0.27, DRAFT_PREFILL_PER_TOKEN, "2026-12-03")

#: (kind, prompt tokens, expected tokens, overlapped): the cases the constants' tests decide
CASES = [("json", 200, 256, False), ("json", 300, 256, False), ("json", 200, 256, True), ("json", 1000, 40, True),
         ("lark", 1000, 256, False), ("lark", 2000, 20, False), ("lark", 300, 100, False), ("regex", 500, 8, False)]


def decide(kind: str, prompt: int, expected: int, overlapped: bool, costs: HostCosts | None) -> bool:
    if costs is None:
        return plan_draft("auto", prompt, expected, overlapped, gain_per_token=default_gain(kind)).use_draft
    return plan_draft("auto", prompt, expected, overlapped, gain_per_token=gain_per_token(costs, kind),
                      prefill_per_token=costs.draft_prefill_per_token).use_draft


@pytest.mark.parametrize("costs", [AVX512, AVX512_THIRD], ids=["draft-0.27", "draft-third"])
def test_the_constants_host_figures_reproduce_the_constants_decisions(costs):
    """On the AVX512 host's figures the model gives JSON outputs a gain within noise of 0 (the
    constant) and Lark outputs a clearly positive one, and every case decides as the constants do."""
    assert gain_per_token(costs, "json") == 0.0 == default_gain("json")
    assert 0.15 < gain_per_token(costs, "lark") < 0.45
    for case in CASES:
        assert decide(*case, costs) == decide(*case, None), case


def test_a_flat_verify_flips_json_outputs_to_the_draft():
    """Only the verify curve changes (1.98x -> 1.4x for 6 tokens) and a JSON output after a
    300-token prompt now uses the draft, where the constants leave it out; the shortest outputs
    after long prompts still go without it."""
    assert gain_per_token(FLAT, "json") > 0.03
    assert not decide("json", 300, 256, False, None) and not decide("json", 300, 256, False, AVX512)
    assert decide("json", 300, 256, False, FLAT)
    assert not decide("json", 2000, 8, False, FLAT)
    assert gain_per_token(FLAT, "lark") > gain_per_token(FLAT, "json")


def test_a_linear_verify_keeps_the_draft_out_of_json_outputs_even_when_hidden():
    """Where a verify costs about as many forwards as it feeds tokens (llama.cpp's Q4_K here), the
    draft's longer blocks cost more than they save on JSON outputs: not used even with its prefill
    hidden (the negative control of the flip above); the model is monotone in the verify's slope."""
    assert gain_per_token(LINEAR, "json") < -plan_costs.GAIN_NOISE
    assert not decide("json", 200, 256, True, LINEAR)
    assert gain_per_token(LINEAR, "json") < gain_per_token(AVX512, "json") <= gain_per_token(FLAT, "json")


def test_the_verify_curve_interpolates_and_extrapolates():
    assert FLAT.verify_cost(1) == 1.0 and FLAT.verify_cost(0.5) == 1.0
    assert FLAT.verify_cost(2.5) == pytest.approx(1.12)
    assert FLAT.verify_cost(4.5) == pytest.approx(1.28)
    assert FLAT.verify_cost(8) == pytest.approx(1.56)
    assert "verify 6 = 1.40x one, draft = 0.27x target" in FLAT.describe() and "2026-12-03" in FLAT.describe()


def test_figures_round_trip_and_bad_ones_are_refused():
    assert HostCosts.from_dict(FLAT.to_dict(), FLAT.measured) == FLAT
    bad = [{**FLAT.to_dict(), "draft_forward": -1.0}, {**FLAT.to_dict(), "draft_forward": float("nan")},
           {**FLAT.to_dict(), "verify": {"1": 1.0}}, {"verify": "x"}, {}]
    assert all(HostCosts.from_dict(data, "") is None for data in bad)


@pytest.fixture(scope="module")
def tiny_pair():
    return HFModel(tiny_llama(50257, seed=1)), HFModel(tiny_llama(50257, seed=2))


CONTEXT = list(range(100, 164))


def test_the_measurement_on_tiny_models_is_quick_and_positive(tiny_pair):
    start = time.perf_counter()
    costs, seen = measure_costs(*tiny_pair, CONTEXT)
    assert time.perf_counter() - start < 2.0
    figures = [*costs.verify.values(), costs.draft_forward, costs.draft_prefill_per_token]
    assert set(costs.verify) == set(SIZES) and costs.verify[1] == 1.0
    assert all(math.isfinite(f) and f > 0 for f in figures)
    assert {(name, n) for name, n, _ in seen} == {("target", n) for n in SIZES} | {("draft", 1)}
    assert tiny_pair[0].length == 0 and tiny_pair[1].length == 0  # both caches emptied


def test_the_cache_round_trips_and_a_key_change_measures_again(tiny_pair, tmp_path, monkeypatch):
    first, seen = calibrated_costs(*tiny_pair, CONTEXT, tmp_path)
    assert seen  # measured
    files = list((tmp_path / cost_cache.COST_FOLDER).glob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["key"]["host"]["cores"] > 0 and data["measured"] == first.measured and "load_average_1m" in data["figures"]
    again, seen = calibrated_costs(*tiny_pair, CONTEXT, tmp_path)
    assert again == first and seen == []  # read back: nothing timed
    other_host = {**cost_cache.host_fingerprint(), "cpu": "another CPU"}
    monkeypatch.setattr(cost_cache, "host_fingerprint", lambda: other_host)
    _, seen = calibrated_costs(*tiny_pair, CONTEXT, tmp_path)
    assert seen and len(list((tmp_path / cost_cache.COST_FOLDER).glob("*.json"))) == 2


@pytest.mark.parametrize("content", ["{not json", json.dumps({"key": "other", "figures": {}}), "", "[1, 2]"],
                         ids=["garbage", "other-key", "empty", "a-list"])
def test_a_corrupted_cache_file_is_measured_again(tiny_pair, tmp_path, content):
    key = cost_cache.cost_key(*tiny_pair, plan_costs.WHAT)
    path = cost_cache.cost_path(key, tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    costs, seen = calibrated_costs(*tiny_pair, CONTEXT, tmp_path)
    assert seen and costs.draft_forward > 0
    assert HostCosts.from_dict(*cost_cache.read_costs(key, tmp_path)) == costs  # rewritten whole


def test_unusable_cached_figures_are_measured_again(tiny_pair, tmp_path):
    key = cost_cache.cost_key(*tiny_pair, plan_costs.WHAT)
    cost_cache.write_costs(key, {**FLAT.to_dict(), "draft_forward": 0.0}, "2026-12-03", tmp_path)
    costs, seen = calibrated_costs(*tiny_pair, CONTEXT, tmp_path)
    assert seen and costs != FLAT


def test_the_key_names_threads_and_models(tiny_pair):
    key = cost_cache.cost_key(*tiny_pair, plan_costs.WHAT)
    assert key["threads"] == torch.get_num_threads() and key["runtime"].startswith("torch ")
    assert "LlamaForCausalLM" in key["target"] and key["target"] == key["draft"]  # same shape: same costs
    bigger = cost_cache.model_identity(HFModel(tiny_llama(50257, seed=1, hidden=64)))
    assert bigger != key["target"]


def test_the_option_is_checked():
    assert DecodeConfig().calibrate_plan is True
    with pytest.raises(ConfigError, match="calibrate_plan"):
        DecodeConfig(calibrate_plan="yes")


LONG_PROMPT = "Here is a long document about several records. " * 40 + "Answer:"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}}, "required": ["name"], "additionalProperties": False}


def test_a_generator_reads_its_cached_costs_and_a_seed_repeats_its_sample(tiny_generator, tmp_path, monkeypatch):
    """The first Generator measures and caches; the second reads the cache (measuring would fail
    here) and decides the same way, so the same seed gives the same sample at T = 1."""
    first = tiny_generator(draft_plan="auto", calibrate_plan=True, cache_dir=tmp_path, prefill_overlap="off", max_new_tokens=30)
    assert first.builder.plan_costs is not None
    with monkeypatch.context() as patch:  # (after a request the figures may be measured again: engine.live_costs)
        patch.setattr(plan_costs, "measure_costs", lambda *a, **k: pytest.fail("measured again despite the cache"))
        second = tiny_generator(draft_plan="auto", calibrate_plan=True, cache_dir=tmp_path, prefill_overlap="off", max_new_tokens=30)
    assert second.builder.plan_costs == first.builder.plan_costs
    runs = [gen.run(LONG_PROMPT, SCHEMA, temperature=1.0, seed=7) for gen in (first, second)]
    assert runs[0].token_ids == runs[1].token_ids
    assert runs[0].stats.draft_plan_reason == runs[1].stats.draft_plan_reason
    assert "measured on this host" in runs[0].stats.draft_plan_reason


def test_the_plan_weighs_the_measured_figures_and_the_user_gain_wins(tiny_generator):
    """With the flat host's figures set on the builder, a JSON output of up to 400 tokens after a
    ~400-token prompt uses the draft; the same call with ``calibrate_plan=False`` (the constants)
    leaves it out; a ``draft_gain_per_token`` set by the user wins over the measured gain; "always"
    is unchanged. A Generator whose plan is "always" measures nothing."""
    gen = tiny_generator(draft_plan="always", calibrate_plan=True, prefill_overlap="off", max_new_tokens=400)
    assert gen.builder.plan_costs is None
    gen.builder.plan_costs = FLAT
    schema = {**SCHEMA, "properties": {"name": {"type": "string", "maxLength": 200}}}
    measured = gen.run(LONG_PROMPT, schema, draft_plan="auto")
    assert not measured.stats.draft_skipped and measured.stats.draft_forwards > 0, measured.stats.draft_plan_reason
    assert "; measured on this host 2026-12-03: verify 6 = 1.40x one, draft = 0.27x target" in measured.stats.draft_plan_reason
    constant = gen.run(LONG_PROMPT, schema, draft_plan="auto", calibrate_plan=False)
    assert constant.stats.draft_skipped and constant.stats.draft_plan_reason.endswith("; constant")
    user = gen.run(LONG_PROMPT, schema, draft_plan="auto", draft_gain_per_token=-0.5)
    assert user.stats.draft_skipped and "gain from DecodeConfig.draft_gain_per_token; measured" in user.stats.draft_plan_reason
    assert gen.run(LONG_PROMPT, schema).stats.draft_plan_reason == "always"
    assert measured.token_ids and constant.value is not None


def test_the_llamacpp_runtime_is_measured_and_keyed_as_such(tiny_ggufs, tmp_path):
    """On the llama.cpp runtime (tiny GGUFs) the calibration runs, its figures are positive, and
    the key names the runtime, its version, the GGUF files and llama.cpp's threads."""
    from constrained_spec.models.llamacpp.model import LlamaCppModel, LlamaCppWeights

    target, draft = (LlamaCppModel(LlamaCppWeights(path), n_ctx=256) for path in tiny_ggufs)
    costs, seen = calibrated_costs(target, draft, CONTEXT, tmp_path)
    assert seen and costs.draft_forward > 0 and all(v > 0 for v in costs.verify.values())
    key = cost_cache.cost_key(target, draft, plan_costs.WHAT)
    assert key["runtime"].startswith("llamacpp ") and key["target"].startswith("gguf:target.gguf:") and key["draft"].startswith("gguf:draft.gguf:")
    assert key["threads"] == target.weights.threads
    assert calibrated_costs(target, draft, CONTEXT, tmp_path) == (costs, [])
