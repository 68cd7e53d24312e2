"""Tiny random-weight Llama GGUF files over a real vocabulary (GPT-2's), written with the ``gguf`` package.

The vocabulary is the tests' GPT-2 tokenizer (built from the vocabulary-only GGUF that
llama-cpp-python's sdist ships, ``ggml-vocab-gpt-2.gguf``), written back as GGUF tokenizer
metadata (tokens, merges, types: what that file holds), so llama.cpp and transformers read one
vocabulary. Weights are float32 and seeded: a file is a pure function of its seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from constrained_spec.models.store.tokenizer_assets import ensure_vocab_tokenizer

#: shapes of the tiny model: small, but with grouped-query attention and two layers like the real ones
N_EMBD, N_FF, N_LAYER, N_HEAD, N_HEAD_KV = 64, 128, 2, 4, 2


def gpt2_vocabulary() -> tuple[list[str], list[str], list[int], int]:
    """GPT-2's tokens (byte-level strings, by id), merges ("a b"), token types and end-of-text id."""
    data = json.loads((ensure_vocab_tokenizer("gpt-2") / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = data["model"]["vocab"]
    tokens = [""] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    special = {t["id"] for t in data["added_tokens"] if t.get("special")}
    types = [3 if i in special else 1 for i in range(len(tokens))]  # 3: control, 1: normal (gguf.TokenType)
    return tokens, merges, types, min(special)


def write_tiny_gguf(path: Path, seed: int, logit_scale: float = 0.35, n_embd: int = N_EMBD, n_ff: int = N_FF) -> Path:
    """Write a 2-layer Llama GGUF (n_embd 64, tied output head) with seeded random float32 weights.

    ``logit_scale`` is the output norm's weight: it sets how peaked the next-token distributions are.
    ``n_embd`` and ``n_ff`` of 256 or more (multiples of 256) let K-quants hold every matrix (:func:`quantize_gguf`)."""
    import gguf

    tokens, merges, types, eos = gpt2_vocabulary()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"tiny-llama-{seed}")
    writer.add_context_length(1024)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(n_embd // N_HEAD)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eos)
    writer.add_eos_token_id(eos)

    rng = np.random.default_rng(seed)

    def linear(out: int, inp: int) -> np.ndarray:
        return (rng.standard_normal((out, inp)) / np.sqrt(inp)).astype(np.float32)

    kv = n_embd // N_HEAD * N_HEAD_KV
    writer.add_tensor("token_embd.weight", rng.standard_normal((len(tokens), n_embd)).astype(np.float32))
    writer.add_tensor("output_norm.weight", np.full(n_embd, logit_scale, dtype=np.float32))
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", linear(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", linear(kv, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", linear(kv, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", linear(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", linear(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", linear(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", linear(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


#: llama.cpp's file types (enum llama_ftype) the quantized fixtures use
FTYPES = {"Q8_0": 7, "Q4_K_M": 15}


def quantize_gguf(source: Path, dest: Path, ftype: str) -> Path:
    """``source`` quantized to ``ftype`` ("Q4_K_M" or "Q8_0") by llama.cpp's own quantizer (the binding's
    ``llama_model_quantize``), as a user's quantized file is made."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(dest).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed ({rc}) for {ftype}")
    return dest
