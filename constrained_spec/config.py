"""Configuration objects and the tuned defaults, in one place; importable without torch.

:class:`DecodeConfig` (how the loop drafts and verifies), :class:`ModelConfig` (which models, in
which dtype, from which cache), :class:`BatchConfig` (batching and prefill) and
:class:`CompileConfig` (how output types compile) are frozen dataclasses validated once, at
construction, and shared by the Python API, the command line, the server and the benchmark;
:class:`GeneratorConfig` holds one of each and routes a Generator's keywords to them, and
:class:`RunOptions` holds one call's. Every tuned default names the measurement that chose it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from constrained_spec.errors import ConfigError, ModelLoadError

# -- the choices the configs validate (plain data: the model store and the runtimes import them from here) ----
#: the default pair's short names (``models.store.sources`` pins their files)
DEFAULT_DRAFT = "qwen2.5-coder-0.5b"
DEFAULT_TARGET = "qwen2.5-coder-1.5b"

#: the choices of ``runtime`` / ``--runtime`` (``models.runtime`` resolves ``auto``)
RUNTIMES = ("auto", "torch", "llamacpp")

#: what ``--device`` accepts, in words
DEVICE_HELP = "auto (CUDA when torch sees a GPU, else the CPU), cpu, cuda or cuda:N"

_DEVICE = re.compile(r"auto|cpu|cuda(?::(\d+))?")


def normalize_device(device: Any) -> str:
    """``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` for a string or a ``torch.device`` (None:
    ``"auto"``); anything else is a :class:`~constrained_spec.errors.ConfigError` naming the choices.
    Only the spelling is checked here: whether the device exists is ``models.torch.devices.resolve_device``'s job."""
    if device is None:
        return "auto"
    text = str(device).strip().lower()
    if not _DEVICE.fullmatch(text):
        raise ConfigError(f"unknown device {device!r}; choose {DEVICE_HELP}")
    return text


def is_cuda(device: str) -> bool:
    """Whether a normalized device name is a CUDA device."""
    return device.startswith("cuda")


_DTYPE_NAMES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "fp16w": "fp16w", "fp16-weights": "fp16w", "packed": "fp16w", "packed-fp16": "fp16w",
    "int8w": "int8w", "int8-weights": "int8w", "int8": "int8w", "packed-int8": "int8w",
}

#: tags whose linear weights are packed for fbgemm after loading the fp32 model, and how
PACKED_TAGS = {"fp16w": "fp16", "int8w": "int8"}

#: the ``--dtype`` values of every command
DTYPE_CHOICES = ("auto", "fp32", "fp16w", "int8w", "bf16", "fp16")


def normalize_dtype(dtype: Any) -> str:
    """``"fp32"``, ``"bf16"``, ``"fp16"``, ``"fp16w"``, ``"int8w"`` or ``"auto"`` for a string or a
    torch dtype.

    ``fp16w`` / ``int8w``: fp32 model whose linear weights are rounded to fp16 / int8 and packed for
    fbgemm (``models.torch.packed_linear``); kept on disk in that form (``models.torch.packed_cache``). ``int8w``
    also quantizes activations per call: meant for drafts, where rounding costs only acceptance.
    """
    if dtype is None:
        return "auto"
    if not isinstance(dtype, str):
        dtype = str(dtype).replace("torch.", "")
    key = dtype.strip().lower()
    if key == "auto":
        return "auto"
    if key not in _DTYPE_NAMES:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use {', '.join(DTYPE_CHOICES)}")
    return _DTYPE_NAMES[key]


#: the proposal sources a Generator can use: the draft model, strings the grammar forces, prompt lookup
PROPOSERS = ("draft", "grammar", "lookup")
#: the default draft length: the best fixed k with every proposer on the 8-prompt bench
#: (docs/results/2026-11-29-tuned-fixed-k-sweep: k2..k6 gave 1.57 / 1.90 / 1.92 / 2.13 / 1.67x target-only)
NUM_DRAFT_TOKENS = 5
#: the most proposals one step may verify (a request's k is capped here: a verify forward grows with it)
MAX_DRAFT_TOKENS = 64
#: the most particles one alignment="smc" request may ask for (each holds its own caches)
MAX_PARTICLES = 256
#: end a draft block after a model token the draft gives less than this probability; set in commit
#: 15e1f16 without a recorded sweep (no measurement chose 0.3 over its neighbours: an open tuning item)
DRAFT_CONFIDENCE = 0.3
#: the draft scores only the first this-many token ids (the common ones in merge order) unless the
#: grammar allows few tokens; used where the vocabulary is at least twice as large (48k of Qwen2's
#: 152k: ~3 ms for the int8 prefix head against ~10 ms for the whole head, one thread)
DRAFT_HEAD_TOKENS = 48_000
#: the draft computes its head for the allowed tokens only up to this many of them: gathering the
#: rows costs 0.2 / 1.1 / 4.2 / 30 ms for 500 / 2k / 5k / 10k of 152k x 896 (fp16, one thread),
#: against ~3 ms for the 48k-row int8 prefix head and ~10 ms for the whole int8 head
RESTRICTED_HEAD_MAX_ROWS = 3000
#: prompt lookup's shortest n-gram: 3 was measured more precise than 2 on the bench workload
LOOKUP_MIN_NGRAM = 3
#: prefill weights (``ModelConfig.prefill_dtype``): "same" (the decode weights; the default until a
#: measurement says otherwise) or a second copy of the linear weights in bf16 / fp32 used only for
#: prefill (``models.torch.prefill_twin``); kept here too so the config imports no torch
PREFILL_DTYPES = ("same", "bf16", "fp32")
#: how the prompt's schema hint writes the schema (``Generator(schema_hint_style=...)``,
#: ``prompts.schema_hint``): ``"full"`` as ``json.dumps`` does (the default, what the defaults were tuned
#: with), ``"compact"`` without the spaces after ``,`` and ``:`` (27% fewer prompt tokens over the 17
#: project schemas with Qwen2's tokenizer), ``"types"`` a short type sketch
#: (:mod:`constrained_spec.prompts.type_sketch`: keys, types, values, bounds, descriptions; 48% fewer)
SCHEMA_HINT_STYLES = ("full", "compact", "types")
#: where the prompt's schema hint goes (``Generator(schema_hint_place=...)``, ``prompts.chat``):
#: ``"user"`` after the last message's text (the default, what the defaults were tuned with), or
#: ``"system"`` in a system message before the messages, so calls with the same schema share the
#: prompt's first tokens (a prefix cache can reuse them)
SCHEMA_HINT_PLACES = ("user", "system")
#: the verify kernels: torch (the reference) or triton (CUDA); auto picks triton for CUDA logits
VERIFY_BACKENDS = ("auto", "torch", "triton")
#: ``DecodeConfig.prefill_overlap``: the draft's prefill beside the target's (``engine.prefill``)
PREFILL_OVERLAP = ("auto", "on", "off")
#: ``DecodeConfig.draft_plan``: whether a request uses the draft model, by its end-to-end cost
#: (``engine.draft_plan``: "auto") or always
DRAFT_PLANS = ("auto", "always")
#: the draft model's gain per generated token where ``DecodeConfig.draft_gain_per_token`` is None:
#: by the kind of constraint, for JSON Schema, Pydantic and regex outputs and for Lark grammars'
#: (their measurements: ``engine.draft_plan``); kept here too so the config imports no torch
DRAFT_GAIN_PER_TOKEN = 0.0
DRAFT_GAIN_PER_TOKEN_LARK = 0.4
#: the grammar engines (``CompileConfig.grammar_engine``; ``grammar.backends`` names the same): ``"lazy"``
#: (llguidance: regex and Lark grammars compiled in about a millisecond, masks computed as the output
#: reaches them; the default) and ``"automaton"`` (outlines-core, the ``automaton`` extra: the eager
#: byte DFA of each regex, built per vocabulary and cached on disk; regexes only)
GRAMMAR_ENGINES = ("lazy", "automaton")
#: the longest regex or grammar text a constraint compiles from (characters)
MAX_REGEX_CHARS = 200_000


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True)
class DecodeConfig:
    """How one generation drafts and verifies. Every combination samples the same distribution.

    ``num_draft_tokens``: proposals per step (0: the target alone; with ``adaptive`` the upper
    bound); ``proposers``: sources among :data:`PROPOSERS` (None: all of them with a draft model,
    none without); ``adaptive``: grow each block while one more position is worth its measured cost;
    ``draft_confidence``: end a block after a model token the draft gives less than this
    probability (0: never); ``draft_head_tokens``: the draft's prefix head size (0: none);
    ``restricted_head_max_rows``; ``lookup_min_ngram``; ``verify_backend``; ``debug_checks``:
    check caches and grammar against the committed tokens after every step; ``draft_window``: the
    draft model sees only the last this-many prompt tokens (0: the whole prompt), so its prefill
    costs little; exact all the same (the draft only changes q); ``lookup_gate``: with a draft
    model, propose a prompt-lookup plan only where its measured keep rate makes its block worth more
    than the draft model's (``engine.lookup_gate``; False: always, as before); ``prefill_overlap``:
    prefill the draft on a second thread while the target prefills, "auto" where torch's threads
    leave cores idle (``engine.prefill``; exact: the caches are the same); ``draft_plan``: "auto"
    leaves the draft model out of a request whose expected output is too short to repay the draft's
    prefill (``engine.draft_plan``: prompt length, grammar bound, budget; no clock), "always" uses
    it whenever the proposers name it; ``draft_gain_per_token``: the target forwards the draft model
    saves per generated token beyond the free proposers, which that rule weighs (None: by the kind of
    constraint, as measured for the default pair on this project's CPU host: about 0 for JSON Schema,
    where grammar strings and prompt lookup leave the draft little, 0.4 for a Lark grammar's output,
    where they find little; ``engine.draft_plan``); ``calibrate_plan``: with "auto" and a draft model on
    the CPU, a Generator times a few forwards right after loading (cached on disk per host, models,
    runtime and threads, so a later load times nothing) and the plan weighs costs measured there
    (``engine.plan_costs``) instead of the constants; False: the constants, as before.
    """

    num_draft_tokens: int = NUM_DRAFT_TOKENS
    proposers: tuple[str, ...] | None = None
    adaptive: bool = False
    draft_confidence: float = DRAFT_CONFIDENCE
    draft_head_tokens: int = DRAFT_HEAD_TOKENS
    restricted_head_max_rows: int = RESTRICTED_HEAD_MAX_ROWS
    restrict_head: bool = True
    lookup_min_ngram: int = LOOKUP_MIN_NGRAM
    verify_backend: str = "auto"
    debug_checks: bool = False
    draft_window: int = 0
    lookup_gate: bool = True
    prefill_overlap: str = "auto"
    draft_plan: str = "auto"
    draft_gain_per_token: float | None = None
    calibrate_plan: bool = True

    def __post_init__(self) -> None:
        _check(isinstance(self.num_draft_tokens, int) and 0 <= self.num_draft_tokens <= MAX_DRAFT_TOKENS,
               f"num_draft_tokens must be an integer in [0, {MAX_DRAFT_TOKENS}], got {self.num_draft_tokens!r}")
        if self.proposers is not None:
            names = tuple(self.proposers)
            unknown = sorted(set(names) - set(PROPOSERS))
            _check(not unknown, f"unknown proposers {unknown}; choose from {PROPOSERS}")
            object.__setattr__(self, "proposers", tuple(dict.fromkeys(names)))
        _check(0.0 <= self.draft_confidence <= 1.0, f"draft_confidence must be in [0, 1], got {self.draft_confidence!r}")
        _check(self.draft_head_tokens >= 0, f"draft_head_tokens must be >= 0, got {self.draft_head_tokens!r}")
        _check(self.restricted_head_max_rows >= 0, f"restricted_head_max_rows must be >= 0, got {self.restricted_head_max_rows!r}")
        _check(self.lookup_min_ngram >= 1, f"lookup_min_ngram must be >= 1, got {self.lookup_min_ngram!r}")
        _check(isinstance(self.draft_window, int) and self.draft_window >= 0, f"draft_window must be an integer >= 0, got {self.draft_window!r}")
        _check(self.prefill_overlap in PREFILL_OVERLAP, f"prefill_overlap must be one of {PREFILL_OVERLAP}, got {self.prefill_overlap!r}")
        gain = self.draft_gain_per_token
        _check(gain is None or (isinstance(gain, (int, float)) and -1.0 <= gain <= 1.0),
               f"draft_gain_per_token must be None or a number in [-1, 1], got {gain!r}")
        _check(self.draft_plan in DRAFT_PLANS, f"draft_plan must be one of {DRAFT_PLANS}, got {self.draft_plan!r}")
        _check(isinstance(self.calibrate_plan, bool), f"calibrate_plan must be True or False, got {self.calibrate_plan!r}")
        _check(self.verify_backend in VERIFY_BACKENDS, f"unknown verify backend {self.verify_backend!r}; choose from {VERIFY_BACKENDS}")

    def sources(self, has_draft: bool) -> tuple[str, ...]:
        """The proposal sources in use: ``proposers``, or its default for a loop with/without a draft model."""
        if self.proposers is not None:
            return self.proposers if has_draft else tuple(p for p in self.proposers if p != "draft")
        return PROPOSERS if has_draft else ()

    def replace(self, **changes: Any) -> "DecodeConfig":
        """A copy with ``changes`` (validated again); None values are left out."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclass(frozen=True)
class ModelConfig:
    """Which models, how loaded. ``model``/``draft``: a short offline name, a local folder, a
    ``.gguf`` file or a Hugging Face hub id (``draft=None``: the target alone); ``dtype`` for both,
    ``draft_dtype`` (if given) for the draft; ``cache_dir``: models and compiled grammars;
    ``device``: ``auto`` (CUDA when torch sees a GPU, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``;
    ``runtime``: ``auto``, ``torch`` or ``llamacpp``. Through the Python API ``model`` and ``draft``
    may also be loaded model objects (used where they are).

    ``prefill_dtype`` (:data:`PREFILL_DTYPES`: "same", default; "bf16"; "fp32"): prompts are
    prefilled by a second copy of the linear weights in that dtype
    (:mod:`~constrained_spec.models.torch.prefill_twin`), decoding keeps the loaded weights. For the draft
    this changes only speed; for the target it changes its numerics, the same way in target-only and
    speculative decoding. ``draft_prefill_dtype`` (None: "same") the same for the draft, where it
    changes only speed (an int8w draft prefills faster in int8 than in bf16 here: 3.3 s against 4.8 s
    for 1,000 tokens). A batch prefills through the same twins, so its rows decode as one-at-a-time
    decoding with the same options does.

    ``runtime``: what runs the models given by spec: ``"torch"`` (transformers; GGUF files are
    dequantized), ``"llamacpp"`` (llama.cpp through llama-cpp-python: a ``.gguf`` file or a short
    name's GGUF run as stored, memory-mapped, on the CPU; ``dtype`` and the prefill options do not
    apply) or ``"auto"`` (see :func:`~constrained_spec.models.runtime.resolve_runtime`). Target and
    draft run on the same runtime.

    ``prompt_cache_mb`` (llama.cpp runtime): prefilled prompts kept on disk under the cache folder,
    up to this many MiB per model, so a later process whose prompt starts the same way (the same
    system message or schema hint placed first) restores that prefix instead of computing it, with
    bitwise the same cache (:mod:`~constrained_spec.models.llamacpp.prompt_states`); 0 (default): none kept.
    The CLI's ``generate`` keeps 512 MiB. ``prompt_memory_mb`` (llama.cpp runtime): the same in this
    process's memory, per model (default 256 MiB; 0: none), for the calls of one process (a job, a server):
    a prompt restores the longest cut-aligned prefix any earlier prompt saved, not only the previous one's."""

    model: Any = DEFAULT_TARGET
    draft: Any = DEFAULT_DRAFT
    dtype: str = "auto"
    draft_dtype: str | None = None
    cache_dir: str | None = None
    device: str = "auto"
    prefill_dtype: str = "same"
    draft_prefill_dtype: str | None = None
    runtime: str = "auto"
    prompt_cache_mb: int = 0
    prompt_memory_mb: int = 256

    def __post_init__(self) -> None:
        for name in ("prompt_cache_mb", "prompt_memory_mb"):
            value = getattr(self, name)
            _check(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                   f"{name} must be a non-negative integer, not {value!r}")
        for name in ("prefill_dtype", "draft_prefill_dtype"):
            value = getattr(self, name)
            _check((value is None and name == "draft_prefill_dtype") or value in PREFILL_DTYPES,
                   f"unknown {name} {value!r}; choose from {', '.join(PREFILL_DTYPES)}")

        for name in ("dtype", "draft_dtype"):
            value = getattr(self, name)
            if value is None and name == "draft_dtype":
                continue
            try:
                normalize_dtype(value)
            except Exception:
                raise ConfigError(f"unknown {name} {value!r}; choose from {', '.join(DTYPE_CHOICES)}") from None
        _check(self.runtime in RUNTIMES, f"unknown runtime {self.runtime!r}; choose from {', '.join(RUNTIMES)}")
        object.__setattr__(self, "device", normalize_device(self.device))
        if is_cuda(self.device):  # "auto" is checked when it resolves (models.torch.devices.dtype_for_device)
            for name in ("dtype", "draft_dtype"):
                value = getattr(self, name)
                _check(value is None or normalize_dtype(value) not in PACKED_TAGS,
                       f"{name} {value!r} is a CPU-only layout (weights packed for fbgemm) and cannot run on {self.device}; "
                       "use bf16, fp16, fp32 or auto")


@dataclass(frozen=True)
class BatchConfig:
    """How calls share the models. ``max_batch_size`` > 1 turns on continuous batching (that many
    calls decode at once as rows of one batch); each row's cache holds ``batch_max_tokens`` (prompt
    and output, preallocated); ``prefix_cache_mb`` per model keeps prefilled prompts;
    ``prefill_chunk`` prompt tokens join per batch step while others decode. ``adaptive`` applies to
    rows too, each learning on its own copy of ``Generator.draft_length``. ``prefill_split`` > 0
    prefills one-at-a-time decoding in forwards of that many tokens (a batch prefills in chunks of
    ``prefill_chunk``)."""

    max_batch_size: int = 1
    batch_max_tokens: int = 4096
    prefix_cache_mb: int = 1024
    prefill_chunk: int = 128
    prefill_split: int = 0

    def __post_init__(self) -> None:
        _check(self.max_batch_size >= 1, "max_batch_size must be >= 1")
        _check(not (self.max_batch_size > 1 and self.prefill_split),
               "prefill_split applies to one-at-a-time decoding; a batch prefills in chunks of prefill_chunk")


@dataclass(frozen=True)
class CompileConfig:
    """How output types compile: ``grammar_engine`` (:data:`GRAMMAR_ENGINES`), ``schema_options``
    (a ``grammar.json_schema.SchemaOptions``: draft, refs, limits), the automaton engine's
    ``disk_cache`` and ``compile_timeout`` (seconds per build), ``max_regex_chars``."""

    grammar_engine: str = "lazy"
    schema_options: Any = None
    disk_cache: bool = True
    compile_timeout: float | None = 120.0
    max_regex_chars: int = MAX_REGEX_CHARS

    def __post_init__(self) -> None:
        _check(self.grammar_engine in GRAMMAR_ENGINES,
               f"unknown grammar engine {self.grammar_engine!r}; choose one of {', '.join(GRAMMAR_ENGINES)}")


#: the parts of a GeneratorConfig a keyword may replace whole (``Generator(decode=DecodeConfig(...))``)
_PARTS = {"models": ModelConfig, "decode": DecodeConfig, "batch": BatchConfig, "compile": CompileConfig}


@dataclass(frozen=True)
class GeneratorConfig:
    """What a Generator is built from: its models, how it decodes, batches and compiles, and the
    defaults of each call (``max_new_tokens``, ``schema_hint_style``: see :data:`SCHEMA_HINT_STYLES`;
    ``schema_hint_place``: see :data:`SCHEMA_HINT_PLACES`;
    ``eos_token_ids``: None reads them off the tokenizer and the model; ``progress``: show load
    progress)."""

    models: ModelConfig = field(default_factory=ModelConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    max_new_tokens: int = 512
    schema_hint_style: str = "types"
    eos_token_ids: tuple[int, ...] | None = None
    progress: bool = True
    schema_hint_place: str = "system"

    def __post_init__(self) -> None:
        _check(self.schema_hint_style in SCHEMA_HINT_STYLES,
               f"unknown schema hint style {self.schema_hint_style!r}; choose one of {', '.join(SCHEMA_HINT_STYLES)}")
        _check(self.schema_hint_place in SCHEMA_HINT_PLACES,
               f"unknown schema hint place {self.schema_hint_place!r}; choose one of {', '.join(SCHEMA_HINT_PLACES)}")
        if self.eos_token_ids is not None:
            object.__setattr__(self, "eos_token_ids", tuple(self.eos_token_ids))

    def with_options(self, **options: Any) -> "GeneratorConfig":
        """A copy with each keyword given to the part that has a field of its name (``dtype`` to
        ``models``, ``num_draft_tokens`` to ``decode``, ``max_batch_size`` to ``batch``,
        ``grammar_engine`` to ``compile``, ``max_new_tokens`` here); ``models=``, ``decode=``,
        ``batch=`` or ``compile=`` replace a part whole first. A DecodeConfig field given None keeps
        the config's value. An unknown keyword is a :class:`ConfigError` naming it."""
        parts: dict[str, Any] = {name: getattr(self, name) for name in _PARTS}
        for name in _PARTS.keys() & options.keys():
            value = options.pop(name)
            if value is not None and not isinstance(value, _PARTS[name]):
                raise ConfigError(f"Generator() option {name}= must be a {_PARTS[name].__name__}, got {type(value).__name__}")
            parts[name] = parts[name] if value is None else value
        owner = {f: part for part, cls in _PARTS.items() for f in fields_of(cls) - {"model", "draft"}}
        routed: dict[str, dict[str, Any]] = {name: {} for name in _PARTS}
        own = {name: value for name, value in options.items() if name not in owner and name in fields_of(GeneratorConfig)}
        unknown = sorted(set(options) - owner.keys() - own.keys())
        if unknown:
            raise ConfigError(f"Generator() got unknown option(s) {unknown}")
        for name, value in options.items():
            if name in owner:
                routed[owner[name]][name] = value
        parts["decode"] = parts["decode"].replace(**routed.pop("decode"))
        parts.update({name: dataclasses.replace(parts[name], **fields) for name, fields in routed.items() if fields})
        return dataclasses.replace(self, **parts, **own)


@dataclass(frozen=True)
class RunOptions:
    """One call's options (``Generator.run``'s keywords besides :class:`DecodeConfig`'s fields).

    ``max_new_tokens`` (None: the Generator's, shrunk to the room the context leaves); the sampling
    policy (``temperature``, ``top_k``, ``top_p``, ``seed``); ``schema_in_prompt``: append the schema
    hint to the prompt; ``tools``: OpenAI tool dicts for the chat template (``Generator.prompt_ids``);
    ``schema_draft``: the JSON Schema draft of a schema without ``$schema`` (``Generator.compile``).

    ``on_tokens`` (streaming) is called from the decode loop, under the generator's lock, with
    each step's newly committed token ids: final (never rolled back), EOS excluded; together
    they are ``result.token_ids``. An exception it raises ends the generation there (and
    propagates). ``on_step`` is called after each step (after each round of the particles under
    ``alignment="smc"``, which streams nothing): an exception it raises ends the generation
    there (cancellation). ``hooks``: other observers (``engine.stats.DecodeHooks``).

    ``alignment``: ``"local"`` (default: each position masked to the allowed tokens and
    renormalised) or ``"smc"``: sample what the model means under the constraint,
    P(y | y in L), by sequential Monte Carlo over ``particles`` exact speculative decodes,
    resampled when their effective sample size falls under ``ess_threshold`` * particles
    (``engine.smc``; docs/smc.md). SMC needs ``temperature`` > 0; with top-k/top-p it conditions
    the unconstrained sampler (the cut over the whole vocabulary) on the constraint. It does not
    stream (a particle's tokens may be dropped by resampling): ``on_tokens`` gets the returned
    sample once, at the end. ``result.smc`` holds every particle's text and weight and log Z.
    On a Generator with a batch of at least ``particles`` slots the particles are batch rows
    (their forwards shared; ``engine.smc_rows``), else they run one after another.
    """

    max_new_tokens: int | None = None
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    schema_in_prompt: bool = True
    on_tokens: Callable[[list[int]], None] | None = None
    on_step: Callable[[], None] | None = None
    tools: Sequence[dict] | None = None
    schema_draft: str | None = None
    hooks: Any = None
    alignment: str = "local"
    particles: int = 4
    ess_threshold: float = 0.5

    @classmethod
    def split(cls, options: dict[str, Any]) -> tuple["RunOptions", dict[str, Any]]:
        """``options`` as (this call's RunOptions, its DecodeConfig changes); another keyword is a
        TypeError naming it, as Python's own for an unexpected keyword argument."""
        mine, decode = fields_of(cls), fields_of(DecodeConfig)
        unknown = set(options) - mine - decode
        if unknown:
            raise TypeError(f"run() got unexpected keyword argument(s) {sorted(unknown)}")
        return cls(**{k: v for k, v in options.items() if k in mine}), {k: v for k, v in options.items() if k in decode}


def fields_of(cls: type) -> frozenset[str]:
    """The field names of a config dataclass."""
    return frozenset(f.name for f in dataclasses.fields(cls))


__all__ = ["BatchConfig", "CompileConfig", "DEFAULT_DRAFT", "DEFAULT_TARGET", "DRAFT_CONFIDENCE", "DRAFT_HEAD_TOKENS", "DecodeConfig",
           "GRAMMAR_ENGINES", "GeneratorConfig", "ModelConfig", "NUM_DRAFT_TOKENS", "PROPOSERS", "RESTRICTED_HEAD_MAX_ROWS", "RunOptions",
           "fields_of"]
