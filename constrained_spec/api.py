"""Public API: ``generate_json``, ``generate(prompt, output_type=...)`` and the reusable ``Generator``.

A :class:`Generator` holds the loaded target and draft models, their tokenizer, the vocabulary and
a compile cache (in memory and on disk), and serves many calls. Every returned value has reached a
final state of its automaton and, for JSON outputs, validates against its schema with jsonschema.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator, Sequence

from constrained_spec.config import DEFAULT_DRAFT, DEFAULT_TARGET, SCHEMA_HINT_STYLES, DecodeConfig, ModelConfig, fields_of
from constrained_spec.engine.batching import BatchCoordinator
from constrained_spec.engine.draft_length import AdaptiveDraftLength
from constrained_spec.engine.request import DecodeRequest, RequestBuilder
from constrained_spec.engine.smc import SMCReport, check_smc_options
from constrained_spec.engine.stats import DecodeHooks, DecodeStats
from constrained_spec.errors import CompileLimitError, ConfigError, ContextLengthError, ModelLoadError, OutputValidationError, VocabularyMismatchError
from constrained_spec.grammar import CFG, OutputSpec, Regex, output_spec
from constrained_spec.grammar.automaton import AutomatonCompiler, CompiledAutomaton
from constrained_spec.grammar.lazy import MAX_SOURCE_CHARS, LazyGrammar, compile_grammar
from constrained_spec.grammar.length_bound import max_output_bytes
from constrained_spec.grammar.matcher import AutomatonMatcher, GrammarMatcher
from constrained_spec.grammar.schema_refs import validation_errors as validate_value
from constrained_spec.grammar.vocab import TokenVocabulary, build_vocabulary
from constrained_spec.lru import LRUCache
from constrained_spec.models.hf import wrap
from constrained_spec.models.protocol import SequenceModel, restricted_head
from constrained_spec.prompts import SCHEMA_HINT_MAX_CHARS as SCHEMA_HINT_MAX_CHARS  # re-exported: api.SCHEMA_HINT_MAX_CHARS
from constrained_spec.prompts import prompt_token_ids, schema_hint
from constrained_spec.sampling import SamplingPolicy

if TYPE_CHECKING:
    from constrained_spec.streams import StreamChunk

__all__ = ["CFG", "Generator", "GenerationResult", "Regex", "GRAMMAR_ENGINES", "generate", "generate_json", "schema_hint", "DEFAULT_TARGET", "DEFAULT_DRAFT"]


#: the grammar engines: ``"lazy"`` (llguidance: regex and Lark grammars compiled in about a
#: millisecond, masks computed as the output reaches them; the default) and ``"automaton"`` (the
#: eager byte DFA of each regex, built per vocabulary and cached on disk; regexes only)
GRAMMAR_ENGINES = ("lazy", "automaton")


@dataclass
class GenerationResult:
    """A validated value, the text it was parsed from, its token ids and the decoding stats."""

    value: Any
    text: str
    token_ids: list[int]
    stats: DecodeStats
    prompt_tokens: int = 0  # the prompt's length in tokens, chat template and schema hint included
    tree: Any = None  # for a Lark grammar (CFG): lark's parse tree of ``text`` (None past lark's parse budget)
    smc: SMCReport | None = None  # alignment="smc": every particle's text and weight, and log Z


@dataclass(frozen=True)
class CompiledConstraint:
    """An output type compiled for one vocabulary; immutable and shareable across requests."""

    spec: OutputSpec
    grammar: CompiledAutomaton | LazyGrammar

    @property
    def automaton(self) -> CompiledAutomaton:
        """The eager automaton (engine ``"automaton"`` only)."""
        if not isinstance(self.grammar, CompiledAutomaton):
            raise TypeError("this constraint was compiled by the lazy engine: it has no eager automaton")
        return self.grammar

    @functools.cached_property
    def output_bound(self) -> int | None:
        """The most UTF-8 bytes an output can take (None: unbounded or unknown); read by the draft plan."""
        if self.spec.kind == "lark" or self.spec.grammar is not None:
            return None  # a context-free language, or a recursive schema's unbounded nesting
        return max_output_bytes(self.spec.regex)

    def matcher(self) -> GrammarMatcher:
        """A fresh per-request matcher at the start of the grammar."""
        if isinstance(self.grammar, CompiledAutomaton):
            return AutomatonMatcher(self.grammar)
        return self.grammar.matcher()

    def parse_tree(self, text: str) -> Any:
        """lark's parse tree of ``text`` (kind lark): lark judges the language of a Lark grammar.

        None where lark's parse ran past its budget (linear in the text; an ambiguous grammar makes
        Earley cubic): the text stands on the grammar engine's acceptance.
        """
        from constrained_spec.grammar.lark_check import parse_with_lark

        return parse_with_lark(self.spec.regex, text)

    def parse(self, text: str) -> Any:
        """Turn finished text into the returned value, validating JSON against its schema."""
        if self.spec.kind in ("regex", "lark"):
            if self.spec.kind == "lark":
                self.parse_tree(text)
            return text
        value = json.loads(text)
        if self.spec.kind == "pydantic":
            from pydantic import ValidationError

            try:
                return self.spec.model.model_validate(value)
            except ValidationError as exc:
                raise OutputValidationError(f"generated value fails the Pydantic model: {exc}") from exc
        errors = validate_value(self.spec.schema, value, self.spec.schema_options)
        if errors:
            first = errors[0]
            raise OutputValidationError(
                f"generated value fails its schema at /{'/'.join(map(str, first.path))}: {first.message}"
            )
        return value


def lazy_grammar(spec: OutputSpec, vocab: TokenVocabulary, encode: Callable[[str], list[int]],
                 max_source_chars: int = MAX_SOURCE_CHARS) -> LazyGrammar:
    """The lazy engine's grammar of ``spec`` for ``vocab`` (a Lark grammar checked by lark first; a
    recursive schema by its Lark form, nesting unbounded; else its regex)."""
    if spec.kind == "lark":
        from constrained_spec.grammar.lark_check import check_lark_grammar

        check_lark_grammar(spec.regex)  # lark must load what it is to judge
        return compile_grammar("lark", spec.regex, vocab, encode, max_source_chars)
    if spec.grammar is not None:  # a recursive schema: unbounded nesting
        return compile_grammar("lark", spec.grammar, vocab, encode, max_source_chars)
    return compile_grammar("regex", spec.regex, vocab, encode, max_source_chars)


def compile_for_vocabulary(output_type: Any, vocab: TokenVocabulary, encode: Callable[[str], list[int]],
                           schema_options: Any = None) -> CompiledConstraint:
    """An output type compiled for ``vocab`` as a Generator with the default (lazy) engine compiles
    it, without models: the transformers logits processor's path (``integrations.transformers``)."""
    spec = output_type if isinstance(output_type, OutputSpec) else output_spec(output_type, schema_options)
    return CompiledConstraint(spec, lazy_grammar(spec, vocab, encode))


class _Loaded:
    """A model and its tokenizer as loaded from a spec; Generators hold it, the registry only weakly."""

    __slots__ = ("model", "tokenizer", "__weakref__")

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer


#: models loaded from a spec, by (spec, dtype, cache folder, role), while some Generator holds them:
#: a second Generator (or ``generate_json``'s default one) with the same spec reuses the weights
#: instead of loading them again; each Generator wraps them in its own KV cache
_LOADED: weakref.WeakValueDictionary[tuple, _Loaded] = weakref.WeakValueDictionary()
_LOADED_LOCK = threading.Lock()


def _load_shared(spec: str, role: str, cache_dir: Any, dtype: str, progress: bool, device: str = "cpu",
                 runtime: str = "torch") -> _Loaded:
    """The loaded (model, tokenizer) of ``spec`` on ``device`` (resolved: ``cpu`` / ``cuda:N``) by
    ``runtime`` (resolved: ``torch`` / ``llamacpp``): the registry's, else a fresh load registered.

    ``role`` is part of the key: ``dtype="auto"`` and the packing of the output head depend on it.
    """
    from constrained_spec.models.store import resolve_model

    key = (spec, str(dtype), None if cache_dir is None else str(cache_dir), role, device, runtime)
    with _LOADED_LOCK:  # one load per key, even when two threads ask at once
        hit = _LOADED.get(key)
        if hit is None:
            if runtime == "llamacpp":
                from constrained_spec.models.llamacpp import load_llamacpp

                model, tok = load_llamacpp(spec, cache_dir=cache_dir, progress=progress, tokenizer=False)
            else:
                model, tok = resolve_model(spec, cache_dir=cache_dir, dtype=dtype, progress=progress, role=role, device=device)
            hit = _LOADED[key] = _Loaded(model, tok)
    return hit


def _load(spec: Any, tokenizer: Any, role: str, cache_dir: Any, dtype: str, progress: bool,
          keep: list[_Loaded], device: str = "auto", runtime: str = "auto") -> tuple[SequenceModel, Any]:
    """A model spec loaded on ``device`` by ``runtime`` (or a model object, left where it is: an explicit
    device that is not where the object lives is a ConfigError) and its tokenizer."""
    from constrained_spec.models.devices import normalize_device, resolve_device, same_device
    from constrained_spec.models.runtime import resolve_runtime

    if isinstance(spec, str):
        where = resolve_device(device)
        concrete = resolve_runtime(runtime, spec, where, dtype)
        loaded = _load_shared(spec, role, cache_dir, dtype, progress, where, concrete)
        keep.append(loaded)  # the Generator's strong reference keeps the registry entry alive
        if tokenizer is None and loaded.tokenizer is None and concrete == "llamacpp":  # made on first need only
            from constrained_spec.models.llamacpp import gguf_tokenizer

            loaded.tokenizer = gguf_tokenizer(loaded.model.path, cache_dir)
        return wrap(loaded.model), tokenizer or loaded.tokenizer
    if tokenizer is None and not isinstance(spec, SequenceModel):
        raise ModelLoadError(f"a {role} model object needs its tokenizer: pass tokenizer=...")
    model = wrap(spec)
    if normalize_device(device) != "auto" and not same_device(model.device, resolve_device(device)):
        raise ConfigError(f"the {role} model object is on {model.device}, not on device={device!r}: move it there "
                          "first (a model object is used where it is), or pass device='auto'")
    return model, tokenizer


#: compiled constraints a Generator keeps (LRU): a long-running server sees many schemas
COMPILED_CACHE_SIZE = 64


class Generator:
    """Loaded target (and optional draft) models, their tokenizer and a compile cache.

    ``model``/``draft``: a short offline name (``qwen2.5-coder-1.5b``...), a local folder, a
    ``.gguf`` file, a Hugging Face hub id, or a loaded transformers model (then pass ``tokenizer``).
    ``draft=None`` decodes with the target alone (the baseline, what the benchmark calls
    target-only): then no proposer runs unless ``proposers`` names some. ``dtype`` applies to both
    models, ``draft_dtype`` (if given) to the draft; ``"auto"`` picks the fastest measured here per
    role (bf16/fp16 on CUDA). ``device``: where models given by spec load: ``"auto"`` (CUDA when
    torch sees a GPU, else the CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; CUDA where there is none,
    or a CPU-only packed dtype (``fp16w``/``int8w``) on CUDA, is a ConfigError. Model objects stay
    where they are. Models given by spec are shared with other live Generators that loaded the same spec
    (same dtype, cache_dir and role): a second Generator does not load them again.

    ``max_batch_size`` > 1 turns on continuous batching: calls of :meth:`run` from that many
    threads at once (the server's requests, :meth:`run_batch`) decode as rows of one batch, each
    exactly as alone, sharing every forward; each row's cache holds ``batch_max_tokens`` (prompt and
    output), preallocated; ``prefix_cache_mb`` per model keeps prefilled prompts for requests that
    start the same way; ``prefill_chunk`` prompt tokens join per batch step while others decode.
    ``adaptive`` applies to rows too, each learning on its own copy of :attr:`draft_length`.

    ``prefill_dtype`` ("same", default; "bf16"; "fp32"): prompts are prefilled by a second copy of
    the linear weights in that dtype (:mod:`~constrained_spec.models.prefill_twin`; its bytes are
    :attr:`prefill_twin_bytes`), decoding keeps the loaded weights. For the draft this changes only
    speed; for the target it changes its numerics, the same way in target-only and speculative
    decoding. ``draft_prefill_dtype`` (default "same") the same for the draft, where it changes
    only speed (an int8w draft prefills faster in int8 than in bf16 here: 3.3 s against 4.8 s for
    1,000 tokens); ``prefill_split`` > 0 prefills in forwards of that many tokens (one-at-a-time
    decoding; a batch prefills in chunks of ``prefill_chunk``). A batch prefills through the same
    twins, so its rows decode as one-at-a-time decoding with the same options does.

    ``runtime``: what runs the models given by spec: ``"torch"`` (transformers; GGUF files are
    dequantized), ``"llamacpp"`` (llama.cpp through llama-cpp-python: a ``.gguf`` file or a short name's
    GGUF run as stored, memory-mapped, on the CPU; ``dtype`` and the prefill options do not apply) or
    ``"auto"`` (see :func:`~constrained_spec.models.runtime.resolve_runtime`). Target and draft run on
    the same runtime.

    ``decode``: a :class:`~constrained_spec.config.DecodeConfig` (how to draft and verify); any of
    its fields may also be given by keyword (``num_draft_tokens=3``, ``proposers=("grammar",)``,
    ``adaptive=True``...), which replace the config's. :meth:`from_config` builds one from a
    :class:`~constrained_spec.config.ModelConfig`.
    """

    def __init__(
        self,
        model: Any = DEFAULT_TARGET,
        draft: Any = DEFAULT_DRAFT,
        tokenizer: Any = None,
        *,
        decode: DecodeConfig | None = None,
        max_new_tokens: int = 512,
        schema_options: Any = None,
        schema_hint_style: str = "full",
        cache_dir: Any = None,
        dtype: str = "auto",
        draft_dtype: str | None = None,
        device: str = "auto",
        compile_timeout: float | None = 120.0,
        disk_cache: bool = True,
        grammar_engine: str = "lazy",
        progress: bool = True,
        eos_token_ids: Sequence[int] | None = None,
        max_batch_size: int = 1,
        batch_max_tokens: int = 4096,
        prefix_cache_mb: int = 1024,
        prefill_chunk: int = 128,
        prefill_dtype: str = "same",
        draft_prefill_dtype: str | None = None,
        prefill_split: int = 0,
        runtime: str = "auto",
        **decode_options: Any,
    ) -> None:
        from constrained_spec.sampling.kernels import get_verifier

        unknown = set(decode_options) - fields_of(DecodeConfig)
        if unknown:
            raise TypeError(f"Generator() got unexpected keyword argument(s) {sorted(unknown)}")
        self.decode = (decode or DecodeConfig()).replace(**decode_options)
        if schema_hint_style not in SCHEMA_HINT_STYLES:
            raise ConfigError(f"unknown schema hint style {schema_hint_style!r}; choose one of {', '.join(SCHEMA_HINT_STYLES)}")
        self._loaded: list[_Loaded] = []
        self.target, self.tokenizer = _load(model, tokenizer, "target", cache_dir, dtype, progress, self._loaded, device, runtime)
        self.draft: SequenceModel | None = None
        draft_tokenizer = None
        if draft is not None:
            self.draft, draft_tokenizer = _load(draft, None if isinstance(draft, str) else tokenizer, "draft", cache_dir,
                                               dtype if draft_dtype is None else draft_dtype, progress, self._loaded, device, runtime)
        check_same_vocabulary(self.tokenizer, draft_tokenizer, self.target, self.draft)
        self.prefill_twin_bytes = self._attach_prefill(prefill_dtype, draft_prefill_dtype, prefill_split, max_batch_size)
        heads = restricted_head(self.draft) if self.draft is not None else None
        size = self.decode.draft_head_tokens
        if size and heads is not None and size <= heads.vocab_size // 2:
            heads.set_head_prefix(size)
        self.vocab: TokenVocabulary = build_vocabulary(self.tokenizer, self.target.vocab_size, eos_token_ids or self._eos_ids())
        if grammar_engine not in GRAMMAR_ENGINES:
            raise ConfigError(f"unknown grammar engine {grammar_engine!r}; choose one of {', '.join(GRAMMAR_ENGINES)}")
        self.grammar_engine = grammar_engine
        self.compiler = AutomatonCompiler(self.vocab, cache_dir=cache_dir, disk_cache=disk_cache, compile_timeout=compile_timeout)
        self.max_new_tokens = max_new_tokens
        self.schema_options = schema_options
        self.schema_hint_style = schema_hint_style  # how prompt_ids writes the schema hint
        self.verifier = get_verifier(self.decode.verify_backend)
        self._compiled: LRUCache[str, CompiledConstraint] = LRUCache(COMPILED_CACHE_SIZE)
        #: tokens the models can attend to (prompt + new tokens); None: unknown, not checked
        self.context_length: int | None = _context_length(self.tokenizer, self.target, self.draft)
        #: continuous batching (``max_batch_size > 1``): calls on other threads decode together
        self.batch: BatchCoordinator | None = None
        if max_batch_size > 1:
            from constrained_spec.engine.batching import build_coordinator

            self.batch = build_coordinator(self.target, self.draft, max_batch_size, batch_max_tokens,
                                           prefix_cache_bytes=prefix_cache_mb << 20, prefill_chunk=prefill_chunk)
        elif max_batch_size < 1:
            raise ConfigError("max_batch_size must be >= 1")
        #: builds and runs each call's decode (alone, or as a batch row): proposers, draft plan, adaptive k
        self.builder = RequestBuilder(self.target, self.draft, self.verifier, self.vocab, self._encode,
                                      max_k=self.decode.num_draft_tokens, batch=self.batch)

    def _attach_prefill(self, dtype: str, draft_dtype: str | None, split: int, max_batch_size: int) -> int:
        """Prefill twins (``prefill_dtype`` for the target, ``draft_prefill_dtype`` for the draft:
        "same", "bf16" or "fp32"; None is "same") and the prefill split; the twins' bytes."""
        from constrained_spec.models.prefill_twin import attach_prefill

        draft_dtype = "same" if draft_dtype is None else draft_dtype
        if max_batch_size > 1 and split:
            raise ConfigError("prefill_split applies to one-at-a-time decoding; a batch prefills in chunks of prefill_chunk")
        used = attach_prefill(self.target, dtype, split)
        if self.draft is not None:
            used += attach_prefill(self.draft, draft_dtype, split)
        return used

    @classmethod
    def from_config(cls, models: ModelConfig, decode: DecodeConfig | None = None, **options: Any) -> "Generator":
        """A Generator for ``models`` (spec strings) and ``decode``; ``options`` as for the constructor."""
        return cls(models.model, models.draft, decode=decode, cache_dir=models.cache_dir, dtype=models.dtype,
                   draft_dtype=models.draft_dtype, device=models.device, prefill_dtype=models.prefill_dtype,
                   draft_prefill_dtype=models.draft_prefill_dtype, runtime=models.runtime, **options)

    @property
    def num_draft_tokens(self) -> int:
        return self.decode.num_draft_tokens

    @property
    def proposers(self) -> tuple[str, ...]:
        """The proposal sources a call uses by default."""
        return self.decode.sources(self.draft is not None)

    def _encode(self, text: str) -> list[int]:
        """The tokenizer's canonical tokens of ``text`` (no special tokens): what zero-cost proposals spell."""
        return self.tokenizer.encode(text, add_special_tokens=False)

    @property
    def draft_length(self) -> AdaptiveDraftLength:
        """Adaptive k's state (costs and keep rates), learnt across calls, batch rows included."""
        return self.builder.draft_length

    def calibrate(self, context_ids: list[int], repeats: int = 2) -> None:
        """Measure forward costs for adaptive k ahead of time (:meth:`RequestBuilder.calibrate`)."""
        self.builder.calibrate(context_ids, repeats)

    def _eos_ids(self) -> list[int]:
        ids = [self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else []
        config = getattr(getattr(self.target, "model", None), "generation_config", None)
        extra = getattr(config, "eos_token_id", None)
        if config is None:  # a model that is not a transformers one may name its end-of-generation ids itself
            extra = list(getattr(self.target, "eos_token_ids", ()))
        ids += extra if isinstance(extra, list) else ([extra] if extra is not None else [])
        return [i for i in dict.fromkeys(ids) if i is not None]

    # -- compile once ---------------------------------------------------------------------------
    def compile(self, output_type: Any, schema_draft: str | None = None) -> CompiledConstraint:
        """Compile an output type for this vocabulary (cached by its regex).

        ``schema_draft`` (``"2020-12"``, ``"2019-09"``, ``"7"``, ``"6"``, ``"4"``): the draft a
        schema without ``$schema`` is read by, for this call (default: ``schema_options.draft``,
        else 2020-12); compilation and the final validation follow it.
        """
        options = self.schema_options
        if schema_draft is not None:
            import dataclasses

            from constrained_spec.grammar.json_schema import SchemaOptions

            options = dataclasses.replace(options or SchemaOptions(), draft=schema_draft)
        # an OutputSpec (grammar.output_spec's, e.g. checked before the models loaded) is used as it is
        spec = output_type if isinstance(output_type, OutputSpec) else output_spec(output_type, options)
        key = f"{spec.kind}:{spec.regex or spec.grammar or ''}"  # a grammar-only schema: its grammar
        hit = self._compiled.get(key)
        if hit is not None and hit.spec == spec:
            return hit
        compiled = CompiledConstraint(spec, self.build_grammar(spec))
        self._compiled.put(key, compiled)
        return compiled

    def build_grammar(self, spec: OutputSpec, disk_cache: bool = True) -> CompiledAutomaton | LazyGrammar:
        """The grammar of ``spec`` for this vocabulary by this Generator's engine, built now (no
        memory cache: :meth:`compile` keeps those); ``disk_cache=False`` also keeps the automaton
        engine off its disk cache (a cold build, as the benchmark times it)."""
        if spec.kind == "lark" or self.grammar_engine == "lazy":
            return lazy_grammar(spec, self.vocab, self._encode, self.compiler.max_regex_chars)
        if not spec.regex and spec.grammar is not None:
            raise CompileLimitError("this schema's regex passes max_regex_chars: only its Lark grammar holds it, which the "
                                    "automaton engine cannot run; use the lazy engine (the default)")
        compiler = self.compiler
        if not disk_cache:
            compiler = AutomatonCompiler(self.vocab, disk_cache=False, compile_timeout=compiler.compile_timeout)
        return compiler.compile(spec.regex)

    # -- prompts --------------------------------------------------------------------------------
    def prompt_ids(
        self,
        prompt: str | list[dict] | list[int],
        spec: OutputSpec | None = None,
        schema_in_prompt: bool = True,
        tools: Sequence[dict] | None = None,
    ) -> list[int]:
        """Token ids of the prompt, through the chat template when the tokenizer has one; a list of
        token ids is the prompt itself (no template, no schema hint). The text is made by
        :func:`constrained_spec.prompts.prompt_token_ids` (the schema hint appended to the last message).

        ``tools``: OpenAI tool dicts handed to the chat template (``apply_chat_template(...,
        tools=tools)``), for function calling with a template that renders tools itself;
        :func:`constrained_spec.tools.tool_prompt` gives them (and the messages to go with them)
        only for such templates. A tokenizer without a chat template cannot take them.
        """
        if schema_in_prompt and spec is not None and spec.schema is not None:
            return prompt_token_ids(self.tokenizer, prompt, spec.schema, self.schema_hint_style, tools)
        return prompt_token_ids(self.tokenizer, prompt, tools=tools)

    # -- match per request ----------------------------------------------------------------------
    def run(
        self,
        prompt: str | list[dict] | list[int],
        output_type: Any,
        *,
        max_new_tokens: int | None = None,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        schema_in_prompt: bool = True,
        on_tokens: Callable[[list[int]], None] | None = None,
        tools: Sequence[dict] | None = None,
        schema_draft: str | None = None,
        hooks: DecodeHooks | None = None,
        alignment: str = "local",
        particles: int = 4,
        ess_threshold: float = 0.5,
        **decode_options: Any,
    ) -> GenerationResult:
        """Generate one value of ``output_type``; returns it with its text and stats.

        ``decode_options``: fields of :class:`~constrained_spec.config.DecodeConfig` for this call,
        e.g. ``proposers`` (any of ``"draft"``: the draft model, ``"grammar"``: strings the grammar
        forces, at no model cost, ``"lookup"``: prompt lookup), ``adaptive`` (grow each block while
        one more position is worth its cost, ``num_draft_tokens`` the upper bound),
        ``num_draft_tokens``, ``draft_confidence`` (end a draft block after a token the draft gives
        less than this probability). Every combination samples the same distribution.

        ``on_tokens`` (streaming) is called from the decode loop, under the generator's lock, with
        each step's newly committed token ids: final (never rolled back), EOS excluded; together
        they are ``result.token_ids``. An exception it raises ends the generation there (and
        propagates). ``hooks``: other observers (:class:`~constrained_spec.engine.stats.DecodeHooks`).
        ``tools``: OpenAI tool dicts for the chat template (see :meth:`prompt_ids`).
        ``schema_draft``: the JSON Schema draft of a schema without ``$schema`` (see :meth:`compile`).

        ``alignment``: ``"local"`` (default: each position masked to the allowed tokens and
        renormalised) or ``"smc"``: sample what the model means under the constraint,
        P(y | y in L), by sequential Monte Carlo over ``particles`` exact speculative decodes,
        resampled when their effective sample size falls under ``ess_threshold`` * particles
        (``engine.smc``; docs/smc.md). SMC needs ``temperature`` > 0; with top-k/top-p it conditions
        the unconstrained sampler (the cut over the whole vocabulary) on the constraint. It does not
        stream (a particle's tokens may be dropped by resampling): ``on_tokens`` gets the returned
        sample once, at the end. ``result.smc`` holds every particle's text and weight and log Z.
        """
        unknown = set(decode_options) - fields_of(DecodeConfig)
        if unknown:
            raise TypeError(f"run() got unexpected keyword argument(s) {sorted(unknown)}")
        config = self.decode.replace(**decode_options)
        compiled = self.compile(output_type, schema_draft)
        policy = SamplingPolicy(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        check_smc_options(alignment, particles, ess_threshold, policy)
        ids = self.prompt_ids(prompt, compiled.spec, schema_in_prompt, tools=tools)
        budget = max_new_tokens or self.max_new_tokens
        limit = self.context_length
        if self.batch is not None:  # a batch slot holds prompt + output (+1 pending)
            limit = min(limit or self.batch.max_length, self.batch.max_length - 1)
        if limit is not None:  # before any forward
            room = limit - len(ids)
            if max_new_tokens is None and room >= 1:
                budget = min(budget, room)  # the default budget shrinks to the room left, as OpenAI's does
            if len(ids) + budget > limit:
                raise ContextLengthError(len(ids), budget, limit)
        if on_tokens is not None:
            hooks = dataclasses.replace(hooks or DecodeHooks(), on_tokens=on_tokens)
        request = DecodeRequest(ids, compiled.matcher, policy, config, budget, grammar_key=compiled.spec.regex or compiled.spec.grammar or "", kind=compiled.spec.kind,
                                output_bound=compiled.output_bound, hooks=hooks)
        if alignment == "smc":  # particles one after another on this Generator's own models (not batch rows)
            smc = self.builder.decode_smc(request, particles, ess_threshold)
            return self._result(compiled, smc.token_ids, smc.stats, len(ids), SMCReport.of(smc, self.vocab.decode))
        result = self.builder.decode(request)
        return self._result(compiled, result.token_ids, result.stats, len(ids))

    def _result(self, compiled: CompiledConstraint, token_ids: list[int], stats: DecodeStats, prompt_tokens: int,
                smc: SMCReport | None = None) -> GenerationResult:
        """The decoded tokens as a checked value (a Lark grammar's text with lark's parse tree)."""
        text = self.vocab.decode(token_ids)
        tree = compiled.parse_tree(text) if compiled.spec.kind == "lark" else None
        value = text if compiled.spec.kind == "lark" else compiled.parse(text)
        return GenerationResult(value, text, token_ids, stats, prompt_tokens=prompt_tokens, tree=tree, smc=smc)

    def run_batch(self, requests: Sequence[dict[str, Any]], return_exceptions: bool = False) -> list[Any]:
        """Run many requests, decoded together (continuous batching): each dict holds ``prompt``,
        ``output_type`` and any keyword of :meth:`run`. Results come in order; a failed request
        raises its error, or (``return_exceptions``) stands in the list as the exception. Needs
        ``max_batch_size > 1``, else the requests run one after another."""
        from concurrent.futures import ThreadPoolExecutor

        def one(request: dict[str, Any]) -> Any:
            options = dict(request)
            try:
                return self.run(options.pop("prompt"), options.pop("output_type"), **options)
            except Exception as exc:  # noqa: BLE001 - returned or re-raised below
                if not return_exceptions:
                    raise
                return exc

        workers = self.batch.slots if self.batch is not None else 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="constrained-spec-row") as pool:
            return list(pool.map(one, requests))

    # -- streams and coroutines: constrained_spec.streams -----------------------------------------
    def stream(self, prompt: str | list[dict] | list[int], output_type: Any, **options: Any) -> Iterator[StreamChunk]:
        """:meth:`run` as an iterator of chunks (``.text``: the delta; ``.partial``: for JSON, the
        value so far; the last, ``.done``, carries ``.result``); leaving the loop cancels the decode."""
        from constrained_spec.streams import stream

        return stream(self, prompt, output_type, **options)

    async def arun(self, prompt: str | list[dict] | list[int], output_type: Any, **options: Any) -> GenerationResult:
        """:meth:`run` awaited without blocking the event loop; cancelling the task cancels the decode."""
        from constrained_spec.streams import arun

        return await arun(self, prompt, output_type, **options)

    def astream(self, prompt: str | list[dict] | list[int], output_type: Any, **options: Any) -> AsyncIterator[StreamChunk]:
        """:meth:`stream` for ``async for``; the decode runs on a worker thread."""
        from constrained_spec.streams import astream

        return astream(self, prompt, output_type, **options)

    def generate(self, prompt: str | list[dict], output_type: Any, **options: Any) -> Any:
        """The value only: a Pydantic instance, a dict/list/... for a JSON Schema, a str for Regex."""
        return self.run(prompt, output_type, **options).value

    def generate_json(self, schema: Any, prompt: str | list[dict], **options: Any) -> Any:
        """A JSON value that validates against ``schema`` (dict, JSON text, or Pydantic model class)."""
        value = self.generate(prompt, schema, **options)
        return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def check_same_vocabulary(target_tokenizer: Any, draft_tokenizer: Any | None, target: SequenceModel, draft: SequenceModel | None) -> None:
    """Raise VocabularyMismatchError if the draft cannot propose in the target's vocabulary."""
    if draft is None:
        return
    if draft.vocab_size != target.vocab_size:
        raise VocabularyMismatchError(
            f"draft model has {draft.vocab_size} output logits, the target {target.vocab_size}: "
            "the draft must share the target's vocabulary"
        )
    if draft_tokenizer is not None and draft_tokenizer is not target_tokenizer:
        build_vocabulary(target_tokenizer, target.vocab_size).check_same(
            build_vocabulary(draft_tokenizer, draft.vocab_size), what="draft"
        )


def _context_length(tokenizer: Any, *models: Any) -> int | None:
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


#: the Generators ``generate_json`` / ``generate`` keep, by (model, draft): a few, least recently used first out
_DEFAULT: LRUCache[tuple, Generator] = LRUCache(2)


def _default_generator(model: Any, draft: Any) -> Generator:
    return _DEFAULT.get_or_make((model, draft), lambda: Generator(model, draft))


def generate_json(schema: Any, prompt: str | list[dict], *, model: Any = DEFAULT_TARGET, draft: Any = DEFAULT_DRAFT, **options: Any) -> Any:
    """Generate a JSON value for ``schema`` with the default (or named) models; validated."""
    return _default_generator(model, draft).generate_json(schema, prompt, **options)


def generate(prompt: str | list[dict], output_type: Any, *, model: Any = DEFAULT_TARGET, draft: Any = DEFAULT_DRAFT, **options: Any) -> Any:
    """Generate a value of ``output_type`` (Pydantic model, JSON Schema or ``Regex``)."""
    return _default_generator(model, draft).generate(prompt, output_type, **options)
