"""The prompt's prefill into both caches, one after the other or overlapped (``engine.prefill``)."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from synthetic import make_decoder
from tiny_models import tiny_llama

from constrained_spec.config import DecodeConfig
from constrained_spec.engine import prefill as prefill_mod
from constrained_spec.engine.prefill import overlap_pays, prefill_pair
from constrained_spec.errors import ConfigError
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.grammar.vocab import build_vocabulary
from constrained_spec.models.torch.hf import HFModel
from constrained_spec.sampling.distribution import SamplingPolicy


class RecordingModel:
    """Keeps what it was prefilled with and on which thread; sleeps ``delay`` per prefill."""

    device = torch.device("cpu")

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.delay, self.fail = delay, fail
        self.tokens: list[int] = []
        self.threads: list[int] = []
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1
        self.tokens = []

    def prefill(self, tokens: list[int]) -> None:
        self.threads.append(threading.get_ident())
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("draft prefill broke")
        self.tokens.extend(tokens)


@pytest.mark.parametrize("overlap", [False, True])
def test_each_model_gets_its_part_of_the_prompt(overlap):
    target, draft = RecordingModel(), RecordingModel()
    times = prefill_pair(target, draft, [5, 6, 7, 8, 9], 2, overlap)
    assert target.tokens == [5, 6, 7, 8] and draft.tokens == [7, 8]  # the last token comes with the first step
    assert target.resets == draft.resets == 1 and times.overlapped is overlap
    main = threading.get_ident()
    assert target.threads == [main]
    assert (draft.threads[0] != main) is overlap


def test_a_one_token_prompt_only_resets_and_no_draft_is_fine():
    target, draft = RecordingModel(), RecordingModel()
    draft.tokens = [1]
    prefill_pair(target, draft, [3], 0, True)
    assert target.tokens == draft.tokens == [] and target.threads == draft.threads == []
    times = prefill_pair(target, None, [1, 2, 3], 0, True)
    assert target.tokens == [1, 2] and times.draft_seconds == 0.0 and not times.overlapped


def test_overlapped_prefills_run_at_the_same_time():
    """Two 0.3 s prefills take about 0.3 s overlapped and 0.6 s one after the other."""
    start = time.perf_counter()
    t = prefill_pair(RecordingModel(0.3), RecordingModel(0.3), [1, 2, 3], 0, True)
    together = time.perf_counter() - start
    start = time.perf_counter()
    prefill_pair(RecordingModel(0.3), RecordingModel(0.3), [1, 2, 3], 0, False)
    in_turn = time.perf_counter() - start
    assert together < 0.5 < 0.55 < in_turn
    assert t.draft_seconds == pytest.approx(0.3, abs=0.15)


def test_a_draft_error_reaches_the_caller_after_the_target_finished():
    target, draft = RecordingModel(0.1), RecordingModel(fail=True)
    with pytest.raises(RuntimeError, match="draft prefill broke"):
        prefill_pair(target, draft, [1, 2, 3], 0, True)
    assert target.tokens == [1, 2]


def test_auto_overlaps_only_where_cores_would_idle(monkeypatch):
    target, draft = RecordingModel(), RecordingModel()
    assert overlap_pays(target, draft, "on") and not overlap_pays(target, draft, "off")
    assert not overlap_pays(target, None, "on")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(prefill_mod, "usable_cores", lambda: 2)
    assert overlap_pays(target, draft, "auto")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert not overlap_pays(target, draft, "auto")  # torch uses every core already
    monkeypatch.setattr(prefill_mod, "usable_cores", lambda: 4)
    assert overlap_pays(target, draft, "auto")
    assert not overlap_pays(target, draft, "auto", prefill_mod.OVERLAP_MIN_TOKENS - 1)  # too short to be worth a thread
    assert overlap_pays(target, draft, "on", 1)
    draft.device = torch.device("cuda", 0)  # type: ignore[misc]
    assert not overlap_pays(target, draft, "auto")


def test_the_option_is_checked():
    with pytest.raises(ConfigError, match="prefill_overlap"):
        DecodeConfig(prefill_overlap="yes")


@pytest.fixture(scope="module")
def tiny_pair():
    return tiny_llama(50257, seed=1), tiny_llama(50257, seed=2)


def test_overlapped_caches_equal_a_fresh_forward(tiny_pair):
    """Alignment: after an overlapped prefill each cache continues exactly as a full forward over
    the prompt does (checked on the prompt's last token)."""
    ids = torch.randint(0, 50257, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    target, draft = HFModel(tiny_pair[0]), HFModel(tiny_pair[1])
    assert prefill_pair(target, draft, ids, 10, True).overlapped
    for model, wrapper, start in ((tiny_pair[0], target, 0), (tiny_pair[1], draft, 10)):
        assert wrapper.length == len(ids) - 1 - start
        inc = wrapper.extend(ids[-1:])[-1]
        with torch.no_grad():
            full = model(input_ids=torch.tensor([ids[start:]])).logits[0, -1].float()
        assert torch.allclose(inc, full, atol=1e-4), float((inc - full).abs().max())


def test_greedy_output_is_the_same_overlapped_or_not(gpt2_tokenizer, tiny_pair):
    vocab = build_vocabulary(gpt2_tokenizer, 50257)
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(r'\{"name":"[a-z ]{3,20}","n":[0-9]{1,4}\}')
    target, draft = HFModel(tiny_pair[0]), HFModel(tiny_pair[1])
    prompt = gpt2_tokenizer("Give me a record with a name and a number:")["input_ids"]
    outputs = {}
    for mode in ("on", "off"):
        dec = make_decoder(target, draft, automaton, SamplingPolicy(temperature=0.0), num_draft_tokens=4, max_new_tokens=60,
                           debug_checks=True, prefill_overlap=mode)
        result = dec.run(prompt)
        assert result.stats.prefill_overlapped is (mode == "on")
        outputs[mode] = result.token_ids
    plain = make_decoder(target, None, automaton, SamplingPolicy(temperature=0.0), num_draft_tokens=0, max_new_tokens=60).run(prompt)
    assert outputs["on"] == outputs["off"] == plain.token_ids
