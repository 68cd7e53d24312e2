"""Tiny random-weight Llama-style models over a real tokenizer's vocabulary, built in the test."""

from __future__ import annotations

import torch


def tiny_llama(vocab_size: int, seed: int, hidden: int = 32, layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # larger logits than the default init, so the models disagree often
        model.model.embed_tokens.weight.mul_(20.0)
    return model
