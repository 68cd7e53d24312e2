"""Conjunction regexes shared by the compiles of one schema document (the first compile, its
size-cap retries): a retry compiles again, under tighter options, the conjunctions the compile
before it had compiled, most of which read none of the options the two differ in.

Every compile keeps remembering its own conjunctions as before (:meth:`.compiler.Compiler.compile_items`
under :meth:`~.compiler.Compiler.memo_key`); here the entries also carry what computing them did to
the compile's state, so that a later compile can take one instead of computing it, and end in the
same state:

* the options it read (``any_value_depth``, ``max_recursion_depth`` where a ``$ref`` target was met
  inside itself, ``linear_objects``: the flags :func:`~.compiler._options_read` reads); an entry
  serves another compile only where that compile's options agree on those;
* the records it left (``reducible``, ``max_seen_depth``, ``length_narrowed``, ``ignored_formats``),
  replayed where it is taken. Each is a flag, a maximum, an ordered list read without its repeats
  (``dict.fromkeys``) or a dict read sorted, so replaying an entry's whole record on top of what is
  there already leaves what computing it would have left.

A compile records these by :class:`Frame`: while a conjunction is computed, the flags start cleared
and the lists and dicts empty, and the parts it takes from the memo replay into them; when it ends,
they are what the conjunction did, and are merged back into the compile's (``or``, ``max``, appended,
updated).

Only *plain* entries serve another compile: computed outside the oneOf/not machinery that keeps
state of its own (``automata_oneof``, ``plain_oneof``, ``oneof_context``, ``unseen_now``, ``negated_items``, the strict round, synthetic negations,
dropped ``else`` sides, ``allow_unenforced`` records), and taken only where none of that is in force
either. Inside one compile, an entry serves as the memo always did. Bounded: each compile stores what
its own memo may hold (``MEMO_CHARS_FACTOR``), and the store at most :data:`SHARED_CHARS_FACTOR`
times ``max_regex_chars`` characters; past that it stops remembering (the regexes stay the same).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, NamedTuple, Optional

from constrained_spec.grammar.json_schema.base import MemoKey
from constrained_spec.grammar.json_schema.ir import Conjunct
from constrained_spec.grammar.json_schema.options import SchemaOptions

if TYPE_CHECKING:
    from constrained_spec.grammar.json_schema.compiler import Compiler

__all__ = ["SharedMemo", "Sharing", "Entry", "Frame", "start_sharing", "SHARE", "SHARED_CHARS_FACTOR", "MAX_VARIANTS"]

#: whether compiles share their conjunction regexes (off only in tests that compare against not sharing)
SHARE = True
#: the store of one document holds at most this many times ``max_regex_chars`` characters of regexes
SHARED_CHARS_FACTOR = 40
#: most entries (option variants) kept under one conjunction key
MAX_VARIANTS = 4


class Entry(NamedTuple):
    """One conjunction's regex and what computing it did (see the module docstring)."""

    regex: Optional[str]
    items: list[Conjunct]  # kept: the ids in the key stay theirs
    owner: "Sharing"  # the compile that computed it
    #: whether its records are all it did (else taking it taints the conjunctions around it)
    plain: bool
    any_value_depth: Optional[int]  # each retry option: its value where the computation read it, else None
    max_recursion_depth: Optional[int]
    linear_objects: Optional[bool]
    reducible: bool
    max_seen_depth: int
    narrowed: tuple[str, ...]
    formats: tuple[tuple[str, str], ...]

    def serves(self, comp: "Compiler") -> bool:
        """Whether another compile ``comp`` may take this entry: a plain one whose read options
        agree with ``comp``'s, taken where no oneOf/not state is in force."""
        o = comp.opts
        return (self.plain and neutral(comp)
                and (self.any_value_depth is None or self.any_value_depth == o.any_value_depth)
                and (self.max_recursion_depth is None or self.max_recursion_depth == o.max_recursion_depth)
                and (self.linear_objects is None or self.linear_objects == o.linear_objects))

    def replay(self, comp: "Compiler", sharing: "Sharing") -> None:
        """Leave in ``comp`` the records computing this conjunction leaves."""
        if self.any_value_depth is not None:
            comp.read_any_depth = True
        if self.max_recursion_depth is not None:
            comp.recursive = True
        if self.linear_objects is not None:
            comp.read_linear = True
        if self.reducible:
            comp.reducible = True
        if self.max_seen_depth > comp.max_seen_depth:
            comp.max_seen_depth = self.max_seen_depth
        if self.narrowed:
            comp.length_narrowed.extend(self.narrowed)
        if self.formats:
            comp.ignored_formats.update(self.formats)
        if not self.plain:
            sharing.taint += 1  # what it did besides these records is not replayed


def neutral(comp: "Compiler") -> bool:
    """Whether none of the state the oneOf/not constructions keep is in force in ``comp``."""
    return (not comp.strict_oneof and not comp.automata_now and not comp.oneof_given
            and comp.oneof_context is None and not comp.unseen_now
            and comp.negatable_nesting == 0 and not comp.automata_oneof and not comp.plain_oneof
            and not comp.negated_items and not comp.opts.allow_unenforced)


class Frame:
    """The records of one conjunction being computed (see the module docstring)."""

    __slots__ = ("comp", "sharing", "neutral", "counts", "saved")

    def __init__(self, comp: "Compiler", sharing: "Sharing") -> None:
        self.comp = comp
        self.sharing = sharing
        self.neutral = neutral(comp)
        self.counts = self._counts()
        self.saved = (comp.read_any_depth, comp.recursive, comp.read_linear, comp.reducible, comp.max_seen_depth,
                      comp.length_narrowed, comp.ignored_formats)
        comp.read_any_depth = comp.recursive = comp.read_linear = comp.reducible = False
        comp.max_seen_depth = 0
        comp.length_narrowed = []
        comp.ignored_formats = {}

    def _counts(self) -> tuple[int, int, int, int]:
        c = self.comp
        return len(c.synthetic), len(c.dropped_else), len(c.unenforced), self.sharing.taint

    def close(self, regex: Optional[str], items: list[Conjunct]) -> Entry:
        """Merge the records back into the compile's, and the entry they make."""
        comp = self.comp
        o = comp.opts
        entry = Entry(
            regex, items, self.sharing,
            self.neutral and neutral(comp) and self._counts() == self.counts,
            o.any_value_depth if comp.read_any_depth else None,
            o.max_recursion_depth if comp.recursive else None,
            o.linear_objects if comp.read_linear else None,
            comp.reducible, comp.max_seen_depth,
            tuple(comp.length_narrowed) if comp.length_narrowed else (),
            tuple(comp.ignored_formats.items()) if comp.ignored_formats else (),
        )
        self.restore()
        return entry

    def restore(self) -> None:
        """Merge the records so far back into the compile's (also where the computation raised)."""
        comp = self.comp
        ad, rec, lin, red, depth, narrowed, formats = self.saved
        comp.read_any_depth = comp.read_any_depth or ad
        comp.recursive = comp.recursive or rec
        comp.read_linear = comp.read_linear or lin
        comp.reducible = comp.reducible or red
        if depth > comp.max_seen_depth:
            comp.max_seen_depth = depth
        if comp.length_narrowed:
            narrowed.extend(comp.length_narrowed)
        comp.length_narrowed = narrowed
        if comp.ignored_formats:
            formats.update(comp.ignored_formats)
        comp.ignored_formats = formats


class SharedMemo:
    """The plain entries of one document's compiles under one set of options (up to the retry
    options), bounded."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.chars = 0
        self.entries: dict[MemoKey, list[Entry]] = {}

    def get(self, key: MemoKey, comp: "Compiler") -> Optional[Entry]:
        """An entry of another compile under ``key`` that ``comp`` may take, or None."""
        for e in self.entries.get(key, ()):
            if e.owner is not comp.sharing and e.serves(comp):  # its own: its memo's, bounded as before
                return e
        return None

    def put(self, key: MemoKey, entry: Entry) -> None:
        """Remember a plain ``entry`` where the bounds allow."""
        n = len(entry.regex or "")
        found = self.entries.setdefault(key, [])
        if self.chars + n <= self.max_chars and len(found) < MAX_VARIANTS:
            found.append(entry)
            self.chars += n


class Sharing:
    """One compile's part in its document's store: the records of its own memo's entries (replayed
    where its memo answers, so that the conjunctions around keep complete records) and the count of
    entries taken whose records are not all they did (a conjunction that took one is not plain)."""

    def __init__(self, store: SharedMemo) -> None:
        self.store = store
        self.own: dict[MemoKey, Entry] = {}
        self.taint = 0


#: document -> (options up to the retry options -> its store); freed with the document
_STORES: "weakref.WeakKeyDictionary[object, dict[SchemaOptions, SharedMemo]]" = weakref.WeakKeyDictionary()


def start_sharing(comp: "Compiler") -> Sharing:
    """``comp``'s part in the store it shares with the other compiles of its document under its
    options (those that differ in the retry options or the time budget alone)."""
    o = comp.opts
    sig = dataclasses.replace(o, any_value_depth=0, max_recursion_depth=0, linear_objects=False, time_budget_s=None)
    stores = _STORES.setdefault(comp.doc, {})
    store = stores.get(sig)
    if store is None:
        store = stores[sig] = SharedMemo(SHARED_CHARS_FACTOR * o.max_regex_chars)
    return Sharing(store)
