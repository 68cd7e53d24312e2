"""Loading a Generator's models: specs or model objects -> wrapped models and their tokenizer.

Models given by spec (a short name, a folder, a ``.gguf`` file, a hub id) are loaded once per
(spec, dtype, cache folder, role, device, runtime) and shared by every live Generator that asks for
them (a registry of weak references: the weights go when the last Generator holding them goes);
each Generator wraps them in its own KV cache. Model objects are used where they are. Also here:
what a Generator reads off its models (their context window, their end-of-generation ids) and the
options it applies to them once loaded (prefill twins, the draft's prefix head).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from constrained_spec.config import ModelConfig
from constrained_spec.errors import ConfigError, ModelLoadError
from constrained_spec.models.protocol import SequenceModel, restricted_head
from constrained_spec.models.torch.hf import wrap

__all__ = ["LoadedModel", "LoadedModels", "attach_prefill_twins", "context_length", "eos_token_ids", "load_model", "load_models",
           "load_shared", "set_draft_head"]


class LoadedModel:
    """A model and its tokenizer as loaded from a spec; Generators hold it, the registry only weakly."""

    __slots__ = ("model", "tokenizer", "__weakref__")

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer


#: models loaded from a spec, by (spec, dtype, cache folder, role, device, runtime), while some
#: Generator holds them: a second Generator (or ``generate_json``'s default one) with the same spec
#: reuses the weights instead of loading them again
_LOADED: weakref.WeakValueDictionary[tuple, LoadedModel] = weakref.WeakValueDictionary()
_LOADED_LOCK = threading.Lock()


def load_shared(spec: str, role: str, cache_dir: Any, dtype: str, progress: bool, device: str = "cpu",
                runtime: str = "torch") -> LoadedModel:
    """The loaded (model, tokenizer) of ``spec`` on ``device`` (resolved: ``cpu`` / ``cuda:N``) by
    ``runtime`` (resolved: ``torch`` / ``llamacpp``): the registry's, else a fresh load registered.

    ``role`` is part of the key: ``dtype="auto"`` and the packing of the output head depend on it.
    """
    from constrained_spec.models.torch.resolve import resolve_model

    key = (spec, str(dtype), None if cache_dir is None else str(cache_dir), role, device, runtime)
    with _LOADED_LOCK:  # one load per key, even when two threads ask at once
        hit = _LOADED.get(key)
        if hit is None:
            if runtime == "llamacpp":
                from constrained_spec.models.llamacpp.model import load_llamacpp

                model, tok = load_llamacpp(spec, cache_dir=cache_dir, progress=progress, tokenizer=False)
            else:
                model, tok = resolve_model(spec, cache_dir=cache_dir, dtype=dtype, progress=progress, role=role, device=device)
            hit = _LOADED[key] = LoadedModel(model, tok)
    return hit


def load_model(spec: Any, tokenizer: Any, role: str, models: ModelConfig, progress: bool,
               keep: list[LoadedModel], batched: bool = False,
               prompt_heads: Callable[[Any], Sequence[Sequence[int]]] | None = None) -> tuple[SequenceModel, Any]:
    """A model spec loaded as ``models`` says (its cache folder, device, runtime; ``dtype`` for the
    target, ``draft_dtype`` or else ``dtype`` for the draft), or a model object, left where it is (an
    explicit device that is not where the object lives is a ConfigError); and its tokenizer.
    ``keep`` receives the registry entries the caller must hold while it uses them. ``prompt_heads``: tokenizer ->
    the token ids many prompts start with (``prompts.chat.hint_heads``), where llama.cpp cuts prefills so that
    prompts with other schemas keep them."""
    from constrained_spec.models.runtime import resolve_runtime
    from constrained_spec.models.torch.devices import normalize_device, resolve_device, same_device

    dtype = models.draft_dtype if role == "draft" and models.draft_dtype is not None else models.dtype
    if isinstance(spec, str):
        where = resolve_device(models.device)
        concrete = resolve_runtime(models.runtime, spec, where, dtype, batched=batched)
        loaded = load_shared(spec, role, models.cache_dir, dtype, progress, where, concrete)
        keep.append(loaded)  # the Generator's strong reference keeps the registry entry alive
        if tokenizer is None and loaded.tokenizer is None and concrete == "llamacpp":  # made on first need only
            from constrained_spec.models.llamacpp.model import gguf_tokenizer

            loaded.tokenizer = gguf_tokenizer(loaded.model.path, models.cache_dir)
        if concrete == "llamacpp" and prompt_heads is not None:  # the chat header and the hint's first words
            loaded.model.share_heads(prompt_heads(tokenizer or loaded.tokenizer))
        if concrete == "llamacpp" and models.prompt_cache_mb > 0 and loaded.model.prompt_states is None:
            from constrained_spec.paths import cache_root

            loaded.model.keep_prompt_states(cache_root(models.cache_dir), models.prompt_cache_mb << 20)
        if concrete == "llamacpp" and models.prompt_memory_mb > 0 and loaded.model.memory_states is None:
            loaded.model.keep_memory_states(models.prompt_memory_mb << 20)
        return wrap(loaded.model), tokenizer or loaded.tokenizer
    if tokenizer is None and not isinstance(spec, SequenceModel):
        raise ModelLoadError(f"a {role} model object needs its tokenizer: pass tokenizer=...")
    model = wrap(spec)
    if normalize_device(models.device) != "auto" and not same_device(model.device, resolve_device(models.device)):
        raise ConfigError(f"the {role} model object is on {model.device}, not on device={models.device!r}: move it there "
                          "first (a model object is used where it is), or pass device='auto'")
    return model, tokenizer


@dataclass
class LoadedModels:
    """A Generator's target and (optional) draft, wrapped, with their tokenizers and the registry
    entries that keep shared weights alive while the Generator lives."""

    target: SequenceModel
    tokenizer: Any
    draft: SequenceModel | None = None
    draft_tokenizer: Any = None
    keep: list[LoadedModel] = field(default_factory=list)


def load_models(models: ModelConfig, tokenizer: Any = None, progress: bool = True, batched: bool = False,
                prompt_heads: Callable[[Any], Sequence[Sequence[int]]] | None = None) -> LoadedModels:
    """``models.model`` and ``models.draft`` (specs or model objects; ``tokenizer`` for objects)
    loaded as ``models`` says; the draft of a spec loads its own tokenizer. ``batched``: for
    continuous batching (``runtime="auto"`` then picks torch on a CPU: ``models.runtime``); ``prompt_heads``: see
    :func:`load_model`."""
    out = LoadedModels(target=None, tokenizer=None)  # type: ignore[arg-type]  # filled below
    out.target, out.tokenizer = load_model(models.model, tokenizer, "target", models, progress, out.keep, batched, prompt_heads)
    if models.draft is not None:
        draft_tokenizer = None if isinstance(models.draft, str) else tokenizer
        out.draft, out.draft_tokenizer = load_model(models.draft, draft_tokenizer, "draft", models, progress, out.keep, batched,
                                                    prompt_heads)
    return out


def attach_prefill_twins(target: SequenceModel, draft: SequenceModel | None, models: ModelConfig, split: int) -> int:
    """Prefill twins (``models.prefill_dtype`` for the target, ``models.draft_prefill_dtype`` for
    the draft: "same", "bf16" or "fp32"; None is "same") and the prefill split; the twins' bytes."""
    from constrained_spec.models.torch.prefill_twin import attach_prefill

    used = attach_prefill(target, models.prefill_dtype, split)
    if draft is not None:
        used += attach_prefill(draft, models.draft_prefill_dtype or "same", split)
    return used


def set_draft_head(draft: SequenceModel | None, size: int) -> None:
    """Let the draft score only the first ``size`` token ids (its prefix head) where it can and the
    vocabulary is at least twice as large (``DecodeConfig.draft_head_tokens``; 0: never)."""
    heads = restricted_head(draft) if draft is not None else None
    if size and heads is not None and size <= heads.vocab_size // 2:
        heads.set_head_prefix(size)


def eos_token_ids(tokenizer: Any, target: Any) -> list[int]:
    """The end-of-generation ids: the tokenizer's EOS and the target's generation config's (or,
    for a model that is not a transformers one, the ids it names itself)."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    config = getattr(getattr(target, "model", None), "generation_config", None)
    extra = getattr(config, "eos_token_id", None)
    if config is None:  # a model that is not a transformers one may name its end-of-generation ids itself
        extra = list(getattr(target, "eos_token_ids", ()))
    ids += extra if isinstance(extra, list) else ([extra] if extra is not None else [])
    return [i for i in dict.fromkeys(ids) if i is not None]


def context_length(tokenizer: Any, *models: Any) -> int | None:
    """The smallest context window the models' configs (``max_position_embeddings``...) and the
    tokenizer's ``model_max_length`` declare; None when none declares one."""
    limits = []
    for model in models:
        config = getattr(model, "config", None) or getattr(getattr(model, "model", None), "config", None)
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                limits.append(value)
                break
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and 0 < value < 10**8:  # transformers writes ~1e30 for "unknown"
        limits.append(value)
    return min(limits) if limits else None
