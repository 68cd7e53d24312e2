"""Grammar back ends, one file per library, behind two small interfaces.

A :class:`GrammarBackend` compiles an :class:`~constrained_spec.grammar.OutputSpec` for the one
vocabulary it is bound to and returns a :class:`CompiledGrammar`: immutable, shared by requests,
whose :meth:`~CompiledGrammar.matcher` gives each request its own
:class:`~constrained_spec.grammar.matcher.GrammarMatcher` (in the shape of vLLM's
``StructuredOutputBackend`` / ``StructuredOutputGrammar`` and xgrammar's compiled grammar).

* :mod:`.llguidance` (engine ``"lazy"``, the default): regexes and Lark grammars, compiled in about
  a millisecond, masks computed as the output reaches them;
* :mod:`.outlines_core` (engine ``"automaton"``, the ``automaton`` extra): the eager byte DFA of a
  regex, built per vocabulary and cached on disk; Lark grammars go to llguidance.

:func:`make_backend` picks one by engine name; the ``outlines-core`` package is imported only when
the automaton engine builds its first automaton.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Callable, Protocol

from constrained_spec.errors import ConfigError
from constrained_spec.grammar.matcher import GrammarMatcher
from constrained_spec.grammar.vocab import TokenVocabulary

if TYPE_CHECKING:
    from constrained_spec.grammar import OutputSpec

#: the grammar engines (``Generator(grammar_engine=...)``) and the back end each names
GRAMMAR_ENGINES = ("lazy", "automaton")
#: what installs the automaton engine's library
AUTOMATON_EXTRA = "pip install 'constrained-spec[automaton]'"

__all__ = ["AUTOMATON_EXTRA", "CompiledGrammar", "GRAMMAR_ENGINES", "GrammarBackend", "make_backend"]


class CompiledGrammar(Protocol):
    """A grammar compiled for one vocabulary: immutable, shareable; one matcher per request."""

    @property
    def vocab(self) -> TokenVocabulary:
        """The vocabulary it was compiled for."""
        ...

    def matcher(self) -> GrammarMatcher:
        """A fresh matcher at the start of the grammar."""
        ...


class GrammarBackend(Protocol):
    """A grammar library bound to one vocabulary: compiles output specs to grammars."""

    @property
    def name(self) -> str:
        """The engine name (:data:`GRAMMAR_ENGINES`)."""
        ...

    @property
    def vocab(self) -> TokenVocabulary:
        """The vocabulary it compiles for."""
        ...

    def compile(self, spec: OutputSpec, max_source_chars: int, disk_cache: bool = True) -> CompiledGrammar:
        """The grammar of ``spec``, built now; regex or grammar text over ``max_source_chars``
        characters is a :class:`~constrained_spec.errors.CompileLimitError`; ``disk_cache=False``
        keeps a back end with a disk cache off it (a cold build)."""
        ...


def make_backend(engine: str, vocab: TokenVocabulary, encode: Callable[[str], list[int]] | None, *, cache_dir: object = None,
                 disk_cache: bool = True, compile_timeout: float | None = 120.0) -> GrammarBackend:
    """The back end of ``engine`` for ``vocab`` (``encode``: the tokenizer's text -> ids, which spells
    forced text canonically). An unknown engine, or ``"automaton"`` without outlines-core installed,
    is a :class:`ConfigError` (the latter naming the extra to install)."""
    from constrained_spec.grammar.backends.llguidance import LlguidanceBackend

    if engine not in GRAMMAR_ENGINES:
        raise ConfigError(f"unknown grammar engine {engine!r}; choose one of {', '.join(GRAMMAR_ENGINES)}")
    lazy = LlguidanceBackend(vocab, encode)
    if engine == "lazy":
        return lazy
    if importlib.util.find_spec("outlines_core") is None:
        raise ConfigError(f"grammar_engine='automaton' needs the outlines-core package: {AUTOMATON_EXTRA}")
    from constrained_spec.grammar.backends.outlines_core import OutlinesCoreBackend

    return OutlinesCoreBackend(vocab, lazy, cache_dir=cache_dir, disk_cache=disk_cache, compile_timeout=compile_timeout)
