"""The exception hierarchy of constrained-spec.

Every error the library raises on bad input or an impossible request derives from
:class:`ConstrainedSpecError`, so callers can catch one type::

    ConstrainedSpecError
    ├── ConfigError               an option value that cannot be used (k < 0, an unknown proposer, top_p > 1, ...)
    ├── SchemaError               the schema is not valid JSON Schema (or not JSON at all)
    │   └── UnsupportedKeywordError  a keyword the compiler cannot enforce exactly (names it and its JSON pointer)
    │       └── RefRetrievalError  a $ref to a file or URL that ref_allow does not list (schemas fetch nothing by default)
    ├── GrammarError              a regex or grammar that cannot be compiled
    │   ├── EmptyLanguageError    the constraint accepts no string the vocabulary can spell
    │   └── CompileLimitError     the regex / automaton exceeded a size cap or the compile timeout
    ├── VocabularyMismatchError   target and draft (or tokenizer and model) disagree on the vocabulary
    ├── SamplingError             a distribution to draw from has no mass (a bug upstream, never silent)
    │   └── NoParticleLeftError   alignment="smc": every particle met a dead end (the request's top-k / top-p cut and grammar)
    ├── ModelLoadError            a model could not be fetched, verified, converted or loaded
    ├── TokenBudgetExceeded       max_new_tokens ran out before the constraint was complete (carries the partial text)
    ├── ContextLengthError        the prompt plus max_new_tokens does not fit the model's context window
    ├── OutputValidationError     a finished value failed its schema (only possible with post-validation opt-ins)
    └── ToolError                 a tool definition, tool_choice or tool call that cannot be used (also a ValueError)
"""

from __future__ import annotations

from typing import Any


class ConstrainedSpecError(Exception):
    """Base class of every error raised by constrained-spec."""


class ConfigError(ConstrainedSpecError, ValueError):
    """An option value that cannot be used; names the option and the allowed values."""


class SchemaError(ConstrainedSpecError):
    """The schema is malformed: not JSON, or not valid against the JSON Schema meta-schema."""

    def __init__(self, message: str, pointer: str = "") -> None:
        self.pointer = pointer
        super().__init__(f"{message} (at {pointer or '#'})" if pointer else message)


class UnsupportedKeywordError(SchemaError):
    """The schema uses a keyword that cannot be enforced exactly by the compiler."""

    def __init__(self, keyword: str, pointer: str = "", reason: str = "") -> None:
        self.keyword = keyword
        detail = f": {reason}" if reason else ""
        ConstrainedSpecError.__init__(
            self, f"unsupported JSON Schema keyword '{keyword}' at {pointer or '#'}{detail}"
        )
        self.pointer = pointer


class RefRetrievalError(UnsupportedKeywordError):
    """A ``$ref`` would read a file or the network (refused unless ``ref_allow`` lists it), or
    its allowed retrieval failed; names the reference, never the content of what it points at."""

    def __init__(self, uri: str, reason: str, pointer: str = "") -> None:
        self.uri = uri
        self.reason = reason
        self.keyword = "$ref"
        self.pointer = pointer
        where = f" (at {pointer})" if pointer else ""
        ConstrainedSpecError.__init__(self, f"$ref {uri!r} is not retrieved: {reason}{where}")


class GrammarError(ConstrainedSpecError):
    """A regex or grammar could not be compiled."""


class EmptyLanguageError(GrammarError):
    """The constraint admits no complete output that the vocabulary can spell."""


class CompileLimitError(GrammarError):
    """Compilation exceeded a configured size cap or timeout."""

    #: what ran out: ``"size"`` where a regex passed ``max_regex_chars`` (the JSON Schema compiler
    #: then retries tighter or builds a grammar), ``"time"`` past the time budget, ``""`` otherwise
    kind: str = ""

    def __init__(self, *args: object, kind: str = "") -> None:
        super().__init__(*args)
        if kind:
            self.kind = kind


class VocabularyMismatchError(ConstrainedSpecError):
    """Two components (target/draft model, tokenizer/model) do not share one vocabulary."""


class SamplingError(ConstrainedSpecError):
    """A distribution to sample from has no mass (every token has probability 0): a bug upstream."""


class NoParticleLeftError(SamplingError):
    """``alignment="smc"``: every particle reached a point where the grammar allowed nothing the
    sampler could take (within the request's top-k / top-p cut). An outcome of the request, not a
    bug: more particles, or no cut, may find a way."""


class ModelLoadError(ConstrainedSpecError):
    """A model could not be fetched, verified, converted or loaded."""


class TokenBudgetExceeded(ConstrainedSpecError):
    """Generation hit max_new_tokens before the constraint reached a final state.

    ``partial_text`` holds what was generated; it is never returned as a value. The decode loop
    that ran out also gives ``token_ids`` (the generated ids, EOS excluded; for SMC the longest
    particle's, whose text ``partial_text`` is), ``prompt_tokens`` (the prompt's length) and
    ``stats`` (the decoding stats so far, a :class:`~constrained_spec.engine.stats.DecodeStats`;
    summed over particles for SMC).
    """

    def __init__(self, max_new_tokens: int, partial_text: str, *, token_ids: list[int] | None = None,
                 prompt_tokens: int | None = None, stats: Any = None) -> None:
        self.max_new_tokens = max_new_tokens
        self.partial_text = partial_text
        self.token_ids = token_ids
        self.prompt_tokens = prompt_tokens
        self.stats = stats
        preview = partial_text if len(partial_text) <= 200 else partial_text[:200] + "..."
        super().__init__(
            f"token budget of {max_new_tokens} new tokens ran out before the output was complete; "
            f"partial output: {preview!r}"
        )


class ContextLengthError(ConstrainedSpecError, ValueError):
    """The prompt's tokens plus ``max_new_tokens`` exceed the model's context window (checked
    before any forward)."""

    def __init__(self, prompt_tokens: int, max_new_tokens: int, context_length: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.context_length = context_length
        super().__init__(
            f"this model's maximum context length is {context_length} tokens; the prompt has {prompt_tokens} "
            f"tokens and {max_new_tokens} more were asked for (max_new_tokens / max_tokens): "
            f"{prompt_tokens + max_new_tokens} in all; shorten the prompt or lower max_tokens"
        )


class OutputValidationError(ConstrainedSpecError):
    """A finished value does not validate against its schema."""


class ToolError(ConstrainedSpecError, ValueError):
    """A tool definition, tool_choice or tool call that cannot be used."""
