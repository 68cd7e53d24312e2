"""Public API: ``generate_json``, ``generate(prompt, output_type=...)`` and the reusable ``Generator``.

A thin facade. A :class:`Generator` loads its models (:mod:`constrained_spec.models.loading`), holds
a :class:`~constrained_spec.grammar.compiler.GrammarCompiler` for their vocabulary (compile once: a
:class:`CompiledConstraint` that travels to each request) and a
:class:`~constrained_spec.engine.request.RequestBuilder` (match and decode per request), configured
by :class:`~constrained_spec.config.GeneratorConfig`. Every returned value has reached a final state
of its grammar and, for JSON outputs, validates against its schema with jsonschema.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterator, Sequence

from constrained_spec.config import DEFAULT_DRAFT, DEFAULT_TARGET, GRAMMAR_ENGINES, DecodeConfig, GeneratorConfig, ModelConfig, RunOptions
from constrained_spec.engine.batching import BatchCoordinator
from constrained_spec.engine.draft_length import AdaptiveDraftLength
from constrained_spec.engine.plan_costs import CALIBRATION_TEXT
from constrained_spec.engine.request import DecodeRequest, RequestBuilder
from constrained_spec.engine.smc import SMCReport, check_smc_options
from constrained_spec.engine.stats import DecodeHooks, DecodeStats
from constrained_spec.errors import ContextLengthError
from constrained_spec.grammar import CFG, OutputSpec, Regex
from constrained_spec.grammar.compiler import CompiledConstraint, GrammarCompiler
from constrained_spec.grammar.compiler import compile_for_vocabulary as compile_for_vocabulary  # re-exported (integrations)
from constrained_spec.grammar.vocab import TokenVocabulary, build_vocabulary, check_same_vocabulary
from constrained_spec.lru import LRUCache
from constrained_spec.models.loading import attach_prefill_twins, context_length, eos_token_ids, load_models, set_draft_head
from constrained_spec.models.protocol import SequenceModel
from constrained_spec.prompts import SCHEMA_HINT_MAX_CHARS as SCHEMA_HINT_MAX_CHARS  # re-exported: api.SCHEMA_HINT_MAX_CHARS
from constrained_spec.prompts import prompt_token_ids, schema_hint
from constrained_spec.prompts.chat import hint_heads
from constrained_spec.sampling import SamplingPolicy

if TYPE_CHECKING:
    from constrained_spec.streams import StreamChunk

__all__ = ["CFG", "CompiledConstraint", "Generator", "GenerationResult", "Regex", "GRAMMAR_ENGINES", "generate", "generate_json",
           "schema_hint", "DEFAULT_TARGET", "DEFAULT_DRAFT"]


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
    eos_token_id: int | None = None  # the EOS id the output ended with (the sampled one, where there are several); None: none taken


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

    Batching (``max_batch_size`` > 1: calls of :meth:`run` from that many threads, the server's
    requests, :meth:`run_batch`, decode as rows of one batch, each exactly as alone), prefill twins
    (``prefill_dtype``; their bytes are :attr:`prefill_twin_bytes`) and runtimes (``runtime``:
    torch or llama.cpp) are described with their fields: :class:`~constrained_spec.config.BatchConfig`
    and :class:`~constrained_spec.config.ModelConfig`.

    ``config``: a :class:`~constrained_spec.config.GeneratorConfig` (models, decode, batch, compile
    and call defaults; its models' ``model``/``draft`` are replaced by the arguments). Every field of
    its parts may also be given by keyword (``dtype="fp32"``, ``num_draft_tokens=3``,
    ``max_batch_size=8``, ``grammar_engine="automaton"``, ``max_new_tokens=256``...), as may a whole
    part (``decode=DecodeConfig(...)``); they replace the config's, and an unknown keyword is a
    :class:`~constrained_spec.errors.ConfigError` naming it. :meth:`from_config` builds one from a
    :class:`~constrained_spec.config.ModelConfig`.
    """

    def __init__(self, model: Any = DEFAULT_TARGET, draft: Any = DEFAULT_DRAFT, tokenizer: Any = None, *,
                 config: GeneratorConfig | None = None, **options: Any) -> None:
        from constrained_spec.sampling.kernels import get_verifier

        config = (config or GeneratorConfig()).with_options(**options)
        self.config = config = dataclasses.replace(config, models=dataclasses.replace(config.models, model=model, draft=draft))
        loaded = load_models(config.models, tokenizer, config.progress, batched=config.batch.max_batch_size > 1, prompt_heads=hint_heads)
        self._loaded = loaded.keep  # holds the shared weights while this Generator lives
        self.target: SequenceModel = loaded.target
        self.tokenizer = loaded.tokenizer
        self.draft: SequenceModel | None = loaded.draft
        check_same_vocabulary(self.tokenizer, loaded.draft_tokenizer, self.target.vocab_size, None if self.draft is None else self.draft.vocab_size)
        self.prefill_twin_bytes = attach_prefill_twins(self.target, self.draft, config.models, config.batch.prefill_split)
        set_draft_head(self.draft, self.decode.draft_head_tokens)
        eos = list(config.eos_token_ids or ()) or eos_token_ids(self.tokenizer, self.target)
        self.vocab: TokenVocabulary = build_vocabulary(self.tokenizer, self.target.vocab_size, eos)
        compiling = config.compile
        #: compile once: output types -> CompiledConstraint for this vocabulary (bounded cache)
        self.compiler = GrammarCompiler(self.vocab, self._encode, engine=compiling.grammar_engine, schema_options=compiling.schema_options,
                                        cache_dir=config.models.cache_dir, disk_cache=compiling.disk_cache,
                                        compile_timeout=compiling.compile_timeout, max_regex_chars=compiling.max_regex_chars)
        self.verifier = get_verifier(self.decode.verify_backend)
        #: tokens the models can attend to (prompt + new tokens); None: unknown, not checked
        self.context_length: int | None = context_length(self.tokenizer, self.target, self.draft)
        #: continuous batching (``max_batch_size > 1``): calls on other threads decode together
        self.batch: BatchCoordinator | None = None
        batch = config.batch
        if batch.max_batch_size > 1:
            from constrained_spec.engine.batching import build_coordinator

            self.batch = build_coordinator(self.target, self.draft, batch.max_batch_size, batch.batch_max_tokens,
                                           prefix_cache_bytes=batch.prefix_cache_mb << 20, prefill_chunk=batch.prefill_chunk)
        #: builds and runs each call's decode (alone, or as a batch row): proposers, draft plan, adaptive k
        self.builder = RequestBuilder(self.target, self.draft, self.verifier, self.vocab, self._encode,
                                      max_k=self.decode.num_draft_tokens, batch=self.batch)
        decode = self.decode
        if decode.calibrate_plan and decode.draft_plan == "auto" and self.batch is None and self.builder.uses_draft(decode):
            # the draft plan's costs on this host (engine.plan_costs): cached per host, models, runtime, threads
            self.builder.calibrate_plan(self._encode(CALIBRATION_TEXT), config.models.cache_dir)

    @classmethod
    def from_config(cls, models: ModelConfig, decode: DecodeConfig | None = None, **options: Any) -> "Generator":
        """A Generator for ``models`` (spec strings) and ``decode``; ``options`` as for the constructor."""
        return cls(models.model, models.draft, config=GeneratorConfig(models=models, decode=decode or DecodeConfig()), **options)

    # -- the configuration, read back -----------------------------------------------------------
    @property
    def decode(self) -> DecodeConfig: return self.config.decode  # how calls draft and verify by default
    @property
    def max_new_tokens(self) -> int: return self.config.max_new_tokens  # a call's token budget by default
    @property
    def schema_options(self) -> Any: return self.config.compile.schema_options  # how JSON Schemas compile
    @property
    def schema_hint_style(self) -> str: return self.config.schema_hint_style  # how prompt_ids writes the hint
    @property
    def grammar_engine(self) -> str: return self.compiler.engine  # "lazy" or "automaton"
    @property
    def num_draft_tokens(self) -> int: return self.decode.num_draft_tokens  # proposals per step by default

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

    # -- compile once ---------------------------------------------------------------------------
    def compile(self, output_type: Any, schema_draft: str | None = None) -> CompiledConstraint:
        """Compile an output type for this vocabulary (cached by its regex); a CompiledConstraint
        (this vocabulary's) is returned as it is. ``schema_draft`` (``"2020-12"``, ``"2019-09"``,
        ``"7"``, ``"6"``, ``"4"``): the draft a schema without ``$schema`` is read by, for this call
        (default: ``schema_options.draft``, else 2020-12); compilation and validation follow it."""
        return self.compiler.compile(output_type, schema_draft)

    # -- prompts --------------------------------------------------------------------------------
    def prompt_ids(self, prompt: str | list[dict] | list[int], spec: OutputSpec | None = None, schema_in_prompt: bool = True,
                   tools: Sequence[dict] | None = None) -> list[int]:
        """Token ids of the prompt, through the chat template when the tokenizer has one; a list of
        token ids is the prompt itself (no template, no schema hint). The text is made by
        :func:`constrained_spec.prompts.prompt_token_ids` (the schema hint appended to the last message,
        or first in a system message with ``schema_hint_place="system"``).

        ``tools``: OpenAI tool dicts handed to the chat template (``apply_chat_template(...,
        tools=tools)``), for function calling with a template that renders tools itself;
        :func:`constrained_spec.tools.tool_prompt` gives them (and the messages to go with them)
        only for such templates. A tokenizer without a chat template cannot take them.
        """
        if schema_in_prompt and spec is not None and spec.schema is not None:
            return prompt_token_ids(self.tokenizer, prompt, spec.schema, self.schema_hint_style, tools, self.config.schema_hint_place)
        return prompt_token_ids(self.tokenizer, prompt, tools=tools)

    # -- match per request ----------------------------------------------------------------------
    def run(self, prompt: str | list[dict] | list[int], output_type: Any, **options: Any) -> GenerationResult:
        """Generate one value of ``output_type`` (an output type, or a :class:`CompiledConstraint`
        from :meth:`compile`); returns it with its text and stats.

        ``options``: this call's :class:`~constrained_spec.config.RunOptions` (``max_new_tokens``,
        ``temperature``, ``top_k``, ``top_p``, ``seed``, ``schema_in_prompt``, ``on_tokens``: each
        step's committed ids, ``on_step``: called after each step (cancellation), ``tools``, ``schema_draft``, ``hooks``, ``alignment``: ``"local"`` or
        ``"smc"``, ``particles``, ``ess_threshold``: see there) and fields of
        :class:`~constrained_spec.config.DecodeConfig` (``proposers``: any of ``"draft"``,
        ``"grammar"``, ``"lookup"``; ``adaptive``, ``num_draft_tokens``, ``draft_confidence``...).
        Every combination samples the same distribution.
        """
        call, decode_changes = RunOptions.split(options)
        config = self.decode.replace(**decode_changes)
        compiled = self.compile(output_type, call.schema_draft)
        policy = SamplingPolicy(temperature=call.temperature, top_k=call.top_k, top_p=call.top_p, seed=call.seed)
        check_smc_options(call.alignment, call.particles, call.ess_threshold, policy)
        ids = self.prompt_ids(prompt, compiled.spec, call.schema_in_prompt, tools=call.tools)
        budget = self._budget(len(ids), call.max_new_tokens)
        hooks = call.hooks
        if call.on_tokens is not None:
            hooks = dataclasses.replace(hooks or DecodeHooks(), on_tokens=call.on_tokens)
        if call.on_step is not None:
            hooks = dataclasses.replace(hooks or DecodeHooks(), on_step=call.on_step)
        request = DecodeRequest(ids, compiled.matcher, policy, config, budget, grammar_key=compiled.grammar_key, kind=compiled.spec.kind,
                                output_bound=compiled.output_bound, hooks=hooks)
        if call.alignment == "smc":  # particles as batch rows where the batch has the slots, else one after another
            smc = self.builder.decode_smc(request, call.particles, call.ess_threshold)
            return self._result(compiled, smc.token_ids, smc.stats, len(ids), SMCReport.of(smc, self.vocab.decode), smc.eos_token_id)
        result = self.builder.decode(request)
        return self._result(compiled, result.token_ids, result.stats, len(ids), eos_token_id=result.eos_token_id)

    def _budget(self, prompt_tokens: int, max_new_tokens: int | None) -> int:
        """A call's token budget: ``max_new_tokens``, else the default shrunk to the room the context
        (or a batch slot: prompt + output + 1 pending) leaves, as OpenAI's does; past the context a
        :class:`ContextLengthError`, before any forward."""
        budget = max_new_tokens or self.max_new_tokens
        limit = self.context_length
        if self.batch is not None:
            limit = min(limit or self.batch.max_length, self.batch.max_length - 1)
        if limit is not None:
            room = limit - prompt_tokens
            if max_new_tokens is None and room >= 1:
                budget = min(budget, room)
            if prompt_tokens + budget > limit:
                raise ContextLengthError(prompt_tokens, budget, limit)
        return budget

    def _result(self, compiled: CompiledConstraint, token_ids: list[int], stats: DecodeStats, prompt_tokens: int,
                smc: SMCReport | None = None, eos_token_id: int | None = None) -> GenerationResult:
        """The decoded tokens as a checked value (a Lark grammar's text with lark's parse tree)."""
        text = self.vocab.decode(token_ids)
        value, tree = compiled.read(text)
        return GenerationResult(value, text, token_ids, stats, prompt_tokens=prompt_tokens, tree=tree, smc=smc, eos_token_id=eos_token_id)

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
