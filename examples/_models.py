"""Shared by the examples: the default Qwen2.5-Coder pair, or ``--tiny`` random models (offline).

``--tiny`` builds two small random-weight Llama models over the GPT-2 vocabulary: they need no
download beyond the GPT-2 tokenizer and produce nonsense, but the output still follows its type.
``CONSTRAINED_SPEC_EXAMPLE_MODELS=tiny`` in the environment does the same for every example
(``tests/test_examples.py`` runs the examples that way); the library never reads it.
"""

from __future__ import annotations

import argparse
import os
import tempfile

EXAMPLE_MODELS_ENV = "CONSTRAINED_SPEC_EXAMPLE_MODELS"


def use_tiny(args: argparse.Namespace) -> bool:
    """``--tiny`` given, or ``CONSTRAINED_SPEC_EXAMPLE_MODELS=tiny`` set (any other value is an error)."""
    value = os.environ.get(EXAMPLE_MODELS_ENV, "").strip().lower()
    if value not in ("", "tiny", "default"):
        raise SystemExit(f"{EXAMPLE_MODELS_ENV}={value!r}: use 'tiny' or 'default'")
    return bool(getattr(args, "tiny", False)) or value == "tiny"


def add_model_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--model", default=None, help="target model (default: the library's default)")
    p.add_argument("--draft", default=None, help="draft model, or 'none' (default: the library's default)")
    p.add_argument("--tiny", action="store_true", help="random tiny models: runs offline, output is valid nonsense")
    return p


def tiny_model(vocab_size: int, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def make_generator(args: argparse.Namespace, **options):
    from constrained_spec import Generator
    from constrained_spec.api import DEFAULT_DRAFT, DEFAULT_TARGET

    if use_tiny(args):
        from transformers import AutoTokenizer

        from constrained_spec.models.store.tokenizer_assets import ensure_vocab_tokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(ensure_vocab_tokenizer("gpt-2")))
        options.setdefault("max_new_tokens", 200)
        return Generator(tiny_model(len(tokenizer), 1), tiny_model(len(tokenizer), 2), tokenizer=tokenizer,
                         cache_dir=tempfile.mkdtemp(prefix="constrained-spec-example-"), progress=False, **options)
    draft = args.draft or DEFAULT_DRAFT
    return Generator(args.model or DEFAULT_TARGET, None if draft.lower() == "none" else draft, **options)


def load_transformers(args: argparse.Namespace):
    """(target, draft, tokenizer) as a transformers user loads them: ``AutoModelForCausalLM`` from
    the hub ids (``--model``/``--draft``; default the Qwen2.5-Coder pair), or the ``--tiny`` pair."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if use_tiny(args):
        from constrained_spec.models.store.tokenizer_assets import ensure_vocab_tokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(ensure_vocab_tokenizer("gpt-2")))
        models = [tiny_model(len(tokenizer), 1), tiny_model(len(tokenizer), 2)]
        for model in models:  # a tiny Llama's config names id 2 as EOS: use the tokenizer's
            model.generation_config.eos_token_id = model.generation_config.pad_token_id = tokenizer.eos_token_id
            model.generation_config.bos_token_id = None
        return models[0], models[1], tokenizer
    target_id = args.model or "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    draft_id = args.draft or "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    tokenizer = AutoTokenizer.from_pretrained(target_id)
    draft = None if draft_id.lower() == "none" else AutoModelForCausalLM.from_pretrained(draft_id)
    return AutoModelForCausalLM.from_pretrained(target_id), draft, tokenizer
