"""Prefilled prompts saved on disk for the next process (``models/llamacpp/prompt_states.py``) on the llama.cpp
runtime, on a *quantized* tiny GGUF (Q4_K_M: the repacked and tiled paths whose rounding depends on the
ubatch a position is computed in).

The oracle is the prefill without any store: a prompt prefilled after restoring a saved prefix must
give *bitwise* the same cache bytes. The negative control restores at a point off the ubatch boundary,
which the same comparison rejects: so the boundary rule is what makes the store exact. Also: the store
is bounded, a damaged entry is deleted and computed again, and a new process reuses what an earlier one
saved (the CLI's case)."""

from __future__ import annotations

import random

import pytest
from conftest import require_llamacpp

pytestmark = pytest.mark.xdist_group("llamacpp-invariance")


@pytest.fixture(scope="module")
def q4_path(tmp_path_factory):
    require_llamacpp()
    from tiny_gguf import quantize_gguf, write_tiny_gguf

    base = tmp_path_factory.mktemp("gguf-states")
    f32 = write_tiny_gguf(base / "wide-f32.gguf", seed=5, logit_scale=1.0, n_embd=256, n_ff=512)
    return quantize_gguf(f32, base / "wide-Q4_K_M.gguf", "Q4_K_M")


#: the tests cut prefills every 256 positions (the runtime: every 512, ``PREFILL_PIECE``) to keep the tiny file's prompts
#: short; a piece never exceeds ``N_BATCH``, so one ``llama_decode`` computes it either way
WIDTH = 256


@pytest.fixture(scope="module")
def weights(q4_path):
    import dataclasses

    from constrained_spec.models.llamacpp.model import LlamaCppWeights

    w = LlamaCppWeights(q4_path, threads=2, n_ctx=1024)
    w.pieces = dataclasses.replace(w.pieces, width=WIDTH)
    return w


def _tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(50000) for _ in range(n)]


def _plain(weights, tokens: list[int]) -> bytes:
    """The oracle: a prefill from scratch, in weights of their own (no store, no earlier prompt held)."""
    from constrained_spec.models.llamacpp.model import LlamaCppWeights

    fresh = LlamaCppWeights(weights.path, threads=weights.threads, n_ctx=weights.n_ctx)
    fresh.pieces = weights.pieces  # the same cuts (a test may give its weights a stop token)
    return fresh.prefilled_state(tokens)


def test_a_restored_prefix_gives_bitwise_the_cache_of_a_prefill_from_scratch(weights, tmp_path) -> None:
    """Cold store: the prompt's state is saved at its last boundary (512 of 600 tokens) and the bytes equal
    the plain prefill's. Warm: a second prompt sharing 530 tokens restores 512 and computes the rest,
    bitwise equal to its plain prefill. Control: a store whose restore points are multiples of 16 (off the
    256-token ubatches) gives other bytes than the plain prefill of the same prompt."""
    from constrained_spec.models.llamacpp.pieces import PieceRule
    from constrained_spec.models.llamacpp.prompt_states import PromptStates

    first = _tokens(1, 600)
    second = first[:530] + _tokens(2, 70)
    store = weights.keep_prompt_states(tmp_path / "aligned", max_bytes=1 << 30)
    try:
        assert weights.prefilled_state(first) == _plain(weights, first)
        assert store.misses == 1 and store.hits == 0 and len(store._names()) == 1
        assert weights.prefilled_state(second) == _plain(weights, second)
        assert store.hits == 1
        hit = store.longest(second)
        assert hit is not None and hit.length == 2 * WIDTH

        # the control: restore points every 16 tokens. The first prompt is saved at 592 (positions 512-591 computed as
        # one 80-token ubatch); a prompt of its first 529 tokens restores 528 of them, where a prefill from scratch
        # computes 512-528 as one 17-token ubatch: other kernels, other rounding, other bytes
        weights.prompt_states = PromptStates(tmp_path / "off-boundary", rule=PieceRule(16), max_bytes=1 << 30)
        weights.prefilled_state(first)
        third = first[:529]
        assert weights.prompt_states.longest(third).length == 528
        assert weights.prefilled_state(third) != _plain(weights, third)
    finally:
        weights.prompt_states = None


def test_a_damaged_entry_is_deleted_and_computed_again(weights, tmp_path) -> None:
    from constrained_spec.models.llamacpp.model import LlamaCppWeights
    from constrained_spec.models.llamacpp.prompt_states import STATE_SUFFIX

    tokens = _tokens(3, 300)
    store = weights.keep_prompt_states(tmp_path, max_bytes=1 << 30)
    try:
        weights.prefilled_state(tokens)
        (name,) = store._names()
        (store.folder / (name + STATE_SUFFIX)).write_bytes(b"\0" * 64)  # truncated and wrong
        later = LlamaCppWeights(weights.path, threads=weights.threads, n_ctx=weights.n_ctx)  # as a new process: nothing held
        later.pieces = weights.pieces
        store = later.keep_prompt_states(tmp_path, max_bytes=1 << 30)
        assert later.prefilled_state(tokens) == _plain(weights, tokens)
        assert store.hits == 1  # found, refused by llama.cpp, deleted, then saved afresh
        assert (store.folder / (name + STATE_SUFFIX)).stat().st_size > 64
    finally:
        weights.prompt_states = None


def test_the_store_is_bounded_by_bytes_and_entries(weights, tmp_path) -> None:
    """Three prompts' states where two fit: the least recently used one goes."""
    tokens = [_tokens(10 + i, 300) for i in range(3)]
    probe = weights.keep_prompt_states(tmp_path / "probe", max_bytes=1 << 30)
    weights.prefilled_state(tokens[0])
    one = probe.bytes
    store = weights.keep_prompt_states(tmp_path / "bounded", max_bytes=2 * one + one // 2)
    try:
        for t in tokens:
            weights.prefilled_state(t)
        assert len(store._names()) == 2 and store.bytes <= store.max_bytes
        assert store.longest(tokens[0]) is None and store.longest(tokens[2]) is not None
        few = weights.keep_prompt_states(tmp_path / "few", max_bytes=1 << 30)
        few.max_entries = 1
        for t in tokens:
            weights.prefilled_state(t)
        assert len(few._names()) == 1
    finally:
        weights.prompt_states = None


def test_a_later_process_reuses_what_an_earlier_one_saved(q4_path, tmp_path) -> None:
    """Two processes, one after the other, with the same cache folder: the second restores the first's
    prefix and gets bitwise the bytes the first computed from scratch for the same prompt."""
    import subprocess
    import sys

    script = f"""
import random, sys
from constrained_spec.models.llamacpp.model import LlamaCppWeights
w = LlamaCppWeights({str(q4_path)!r}, threads=2, n_ctx=1024)
w.pieces = __import__("dataclasses").replace(w.pieces, width={WIDTH})
store = w.keep_prompt_states({str(tmp_path)!r}, max_bytes=1 << 30)
rng = random.Random(7)
tokens = [rng.randrange(50000) for _ in range(400)]
digest = __import__("hashlib").sha256(w.prefilled_state(tokens)).hexdigest()
sys.stdout.write(str(store.hits) + " " + digest)
"""
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300) for _ in range(2)]
    (hits1, digest1), (hits2, digest2) = (r.stdout.split() for r in runs)
    assert (hits1, hits2) == ("0", "1") and digest1 == digest2, [r.stderr[-500:] for r in runs]


def test_a_generator_keeps_prompt_states_when_asked(tiny_ggufs, gpt2_tokenizer, tmp_path) -> None:
    """``Generator(prompt_cache_mb=...)`` on llama.cpp: two calls whose prompts share their first 600+
    tokens (a long system message: past the first 512-position cut) restore the saved prefix on the second call, with the same greedy
    output as a Generator without the store; ``prompt_cache_mb=0`` keeps nothing."""
    from constrained_spec.api import Generator
    from constrained_spec.grammar import Regex

    target, draft = (str(p) for p in tiny_ggufs)
    system = {"role": "system", "content": " ".join(f"rule {i}: be brief." for i in range(160))}
    prompts = [[system, {"role": "user", "content": q}] for q in ("First question?", "Second question?")]

    def outputs(cache_mb: int, folder) -> tuple[list[str], object]:
        gen = Generator(target, draft, runtime="llamacpp", tokenizer=gpt2_tokenizer, progress=False, cache_dir=folder,
                        prompt_cache_mb=cache_mb, draft_plan="always", max_new_tokens=12)
        return [gen.run(p, Regex("[a-z ]{1,12}")).text for p in prompts], gen.target.weights.prompt_states

    (texts, store) = outputs(64, tmp_path / "with")
    assert store is not None and store.hits >= 1 and len(store._names()) >= 1
    plain, none = outputs(0, tmp_path / "without")
    assert texts == plain and none is None


STOP = 49999  # the tests' end-of-message token (the tiny vocabulary's own EOG token, 50256, is never drawn)


def _with_stop(q4_path):
    from constrained_spec.models.llamacpp.model import LlamaCppWeights
    from constrained_spec.models.llamacpp.pieces import PieceRule

    w = LlamaCppWeights(q4_path, threads=2, n_ctx=1024)
    w.pieces = PieceRule(WIDTH, frozenset({STOP}))
    return w


def _messages(seed: int) -> tuple[list[int], list[int], list[int]]:
    """A system message (150 tokens and the stop) and two prompts that continue it differently."""
    system = [t for t in _tokens(seed, 150) if t != STOP] + [STOP]
    return system, system + _tokens(seed + 1, 60), system + _tokens(seed + 2, 70)


def test_a_prompt_sharing_a_message_with_the_previous_one_keeps_it_bitwise(q4_path) -> None:
    """In one process, no store: the second prompt keeps the first's cache up to the message end (the stop token) and
    computes only the rest, and its bytes equal a prefill from scratch. A third prompt sharing the message only in
    part keeps nothing of it. The control: keeping the cache at the same place where no cut is (the rule without
    the stop, so a prefill from scratch computes that span as one piece: what reusing any common prefix would do)
    gives other bytes than the prefill from scratch."""
    w = _with_stop(q4_path)
    system, first, second = _messages(20)
    assert w.prefilled_state(first) == _plain(w, first) and w.prefill_reused == 0
    assert w.prefilled_state(second) == _plain(w, second)
    assert w.prefill_reused == len(system)
    third = system[:100] + [t for t in _tokens(99, 50) if t != STOP] + [STOP] + second[len(system):]  # another message
    assert w.prefilled_state(third) == _plain(w, third) and w.prefill_reused == 0

    from constrained_spec.models.llamacpp.model import LlamaCppWeights

    plain = LlamaCppWeights(q4_path, threads=2, n_ctx=1024)  # no stop: the span 0-220 is one piece from scratch
    scratch = plain.prefilled_state(second)
    plain.prefilled_state(first)
    fast = plain._prefill_ctx
    fast.seq_rm(0, len(system))  # keep the first prompt's cache at the common prefix, off the rule's cuts
    fast.prefill(0, len(system), second[len(system):])
    assert fast.seq_state(0) != scratch


def test_the_store_saves_a_prompt_at_its_message_ends(q4_path, tmp_path) -> None:
    """With the store: the first prompt's state is saved at its message end, and a later process whose prompt
    shares only that message restores it, bitwise equal to its prefill from scratch."""
    w = _with_stop(q4_path)
    system, first, second = _messages(30)
    store = w.keep_prompt_states(tmp_path, max_bytes=1 << 30)
    store.rule = w.pieces
    w.prefilled_state(first)
    assert store.longest(second).length == len(system)
    later = _with_stop(q4_path)
    later_store = later.keep_prompt_states(tmp_path, max_bytes=1 << 30)
    later_store.rule = later.pieces
    assert later.prefilled_state(second) == _plain(w, second)
    assert later.prefill_reused == len(system) and later_store.hits == 1


def test_in_memory_a_prompt_restores_a_message_an_earlier_prompt_than_the_previous_one_had(q4_path) -> None:
    """Prompts of schema X, then Y, then X again (the job or server case): the third restores X's system message from
    the memory store, bitwise equal to its prefill from scratch; without the store it keeps nothing (the previous
    prompt, Y's, shares no message with it). The store is bounded by bytes, least recently used out."""
    w = _with_stop(q4_path)
    memory = w.keep_memory_states(1 << 30)
    memory.rule = w.pieces
    system_x, first_x, second_x = _messages(40)
    _, first_y, _ = _messages(50)
    for tokens in (first_x, first_y):
        w.prefilled_state(tokens)
    assert w.prefilled_state(second_x) == _plain(w, second_x) and w.prefill_reused == len(system_x)
    assert memory.folder is None and memory.hits >= 1

    bare = _with_stop(q4_path)  # no store: only the previous prompt's cache is kept
    for tokens in (first_x, first_y, second_x):
        bare.prefilled_state(tokens)
    assert bare.prefill_reused == 0

    small = _with_stop(q4_path)
    one = len(memory._entries.state(memory._names()[0]) or b"")
    bounded = small.keep_memory_states(2 * one + one // 2)
    bounded.rule = small.pieces
    for seed in (60, 70, 80):
        small.prefilled_state(_messages(seed)[1])
    assert len(bounded._names()) <= 2 and bounded.bytes <= bounded.max_bytes
    assert bounded.longest(_messages(60)[2]) is None and bounded.longest(_messages(80)[2]) is not None


def test_prompts_sharing_a_head_keep_it_bitwise(q4_path) -> None:
    """A head (``PieceRule.heads``: the chat header and the schema hint's first words, shared by prompts with other
    schemas) is a cut: a prompt after another that starts with the same head (and then differs before any message
    end) keeps the head's cache and computes the rest, bitwise what a prefill from scratch with the same cuts gives;
    a prompt that does not start with the head has no cut there. Control: the second prompt computed from position 0
    without the head cut gives other bytes (the cut changes the bits, so it must be in every prefill). Heads are fixed
    before any prefill: later, ``share_heads`` refuses."""
    from constrained_spec.models.llamacpp.model import LlamaCppWeights

    weights = LlamaCppWeights(q4_path, threads=2, n_ctx=1024)
    head = _tokens(30, 14)
    assert weights.share_heads([head])
    first, second = head + _tokens(31, 70), head + _tokens(32, 60)
    assert weights.pieces.cuts(0, first) == [14] and weights.pieces.cuts(0, _tokens(33, 84)) == []
    weights.prefilled_state(first)
    got = weights.prefilled_state(second)
    assert weights.prefill_reused == 14
    assert got == _plain(weights, second)
    no_head = LlamaCppWeights(q4_path, threads=2, n_ctx=1024)
    assert no_head.prefilled_state(second) != got
    assert not weights.share_heads([head[:8]])  # too late: states were made with the first cuts
