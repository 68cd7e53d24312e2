"""Compile once: an output type -> a :class:`CompiledConstraint` for one vocabulary.

The shape is xgrammar's (compiler -> compiled grammar -> matcher): a :class:`GrammarCompiler` is
bound to a vocabulary and its tokenizer's ``encode``, holds one back end
(:mod:`constrained_spec.grammar.backends`) and a bounded cache, and returns a
:class:`CompiledConstraint`: immutable, shareable across requests and threads, and what travels to
the request (``Generator.run`` takes it as the output type, the server queues it). Each request
asks it for its own matcher and, at the end, reads the finished text back through it (JSON
validated against its schema, a Lark grammar's text parsed by lark).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Any, Callable

from constrained_spec.errors import OutputValidationError, VocabularyMismatchError
from constrained_spec.grammar import OutputSpec, output_spec
from constrained_spec.grammar.backends import CompiledGrammar, GrammarBackend, make_backend
from constrained_spec.grammar.backends.llguidance import MAX_SOURCE_CHARS, LlguidanceBackend
from constrained_spec.grammar.length_bound import max_output_bytes
from constrained_spec.grammar.matcher import GrammarMatcher
from constrained_spec.grammar.schema_refs import validation_errors as validate_value
from constrained_spec.grammar.vocab import TokenVocabulary
from constrained_spec.lru import LRUCache

__all__ = ["COMPILED_CACHE_SIZE", "CompiledConstraint", "GrammarCompiler", "compile_for_vocabulary"]

#: compiled constraints a GrammarCompiler keeps (LRU): a long-running server sees many schemas
COMPILED_CACHE_SIZE = 64


@dataclass(frozen=True)
class CompiledConstraint:
    """An output type compiled for one vocabulary; immutable and shareable across requests."""

    spec: OutputSpec
    grammar: CompiledGrammar

    @property
    def vocab(self) -> TokenVocabulary:
        """The vocabulary it was compiled for."""
        return self.grammar.vocab

    @property
    def grammar_key(self) -> str:
        """The text the grammar was built from (the regex, or the Lark grammar): caches key on it."""
        return self.spec.regex or self.spec.grammar or ""

    @functools.cached_property
    def output_bound(self) -> int | None:
        """The most UTF-8 bytes an output can take (None: unbounded or unknown); read by the draft plan."""
        if self.spec.kind == "lark" or self.spec.grammar is not None:
            return None  # a context-free language, or a recursive schema's unbounded nesting
        return max_output_bytes(self.spec.regex)

    def matcher(self) -> GrammarMatcher:
        """A fresh per-request matcher at the start of the grammar."""
        return self.grammar.matcher()

    def parse_tree(self, text: str) -> Any:
        """lark's parse tree of ``text`` (kind lark): lark judges the language of a Lark grammar.

        None where lark's parse ran past its budget (linear in the text; an ambiguous grammar makes
        Earley cubic): the text stands on the grammar engine's acceptance.
        """
        from constrained_spec.grammar.lark_check import parse_with_lark

        return parse_with_lark(self.spec.regex, text)

    def read(self, text: str) -> tuple[Any, Any]:
        """Finished text as (value, lark's parse tree or None): :meth:`parse`, once."""
        if self.spec.kind == "lark":
            return text, self.parse_tree(text)
        return self.parse(text), None

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


class GrammarCompiler:
    """Compiles output types for one vocabulary by one back end, with a bounded cache.

    ``engine``: ``"lazy"`` (llguidance, the default) or ``"automaton"`` (outlines-core; needs the
    ``automaton`` extra); ``schema_options``: how JSON Schemas compile and validate;
    ``cache_dir`` / ``disk_cache`` / ``compile_timeout``: the automaton engine's disk cache and
    build timeout; ``max_regex_chars``: the longest regex or grammar text compiled (read at each
    compile). An unknown engine, or one whose library is missing, is a ConfigError here.
    """

    def __init__(self, vocab: TokenVocabulary, encode: Callable[[str], list[int]] | None, *, engine: str = "lazy",
                 schema_options: Any = None, cache_dir: Any = None, disk_cache: bool = True, compile_timeout: float | None = 120.0,
                 max_regex_chars: int = MAX_SOURCE_CHARS) -> None:
        self.vocab = vocab
        self.backend: GrammarBackend = make_backend(engine, vocab, encode, cache_dir=cache_dir, disk_cache=disk_cache,
                                                    compile_timeout=compile_timeout)
        self.schema_options = schema_options
        self.max_regex_chars = max_regex_chars
        self._cache: LRUCache[str, CompiledConstraint] = LRUCache(COMPILED_CACHE_SIZE)

    @property
    def engine(self) -> str:
        return self.backend.name

    def spec(self, output_type: Any, schema_draft: str | None = None) -> OutputSpec:
        """The :class:`OutputSpec` of ``output_type`` (one given is used as it is); ``schema_draft``:
        the JSON Schema draft of a schema without ``$schema``, for this call."""
        if isinstance(output_type, OutputSpec):
            return output_type
        options = self.schema_options
        if schema_draft is not None:
            from constrained_spec.grammar.json_schema import SchemaOptions

            options = dataclasses.replace(options or SchemaOptions(), draft=schema_draft)
        return output_spec(output_type, options)

    def compile(self, output_type: Any, schema_draft: str | None = None) -> CompiledConstraint:
        """``output_type`` compiled for this vocabulary (cached by its regex or grammar).

        A :class:`CompiledConstraint` is returned as it is (it must have been compiled for this
        vocabulary: another is a :class:`VocabularyMismatchError`)."""
        if isinstance(output_type, CompiledConstraint):
            if output_type.vocab is not self.vocab and output_type.vocab.fingerprint != self.vocab.fingerprint:
                raise VocabularyMismatchError("this constraint was compiled for another vocabulary than this Generator's")
            return output_type
        spec = self.spec(output_type, schema_draft)
        key = f"{spec.kind}:{spec.regex or spec.grammar or ''}"  # a grammar-only schema: its grammar
        hit = self._cache.get(key)
        if hit is not None and hit.spec == spec:
            return hit
        compiled = CompiledConstraint(spec, self.build(spec))
        self._cache.put(key, compiled)
        return compiled

    def build(self, spec: OutputSpec, disk_cache: bool = True) -> CompiledGrammar:
        """The grammar of ``spec``, built now (no memory cache: :meth:`compile` keeps those);
        ``disk_cache=False`` also keeps the automaton engine off its disk cache (a cold build)."""
        return self.backend.compile(spec, self.max_regex_chars, disk_cache)


def compile_for_vocabulary(output_type: Any, vocab: TokenVocabulary, encode: Callable[[str], list[int]],
                           schema_options: Any = None) -> CompiledConstraint:
    """An output type compiled for ``vocab`` by the default (llguidance) back end, with no cache and
    no models: the transformers logits processor's path (``integrations.transformers``)."""
    spec = output_type if isinstance(output_type, OutputSpec) else output_spec(output_type, schema_options)
    return CompiledConstraint(spec, LlguidanceBackend(vocab, encode).compile(spec, MAX_SOURCE_CHARS))
