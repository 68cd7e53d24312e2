"""transformers' door: a ``LogitsProcessor`` for ``model.generate`` and an exact speculative drop-in.

:class:`ConstrainedLogitsProcessor` masks the scores of every row by its own grammar, compiled by
the same path and matched by the same matchers as the engine (the lazy engine: llguidance)::

    processor = ConstrainedLogitsProcessor(Person, tokenizer)            # or a schema, Regex, CFG
    out = model.generate(**inputs, logits_processor=[processor], max_new_tokens=200)
    value = processor.parse(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))

:func:`generate` runs the engine's exact speculative loop (draft, verify, accept, roll back) with
the assistant model as the draft, and returns what ``model.generate`` returns: a tensor of token
ids (prompt included; finished rows padded), or a ``GenerateDecoderOnlyOutput`` with
``return_dict_in_generate=True``::

    out = generate(model, tokenizer, output_type=Person, assistant_model=draft, **inputs)
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, fields, replace
from typing import Any, Sequence

import torch
from transformers import LogitsProcessor

from constrained_spec import SamplingPolicy
from constrained_spec.api import Generator
from constrained_spec.config import DecodeConfig, fields_of
from constrained_spec.errors import ConfigError, GrammarError, TokenBudgetExceeded
from constrained_spec.grammar.compiler import CompiledConstraint, compile_for_vocabulary
from constrained_spec.grammar.matcher import GrammarMatcher
from constrained_spec.grammar.vocab import TokenVocabulary, build_vocabulary
from constrained_spec.lru import LRUCache

__all__ = ["ConstrainedLogitsProcessor", "GenerateOptions", "generate"]


#: vocabularies built for tokenizers, while the tokenizer lives: a processor per call costs no rebuild
_VOCABS: weakref.WeakKeyDictionary[Any, dict[tuple[int, ...] | None, TokenVocabulary]] = weakref.WeakKeyDictionary()


def _vocabulary(tokenizer: Any, eos_token_ids: Sequence[int] | None) -> TokenVocabulary:
    key = None if eos_token_ids is None else tuple(eos_token_ids)
    try:
        held = _VOCABS.setdefault(tokenizer, {})
    except TypeError:  # not weakly referenceable: build it each time
        return build_vocabulary(tokenizer, None, eos_token_ids)
    if key not in held:
        held[key] = build_vocabulary(tokenizer, None, eos_token_ids)
    return held[key]


def _output_types(output_type: Any) -> list[Any]:
    """One output type, or a list (tuple) of them, one per input row. A JSON Schema is never a list."""
    return list(output_type) if isinstance(output_type, (list, tuple)) else [output_type]


def _compile_all(types: list[Any], vocab: TokenVocabulary, encode: Any, schema_options: Any) -> list[CompiledConstraint]:
    """Each output type compiled once (equal ones share their compiled grammar)."""
    by_repr: dict[str, CompiledConstraint] = {}
    out = []
    for output_type in types:
        key = repr(output_type) if not isinstance(output_type, type) else f"{output_type.__module__}.{output_type.__qualname__}"
        if key not in by_repr:
            by_repr[key] = compile_for_vocabulary(output_type, vocab, encode, schema_options)
        out.append(by_repr[key])
    return out


class _Row:
    """One row's matcher and the generated tokens it has taken (EOS included)."""

    def __init__(self, matcher: GrammarMatcher) -> None:
        self.matcher = matcher
        self.tokens: list[int] = []

    def sync(self, generated: list[int]) -> None:
        """Bring the matcher to ``generated`` (beam search may reorder rows: roll back to the common
        prefix, then advance); tokens after an EOS (a finished row's padding) are ignored."""
        common = 0
        for mine, theirs in zip(self.tokens, generated):
            if mine != theirs:
                break
            common += 1
        if common == len(self.tokens) and self.matcher.is_terminated():
            return
        if common < len(self.tokens):
            self.matcher.rollback(common)
            del self.tokens[common:]
        for token in generated[common:]:
            try:
                self.matcher.advance(token)
            except GrammarError as exc:
                raise GrammarError(f"model.generate chose token {token}, which the grammar forbids here: is a logits "
                                   f"processor after ConstrainedLogitsProcessor changing the scores? ({exc})") from exc
            self.tokens.append(token)
            if self.matcher.is_terminated():
                break


class ConstrainedLogitsProcessor(LogitsProcessor):
    """A transformers ``LogitsProcessor`` that allows, in each row, only the tokens its grammar allows.

    ``output_type``: a JSON Schema (dict or JSON text), a Pydantic model class, a
    :class:`~constrained_spec.Regex` or a :class:`~constrained_spec.CFG` (a Lark grammar); or a list
    of them, one per input row (with ``num_return_sequences``/``num_beams`` > 1, each input's rows
    share its type). EOS (``eos_token_ids``, default: the tokenizer's) is allowed only where the
    output is complete; after it a row may only repeat EOS (``model.generate`` pads finished rows).
    Pass the model's EOS here if its ``generation_config.eos_token_id`` is not the tokenizer's, so
    that ``generate`` stops where the grammar ends.

    One processor follows one ``generate`` call at a time; a new prompt starts it afresh. Put it
    last among the processors: a later one that moves the scores could pick a forbidden token
    (an error names that case). Use :meth:`parse` to turn a row's text into the validated value.
    """

    def __init__(self, output_type: Any, tokenizer: Any, *, eos_token_ids: Sequence[int] | None = None,
                 schema_options: Any = None, vocab: TokenVocabulary | None = None) -> None:
        self.tokenizer = tokenizer
        self.vocab = vocab or _vocabulary(tokenizer, eos_token_ids)
        self._types = _output_types(output_type)
        if not self._types:
            raise ConfigError("ConstrainedLogitsProcessor needs at least one output type")
        self.compiled = _compile_all(self._types, self.vocab, self._encode, schema_options)
        self._rows: list[_Row] = []
        self._prompt: torch.Tensor | None = None
        self._eos = torch.tensor(self.vocab.eos_token_ids, dtype=torch.long)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def reset(self) -> None:
        """Forget the rows: the next call starts a new generation."""
        self._rows, self._prompt = [], None

    def _start(self, input_ids: torch.Tensor) -> None:
        batch = int(input_ids.shape[0])
        if batch % len(self.compiled):
            raise ConfigError(f"{len(self.compiled)} output types for {batch} rows: give one per input row")
        per = batch // len(self.compiled)  # num_return_sequences / num_beams rows per input
        self._rows = [_Row(self.compiled[r // per].matcher()) for r in range(batch)]
        self._prompt = input_ids.detach().clone()

    def _is_new(self, input_ids: torch.Tensor) -> bool:
        prompt = self._prompt
        if prompt is None or input_ids.shape[0] != prompt.shape[0] or input_ids.shape[1] < prompt.shape[1]:
            return True
        return not torch.equal(input_ids[:, : prompt.shape[1]], prompt.to(input_ids.device))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._is_new(input_ids):
            self._start(input_ids)
        assert self._prompt is not None
        start = int(self._prompt.shape[1])
        width = int(scores.shape[-1])
        allowed = torch.zeros((len(self._rows), width), dtype=torch.bool)
        generated = input_ids[:, start:].tolist()
        for r, row in enumerate(self._rows):
            row.sync(generated[r])
            if row.matcher.is_terminated():
                allowed[r, self._eos[self._eos < width]] = True
                continue
            mask = row.matcher.allowed_mask()
            n = min(width, int(mask.shape[0]))
            allowed[r, :n] = mask[:n]
            if row.matcher.is_accepting():  # every EOS id ends a complete output, as in the engine
                allowed[r, self._eos[self._eos < width]] = True
        return scores.masked_fill(~allowed.to(scores.device), float("-inf"))  # type: ignore[return-value]

    def parse(self, text: str, row: int = 0) -> Any:
        """The value of a finished row's text (a Pydantic instance, a JSON value, or the text for a
        regex or grammar), validated as the engine validates; ``row`` picks the row's output type."""
        per = max(1, len(self._rows) // len(self.compiled)) if self._rows else 1
        return self.compiled[min(row // per, len(self.compiled) - 1)].parse(text)

    def is_done(self) -> list[bool]:
        """Per row: whether its grammar has ended (EOS taken)."""
        return [row.matcher.is_terminated() for row in self._rows]


# -- the drop-in for assisted generation -----------------------------------------------------------

#: Generators the drop-in keeps, by (model, assistant, tokenizer) identity: a few, least recently used first out
_GENERATORS: LRUCache[tuple[int, int, int], tuple[Any, Generator]] = LRUCache(2)


def generator_for(model: Any, tokenizer: Any, assistant_model: Any = None, **options: Any) -> Generator:
    """The :class:`~constrained_spec.Generator` over these loaded models that :func:`generate` uses
    (kept for the next call with the same objects; ``options`` apply when it is built)."""
    key = (id(model), id(assistant_model), id(tokenizer))
    held = _GENERATORS.get(key)
    if held is not None and held[0] == (model, assistant_model, tokenizer):
        return held[1]
    options.setdefault("progress", False)
    generator = Generator(model, assistant_model, tokenizer=tokenizer, **options)
    # the tuple keeps the objects alive while cached, so their ids cannot be reused by others
    _GENERATORS.put(key, ((model, assistant_model, tokenizer), generator))
    return generator


def _rows_of(input_ids: Any, attention_mask: Any) -> tuple[torch.Tensor, list[list[int]]]:
    """The input as a [B, T] tensor and each row's prompt tokens (padding left out by the mask)."""
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 1:
        ids = ids[None]
    if attention_mask is None:
        return ids, ids.tolist()
    mask = torch.as_tensor(attention_mask).reshape(ids.shape).bool()
    return ids, [row[keep].tolist() for row, keep in zip(ids.cpu(), mask.cpu())]


@torch.inference_mode()
def _masked_scores(model: Any, compiled: CompiledConstraint, prompt: list[int], new: list[int], temperature: float) -> list[torch.Tensor]:
    """The target's logits at each new token's position, the grammar mask applied (-inf outside):
    one forward over the whole row; divided by ``temperature`` when it is > 0."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([prompt + new], device=device)).logits[0, len(prompt) - 1: len(prompt) - 1 + len(new)].float()
    matcher = compiled.matcher()
    out = []
    eos = torch.tensor(matcher.vocab.eos_token_ids, dtype=torch.long)
    for position, token in enumerate(new):
        allowed = torch.zeros(logits.shape[-1], dtype=torch.bool)
        mask = matcher.allowed_mask()
        n = min(allowed.shape[0], int(mask.shape[0]))
        allowed[:n] = mask[:n]
        if matcher.is_accepting():
            allowed[eos[eos < allowed.shape[0]]] = True
        row = logits[position].masked_fill(~allowed.to(logits.device), float("-inf"))
        out.append(row / temperature if temperature > 0 else row)
        if not matcher.is_terminated():
            matcher.advance(token)
    return out


#: ``model.generate`` keywords a tokenizer's output or a caller may carry that change nothing here
_IGNORED = ("token_type_ids", "use_cache")
#: ``model.generate`` keywords with no counterpart in the speculative loop (allowed at their default, 1)
_REFUSED = {"num_beams": "beam search is not exact sampling; use model.generate with the processor",
            "num_return_sequences": "repeat the input rows instead (each row is its own request)"}


@dataclass(frozen=True)
class GenerateOptions:
    """The ``model.generate`` keywords :func:`generate` reads. None: the ``generation_config``'s
    value (the one given, else the model's), as in transformers; ``max_new_tokens`` then falls back
    to ``max_length`` (20 where unset) less the prompt. ``seed`` seeds the sampling (row r draws
    with ``seed + r``; transformers uses torch's global generator). ``num_assistant_tokens``: the
    draft length (the engine's ``num_draft_tokens``). ``generator``: a
    :class:`~constrained_spec.Generator` of yours (its models) instead of one built over these."""

    assistant_model: Any = None
    attention_mask: Any = None
    generation_config: Any = None
    max_new_tokens: int | None = None
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    num_assistant_tokens: int | None = None
    pad_token_id: int | list[int] | None = None
    return_dict_in_generate: bool = False
    output_scores: bool = False
    generator: Generator | None = None

    @classmethod
    def split(cls, keywords: dict[str, Any]) -> tuple[GenerateOptions, dict[str, Any]]:
        """A call's keywords as options and :class:`~constrained_spec.config.DecodeConfig` fields;
        keywords that change nothing here (``use_cache``, ``token_type_ids``) are dropped, those with
        no counterpart (``num_beams``...) refused unless 1 (ConfigError); any other: TypeError."""
        rest = {k: v for k, v in keywords.items() if k not in _IGNORED}
        for name, why in _REFUSED.items():
            if rest.get(name) not in (None, 1):
                raise ConfigError(f"generate() does not take {name}={rest[name]!r}: {why}")
            rest.pop(name, None)
        mine = {f.name for f in fields(cls)}
        unknown = set(rest) - mine - fields_of(DecodeConfig)
        if unknown:
            raise TypeError(f"generate() got unexpected keyword argument(s) {sorted(unknown)}")
        options = cls(**{k: v for k, v in rest.items() if k in mine})
        decode = {k: v for k, v in rest.items() if k not in mine}
        if options.num_assistant_tokens is not None:
            decode["num_draft_tokens"] = options.num_assistant_tokens
        return options, decode

    def _setting(self, name: str, config: Any, default: Any) -> Any:
        given = getattr(self, name)
        if given is not None:
            return given
        value = getattr(config, name, None)
        return default if value is None else value

    def policy(self, config: Any) -> SamplingPolicy:
        """Temperature, top-k and top-p (greedy unless ``do_sample``), without a seed (set per row)."""
        if not self._setting("do_sample", config, False):
            return SamplingPolicy(temperature=0.0)
        return SamplingPolicy(temperature=float(self._setting("temperature", config, 1.0)),
                              top_k=int(self._setting("top_k", config, 0)), top_p=float(self._setting("top_p", config, 1.0)))

    def budget(self, config: Any, prompt_width: int) -> int:
        """New tokens per row: ``max_new_tokens``, else ``max_length`` (20 where unset) less the prompt."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        configured = getattr(config, "max_new_tokens", None)
        if configured is not None:
            return int(configured)
        return max(1, (getattr(config, "max_length", None) or 20) - prompt_width)

    def pad(self, config: Any, eos_ids: Sequence[int]) -> int:
        """The id finished rows are padded with: ``pad_token_id``, else the first EOS."""
        pad = self._setting("pad_token_id", config, None)
        return int(eos_ids[0] if pad is None else (pad[0] if isinstance(pad, list) else pad))


def generate(model: Any, tokenizer: Any, input_ids: Any, output_type: Any, **keywords: Any) -> Any:
    """``model.generate(input_ids, assistant_model=draft, logits_processor=[ConstrainedLogitsProcessor(...)])``
    by the engine's exact speculative loop: every row's output follows its ``output_type`` (one, or
    a list with one per row) and is distributed exactly as the target's constrained sampling would
    give it (greedy: the same tokens as ``model.generate`` with the processor).

    Returns a ``LongTensor`` [B, T + new]: each input row (padding kept), its new tokens (EOS
    included where the grammar ended), then ``pad_token_id`` up to the longest row; or with
    ``return_dict_in_generate=True`` a ``GenerateDecoderOnlyOutput`` whose ``scores`` (with
    ``output_scores=True``) hold per new token the target's logits with the grammar mask applied
    (-inf outside; divided by the temperature when sampling; top-k/top-p not applied), one extra
    forward per row. A row that runs out of ``max_new_tokens`` before its grammar completes is
    returned as far as it got, as ``model.generate`` would.

    ``keywords``, as ``model.generate`` takes them: the fields of :class:`GenerateOptions`
    (``assistant_model``, ``attention_mask``, ``generation_config``, ``max_new_tokens``,
    ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``seed``, ``num_assistant_tokens``,
    ``pad_token_id``, ``return_dict_in_generate``, ``output_scores``, ``generator``), and
    :class:`~constrained_spec.config.DecodeConfig` fields for this call (``proposers``,
    ``adaptive``, ``draft_plan``...); any other name is a TypeError, before any work. Rows decode
    one after another.
    """
    options, decode_options = GenerateOptions.split(keywords)
    gen = options.generator or generator_for(model, tokenizer, options.assistant_model)
    config = options.generation_config if options.generation_config is not None else getattr(model, "generation_config", None)
    policy = options.policy(config)
    ids, prompts = _rows_of(input_ids, options.attention_mask)
    budget = options.budget(config, int(ids.shape[1]))
    types = _output_types(output_type)
    if len(ids) % len(types):
        raise ConfigError(f"{len(types)} output types for {len(ids)} rows: give one per input row")
    per = len(ids) // len(types)
    pad = options.pad(config, gen.vocab.eos_token_ids)
    rows: list[list[int]] = []
    all_scores: list[list[torch.Tensor]] = []
    for r, prompt in enumerate(prompts):
        seeded = replace(policy, seed=None if options.seed is None else options.seed + r)
        new, scores = _decode_row(gen, model, prompt, types[r // per], seeded, budget, options.output_scores, decode_options)
        rows.append(new)
        all_scores.append(scores)
    sequences = _padded(ids, rows, pad)
    if not options.return_dict_in_generate:
        return sequences
    return _as_output(sequences, all_scores if options.output_scores else None, pad, gen)


def _decode_row(gen: Generator, model: Any, prompt: list[int], output: Any, policy: SamplingPolicy, budget: int,
                output_scores: bool, decode_options: dict[str, Any]) -> tuple[list[int], list[torch.Tensor]]:
    """One row: its new tokens (the EOS it ended with included: the one the engine sampled, where
    there are several) and, where asked, the masked target scores at each of them."""
    try:
        result = gen.run(prompt, output, max_new_tokens=budget, temperature=policy.temperature, top_k=policy.top_k,
                         top_p=policy.top_p, seed=policy.seed, **decode_options)
        new = list(result.token_ids)
        if result.eos_token_id is not None:
            new.append(result.eos_token_id)
    except TokenBudgetExceeded as exc:  # as model.generate: the row as far as it got
        new = list(exc.token_ids or [])
    scores = _masked_scores(model, gen.compile(output), prompt, new, policy.temperature) if output_scores else []
    return new, scores


def _padded(ids: torch.Tensor, rows: list[list[int]], pad: int) -> torch.Tensor:
    """The input rows, each followed by its new tokens, padded with ``pad`` to the longest."""
    longest = max((len(n) for n in rows), default=0)
    sequences = torch.full((len(ids), ids.shape[1] + longest), pad, dtype=torch.long)
    sequences[:, : ids.shape[1]] = ids
    for r, new in enumerate(rows):
        sequences[r, ids.shape[1]: ids.shape[1] + len(new)] = torch.tensor(new, dtype=torch.long)
    return sequences.to(ids.device)


def _as_output(sequences: torch.Tensor, all_scores: list[list[torch.Tensor]] | None, pad: int, gen: Generator) -> Any:
    """The ``GenerateDecoderOnlyOutput`` of ``return_dict_in_generate``: per step, every row's
    scores (a finished row's as transformers writes its padding); None without ``output_scores``."""
    from transformers.generation import GenerateDecoderOnlyOutput

    step_scores = None
    if all_scores is not None:
        longest = max((len(s) for s in all_scores), default=0)
        width = next((s[0].shape[-1] for s in all_scores if s), int(gen.target.vocab_size))
        filler = torch.full((width,), float("-inf"))
        filler[pad] = 0.0  # a finished row's padding, as transformers writes it
        step_scores = tuple(
            torch.stack([(s[i] if i < len(s) else filler.to(s[0].device if s else "cpu")).to(sequences.device) for s in all_scores])
            for i in range(longest)
        )
    return GenerateDecoderOnlyOutput(sequences=sequences, scores=step_scores)  # type: ignore[arg-type]
