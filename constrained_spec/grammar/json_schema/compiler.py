"""JSON Schema -> regex compiler: the core that composes keyword handlers, combinators and the
emitters per JSON type.

The regex full-matches the JSON text of values that the schema accepts.  It is compiled
later (by outlines-core) into a DFA over UTF-8 bytes, so it uses a dialect shared by Python
``re`` and Rust ``regex-automata``: no lookaround, no backreferences, ``[0-9]`` instead of
``\\d``, explicit character classes, anchors implicit.

Soundness first: every string the regex accepts parses to a value that the schema accepts
(checked against the ``jsonschema`` validator).  Where a keyword cannot be expressed exactly
the compiler either *restricts* the language (e.g. it never emits additional properties that
the schema does not name, fixes one key order, bounds nesting of free-form values, unrolls
recursion to a fixed depth) or raises :class:`UnsupportedKeywordError` naming the keyword
and its JSON pointer (or, with ``allow_unenforced=True``, records it in
``SchemaRegex.unenforced`` so the caller validates the finished value).

How it works: :meth:`Compiler.absorb` folds a conjunction of subschemas into one
:class:`~.ir.Flat` (keyword by keyword, :mod:`.keywords`); :meth:`Compiler.flat_parts` expands
its branch groups (``anyOf``/``oneOf``/``if``/dependencies, :mod:`.combinators`) into one
conjunction per combination; :meth:`Compiler.compile_leaf` emits each JSON type the conjunction
allows (``emit_*``) and joins the alternatives.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from typing import Any, Callable, Optional, ParamSpec, Union

from constrained_spec.errors import CompileLimitError, EmptyLanguageError, SchemaError, UnsupportedKeywordError
from constrained_spec.grammar import ecma_regex
from constrained_spec.grammar.cycle_gc import cycle_collection_paused
from constrained_spec.grammar.json_schema import shared_memo
from constrained_spec.grammar.json_schema.base import ConjunctionKey, MemoKey, time_limit_error
from constrained_spec.grammar.json_schema.combinators import Combinators, oneof_true_rest
from constrained_spec.grammar.json_schema.context import Ctx, SchemaDocument
from constrained_spec.grammar.json_schema.declared_names import UnseenClaimFailed, check_unseen_constants, context_names
from constrained_spec.grammar.json_schema.emit_array import ArrayEmitter
from constrained_spec.grammar.json_schema.emit_lark import build_lark, placeholder
from constrained_spec.grammar.json_schema.emit_number import NumberEmitter
from constrained_spec.grammar.json_schema.emit_object import ObjectEmitter
from constrained_spec.grammar.json_schema.emit_string import StringEmitter
from constrained_spec.grammar.json_schema.emit_value import ValueEmitter
from constrained_spec.grammar.json_schema.ir import Action, Conjunct, Flat, Forbid, Holds, Require, Unseen
from constrained_spec.grammar.json_schema.keywords import IGNORED_KEYWORDS, STRUCTURAL_KEYWORDS, Keywords, asserting_keys
from constrained_spec.grammar.json_schema.options import (
    DECLARED_PROPERTIES_NOTE,
    HOIST_CHARS,
    HOIST_CHARS_SMALL,
    MAX_BRANCH_COMBINATIONS,
    MAX_REF_CHAIN,
    NO_REGEX_NOTE,
    REF_CYCLE_DEPTH,
    SchemaOptions,
    SchemaRegex,
    whitespace_regex,
)
from constrained_spec.grammar.json_schema.overlap_not import overlap_not_group
from constrained_spec.grammar.json_schema.regex_text import alt
from constrained_spec.grammar.json_schema.values import ALL_TYPES, intersect_types, json_value_regex, type_of
from constrained_spec.grammar.regex_nesting import REGEX_NEST_LIMIT, too_deep

__all__ = ["Compiler", "schema_to_regex", "value_regex"]

#: the memo of conjunction regexes holds at most this many times ``max_regex_chars`` characters
#: (then it stops remembering; the regexes stay the same, only the work grows back)
MEMO_CHARS_FACTOR = 20


def schema_to_regex(
    schema: Union[dict[str, Any], bool, str], options: Optional[SchemaOptions] = None
) -> SchemaRegex:
    """Compile a JSON Schema (dict, bool or JSON text) to a regex over the JSON text.

    Raises :class:`SchemaError` for malformed schemas, :class:`UnsupportedKeywordError`
    for keywords that cannot be enforced, :class:`CompileLimitError` when the regex grows
    past ``options.max_regex_chars`` or compiling exceeds the time budget, and
    :class:`EmptyLanguageError` when no value satisfies the (restricted) schema.
    """
    options = options or SchemaOptions()
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise SchemaError(f"schema is not valid JSON: {e}") from e
    if not isinstance(schema, (dict, bool)):
        raise SchemaError(f"a schema must be an object or a boolean, not {type(schema).__name__}")
    start = time.monotonic()
    comp = Compiler(schema, options)
    try:
        result, recursive = comp.run(), comp.recursive
    except CompileLimitError as e:
        if e.kind != "size":
            raise
        return _over_cap(schema, options, start, e, comp)
    if (recursive or result.narrowed) and options.recursive_refs == "grammar":
        lark, _ = _schema_grammar(schema, options, start, doc=comp.doc)
        if lark is None:  # the regex alone narrows (or holds the recursion to a depth): JSON-token terminals
            lark, _ = _schema_grammar(schema, options, start, hoist=HOIST_CHARS, doc=comp.doc, split=True,
                                      split_only=True)
        if lark is not None:
            result = dataclasses.replace(result, lark=lark)
    return _exact_or_refused(result, options)


_P = ParamSpec("_P")


def _long_text_memo_kept(compile_fn: Callable[_P, SchemaRegex]) -> Callable[_P, SchemaRegex]:
    """``compile_fn`` with the text scanners' long-text answers kept for the one call
    (:func:`ecma_regex.long_text_memo`) and the cycle collector paused for it
    (:func:`~constrained_spec.grammar.cycle_gc.cycle_collection_paused`)."""

    @functools.wraps(compile_fn)
    def compile_kept(*args: _P.args, **kwargs: _P.kwargs) -> SchemaRegex:
        with ecma_regex.long_text_memo(), cycle_collection_paused():
            return compile_fn(*args, **kwargs)

    return compile_kept


schema_to_regex = _long_text_memo_kept(schema_to_regex)


def _exact_or_refused(result: SchemaRegex, options: SchemaOptions) -> SchemaRegex:
    """``result`` where its language is the schema's: a grammar holds it, or the regex is not
    narrowed. A narrowed regex alone (no grammar could be built: e.g. a large all-optional object
    whose grammar fails the greedy-lexing check) is refused by name (:class:`CompileLimitError`,
    the pointers of the narrowing), or with ``allow_unenforced`` kept with those pointers recorded
    in ``unenforced`` (a sound part, said so)."""
    if result.lark is not None or not result.narrowed or options.recursive_refs != "grammar":
        return result  # (recursive_refs="unroll" asks for one regex: its narrowings are the documented ones)
    if options.allow_unenforced:
        return dataclasses.replace(result, unenforced=tuple(dict.fromkeys(result.unenforced + result.narrowed)))
    raise CompileLimitError(
        "the schema's language needs a grammar here and none could be built exactly (the regex alone would "
        "hold only part of it at " + ", ".join(result.narrowed[:3]) + (", ..." if len(result.narrowed) > 3 else "")
        + "); allow_unenforced keeps that part, recorded", kind="size")


def _over_cap(schema: Union[dict[str, Any], bool], options: SchemaOptions, start: float, error: CompileLimitError,
              first: "Compiler") -> SchemaRegex:
    """A schema whose regex passed ``max_regex_chars`` (or nests past :data:`REGEX_NEST_LIMIT`
    levels, which llguidance's regex parser refuses): its grammar with every conjunction larger
    than :data:`~.options.HOIST_CHARS` a rule of its own (the whole language, sizes adding up
    instead of multiplying; None where it cannot be built exactly), and the regex of the compiler's
    tighter retries (a sound part of the language, for the automaton engine) where one fits. The
    retries run first, as before grammars; the grammar gets the time budget they leave.

    With a grammar and no regex, ``regex`` is ``""`` (no JSON text is empty) and ``narrowed`` says
    so; with neither, ``error`` is raised, as before grammars. ``first``: the compiler that failed
    (its schema document is used again)."""
    result: Optional[SchemaRegex] = None
    recursive = False
    if first.reducible:  # the retries first, as before grammars (their time limit raises as before)
        found = _retry_regex(schema, options, start, first.doc, first_read=_options_read(first))
        if found is not None:
            result, recursive = found
    if options.recursive_refs != "grammar":
        if result is None:
            raise error
        return result
    # JSON-token terminals (``build_lark(split=True)``, its first try) where nothing else answers or the
    # regex is narrowed (without a grammar it would be refused); a recursive schema whose regex is
    # exact keeps the grammar it had
    lark, gcomp = _schema_grammar(schema, options, start, hoist=HOIST_CHARS, doc=first.doc,
                                  split=result is None or bool(result.narrowed))
    if result is not None:
        if lark is None and (recursive or result.narrowed):
            lark, _ = _schema_grammar(schema, options, start, doc=first.doc)
        return _exact_or_refused(dataclasses.replace(result, lark=lark) if lark is not None else result, options)
    if lark is None:  # the last try: smaller rules (a schema that had an answer never comes here)
        lark, gcomp = _schema_grammar(schema, options, start, hoist=HOIST_CHARS_SMALL, doc=first.doc, split=True,
                                      split_only=True)
    if lark is None or gcomp is None:
        raise error
    return SchemaRegex(
        "",
        tuple(gcomp.unenforced),
        gcomp.max_seen_depth,
        tuple(sorted(gcomp.ignored_formats.items())),
        lark=lark,
        narrowed=(NO_REGEX_NOTE,),
    )


def _schema_grammar(schema: Union[dict[str, Any], bool], options: SchemaOptions, start: float,
                    hoist: Optional[int] = None, doc: Optional[SchemaDocument] = None,
                    split: bool = False, split_only: bool = False) -> tuple[Optional[str], Optional["Compiler"]]:
    """The Lark grammar of a recursive or narrowed schema (rules for the conjunctions met inside
    themselves, large all-optional objects and, with ``hoist``, every conjunction whose regex passes
    that many characters) and the compiler that wrote it; (None, None) where it cannot be built
    exactly (:func:`~.emit_lark.build_lark`, with JSON-token terminals as its first try where
    ``split``; with those alone where ``split_only``). Past the time budget it raises
    :func:`~.base.time_limit_error` (kind ``"time"``) rather than answer None: whether a grammar
    exists does not depend on how busy the host is."""
    budget = options.time_budget_s
    if budget is not None:
        budget -= time.monotonic() - start
        if budget <= 0:
            raise time_limit_error(options.time_budget_s)
    comp = Compiler(schema, dataclasses.replace(options, time_budget_s=budget), doc)
    comp.grammar_mode = True
    comp.hoist_chars = hoist
    try:
        root = comp.compile([(comp.doc.root_ctx(), True)])
        if root is None or not comp.rule_bodies:
            return None, None
        lark = build_lark(root, comp.rule_bodies, comp.and_lexemes, scaled=hoist is not None, deadline=comp.deadline,
                          split=split, split_only=split_only)
    except CompileLimitError as e:
        if e.kind == "time":
            raise
        return None, None
    except (UnsupportedKeywordError, EmptyLanguageError, RecursionError):
        return None, None
    return (lark, comp) if lark is not None else (None, None)


@dataclasses.dataclass(frozen=True)
class _OptionsRead:
    """The retry options one compile read, each None where its steps never read it: a compile that
    differs from it only in options it never read takes the same steps to the same end."""

    any_value_depth: Optional[int]
    max_recursion_depth: Optional[int]
    linear_objects: Optional[bool]

    def covers(self, ad: int, rd: int, lin: bool) -> bool:
        """Whether a compile under (ad, rd, lin) reads the same values where this one read any."""
        return ((self.any_value_depth is None or self.any_value_depth == ad)
                and (self.max_recursion_depth is None or self.max_recursion_depth == rd)
                and (self.linear_objects is None or self.linear_objects == lin))


def _options_read(comp: "Compiler") -> _OptionsRead:
    """The retry options ``comp`` read: ``any_value_depth`` where a free-form value took its default
    depth, ``max_recursion_depth`` where a ``$ref`` target was met inside itself (before that no
    recursion count is compared with it), ``linear_objects`` where an all-optional object of two or
    more declared properties was emitted."""
    o = comp.opts
    return _OptionsRead(o.any_value_depth if comp.read_any_depth else None,
                        o.max_recursion_depth if comp.recursive else None,
                        o.linear_objects if comp.read_linear else None)


def _retry_regex(schema: Union[dict[str, Any], bool], options: SchemaOptions, start: float,
                 doc: Optional[SchemaDocument] = None,
                 first_read: Optional[_OptionsRead] = None) -> Optional[tuple[SchemaRegex, bool]]:
    """The regex under tighter (still sound) restrictions -- shallower free-form values, shallower
    recursion, all-optional objects that start with their first property -- and whether a $ref
    target was met inside itself; None where none fits in ``max_regex_chars``.

    A try is skipped where an earlier one (``first_read``: the compile before the retries) passed
    the cap having read none of the options they differ in (:class:`_OptionsRead`): it would take
    the same steps to the same failure (the answer is the same, without its time). E.g. a compile
    that passed the cap before any ``$ref`` target was met inside itself never read
    ``max_recursion_depth``."""
    tried = {(options.any_value_depth, options.max_recursion_depth, options.linear_objects)}
    failed: list[_OptionsRead] = [] if first_read is None else [first_read]
    ad, rd = options.any_value_depth, options.max_recursion_depth
    plan = [(min(ad, 1), rd, options.linear_objects), (min(ad, 1), rd, True)]
    while rd > 1:
        rd -= 1
        plan.append((min(ad, 1), rd, True))
    plan += [(0, min(rd, 1), True), (0, 0, True)]
    for ad, rd, lin in plan:
        if (ad, rd, lin) in tried:
            continue
        tried.add((ad, rd, lin))
        if any(f.covers(ad, rd, lin) for f in failed):
            continue
        budget = options.time_budget_s
        if budget is not None:
            budget = budget - (time.monotonic() - start)
            if budget <= 0:  # the retries are not cut short by time (the answer would depend on it)
                raise time_limit_error(options.time_budget_s)
        opts2 = dataclasses.replace(
            options, any_value_depth=ad, max_recursion_depth=rd, linear_objects=lin, time_budget_s=budget
        )
        comp = Compiler(schema, opts2, doc)
        try:
            return comp.run(), comp.recursive
        except CompileLimitError as e:
            if e.kind != "size":
                raise
            failed.append(_options_read(comp))
    return None


def value_regex(value: Any, options: Optional[SchemaOptions] = None) -> str:
    """Regex matching exactly the serialisation of one JSON value (compact or flexible)."""
    return json_value_regex(value, whitespace_regex(options or SchemaOptions()))


def ctx_identity(ctx: Ctx) -> tuple[int, str, str]:
    """A subschema in a conjunction's key: the schema object, its pointer and its context type."""
    return id(ctx.schema), ctx.ptr, type(ctx).__name__


def resolver_base_uri(resolver: object) -> Optional[str]:
    """The base URI a ``referencing`` resolver resolves against. ``referencing`` has no public
    accessor for it, so this reads the resolver's ``_base_uri`` field (a test pins that it is
    there); None where a later version has renamed it (the memo then stays off rather than key by
    the resolver's id, which Python reuses once the resolver is freed)."""
    base = getattr(resolver, "_base_uri", None)
    return base if isinstance(base, str) else None


class Compiler(Keywords, Combinators, ValueEmitter, NumberEmitter, StringEmitter, ArrayEmitter, ObjectEmitter):
    """One compilation of one schema under one set of options (:meth:`run`)."""

    def run(self) -> SchemaRegex:
        """Compile the whole schema."""
        root = self.doc.root_ctx()
        try:
            r = self.compile([(root, True)])
        except RecursionError as e:
            raise CompileLimitError("schema nesting too deep to compile") from e
        if r is None:
            if self.dropped_else:  # the restriction, not the schema, may be what admits nothing
                raise UnsupportedKeywordError(
                    "if", self.dropped_else[0],
                    "its 'else' side needs the negation of 'if', which is not supported, and the rest admits no value",
                )
            raise EmptyLanguageError(
                "the schema (as restricted by the compiler) accepts no value; where values need properties the "
                "schema does not declare: " + DECLARED_PROPERTIES_NOTE
            )
        if len(r) > self.opts.max_regex_chars:
            raise CompileLimitError(f"regex has {len(r)} characters, over max_regex_chars={self.opts.max_regex_chars}",
                                    kind="size")
        if too_deep(r):  # llguidance's regex parser would refuse it: the size cap's route (a grammar)
            raise CompileLimitError(f"the schema's regex nests deeper than the {REGEX_NEST_LIMIT} levels llguidance's regex parser accepts",
                                    kind="size")
        return SchemaRegex(
            r,
            tuple(self.unenforced),
            self.max_seen_depth,
            tuple(sorted(self.ignored_formats.items())),
            narrowed=tuple(dict.fromkeys(self.length_narrowed)),
        )

    def absorb(self, flat: Flat, ctx: Ctx, positive: bool = True, depth: int = 0) -> None:
        """Add the constraints of ``ctx`` (or of its negation) to ``flat``."""
        self.tick()
        if depth > MAX_REF_CHAIN:
            self.refuse("$ref", ctx.ptr, "reference chain too long")
        ctx = self.doc.enter(ctx)
        s = ctx.schema
        if not positive:
            if isinstance(s, dict) and asserting_keys(s) == {"not"}:
                self.absorb(flat, ctx.child(s["not"], "not"), True, depth + 1)  # not not X: X
                return
            t = self.bare_ref_target(ctx)
            ts = t.schema
            if isinstance(ts, dict) and asserting_keys(ts) == {"anyOf"} and isinstance(ts["anyOf"], list) and ts["anyOf"]:
                for i, sub in enumerate(ts["anyOf"]):  # not anyOf [A, B]: not A and not B
                    self.absorb(flat, t.child(sub, "anyOf", i), False, depth + 1)
                return
            disjoint = self.disjoint_one_of(t)
            if disjoint is not None:  # not oneOf of disjoint branches (its anyOf): every branch failing
                for sub_ctx in disjoint:
                    self.absorb(flat, sub_ctx, False, depth + 1)
                return
            overlap = overlap_not_group(self, t)
            if overlap is not None and not self._leaf_negatable(ctx):  # not oneOf: none holds, or two do
                flat.groups.append(overlap)
                flat.sources.append((ctx, False))
                return
            rest = oneof_true_rest(ts)
            if rest is not None:  # oneOf [true, X, ...] holds where no X does: its not, some X
                if rest:
                    flat.groups.append(("anyOf", [[Holds(t.child(ts["oneOf"][i], "oneOf", i), True)] for i in rest],
                                        ctx.ptr))
                else:
                    flat.types = set()
                    flat.constrained = True
                flat.sources.append((ctx, False))
                return
            group = self.negation_group(ctx)
            parts = None if group is not None else self.conjunction_parts(ctx)
            if parts is not None and self._leaf_negatable(ctx):
                parts = None  # the leaf negates it whole, as before
            if group is not None:
                flat.groups.append(group)
            elif parts is not None:  # not (A and B): not A or not B, each part negated in turn
                flat.groups.append(("anyOf", [[Holds(p, False)] for p in parts], ctx.ptr))
            else:
                flat.nots.append(ctx)
            flat.sources.append((ctx, False))
            return
        flat.sources.append((ctx, True))
        if s is True or s == {}:
            return
        if s is False:
            flat.types = set()
            flat.constrained = True
            return
        if not isinstance(s, dict):
            return
        ptr = ctx.ptr
        if "$ref" in s and isinstance(s["$ref"], str):
            target = self.doc.resolve_ref(ctx, s["$ref"])
            key = id(target.schema)
            flat.refs.append(key)
            if flat.refs.count(key) > 1 and depth > REF_CYCLE_DEPTH:
                self.refuse("$ref", ptr + "/$ref", "reference cycle without structure")
            self.absorb(flat, target, True, depth + 1)
            if self.draft <= 7:
                return  # siblings of $ref are ignored before 2019-09
        for kw in ("$dynamicRef", "$recursiveRef"):
            if kw in s:
                self.refuse(kw, ptr + "/" + kw, "dynamic references are not supported")
        for k, v in s.items():
            if k in IGNORED_KEYWORDS or k == "$ref":
                continue
            if not self.handle_keyword(flat, ctx, k, v, ptr + "/" + k, depth) and k in STRUCTURAL_KEYWORDS:
                flat.constrained = True
        self.absorb_structure(flat, ctx)

    def compile(self, items: list[Conjunct]) -> Optional[str]:
        """Compile the conjunction of a list of (ctx, positive) pairs."""
        self.tick()
        if self.grammar_mode:
            return self.compile_as_rule(items)
        return self.compile_items(items)

    def compile_items(self, items: list[Conjunct]) -> Optional[str]:
        """The regex of the conjunction of (ctx, positive) pairs (in grammar mode, with
        placeholders where a conjunction being compiled is met again).

        Outside grammar mode the regex is remembered under :meth:`memo_key`: what a conjunction
        compiles to depends only on its subschemas (each with its base URI) and on how many
        times each ``$ref`` target is being compiled around it (the unrolling's counts), and
        everything else a compile records (refusals recorded, ignored formats, the recursion
        flags) is set already by the first compile under that key.
        """
        key = None if self.grammar_mode or not self.memoize else self.memo_key(items)
        if key is not None and key in self.conjunction_regex:
            if self.sharing is not None:
                self.replay_own(key, self.sharing)
            return self.conjunction_regex[key][0]
        if key is not None and shared_memo.SHARE:
            return self.compile_shared(items, key)
        flat = Flat()
        for ctx, pos in items:
            self.absorb(flat, ctx, pos)
        r = self.compile_flat(flat)
        if key is not None and self.memo_chars + len(r or "") <= MEMO_CHARS_FACTOR * self.opts.max_regex_chars:
            self.conjunction_regex[key] = (r, items)  # items kept: the ids in the key stay theirs
            self.memo_chars += len(r or "")
        return r

    def compile_shared(self, items: list[Conjunct], key: MemoKey) -> Optional[str]:
        """:meth:`compile_items` of a conjunction this compile's memo does not hold, with the
        conjunction regexes shared by the compiles of one document (:mod:`.shared_memo`): another
        compile's entry where one serves (its records replayed), else computed with its records
        kept, and remembered (in this compile's memo, bounded as before, and in the store)."""
        sharing = self.sharing
        if sharing is None:
            sharing = self.sharing = shared_memo.start_sharing(self)
        hit = sharing.store.get(key, self)
        if hit is not None:
            hit.replay(self, sharing)
            return hit.regex
        frame = shared_memo.Frame(self, sharing)
        try:
            flat = Flat()
            for ctx, pos in items:
                self.absorb(flat, ctx, pos)
            r = self.compile_flat(flat)
        except BaseException:
            frame.restore()
            raise
        entry = frame.close(r, items)
        if self.memo_chars + len(r or "") <= MEMO_CHARS_FACTOR * self.opts.max_regex_chars:
            self.conjunction_regex[key] = (r, items)  # items kept: the ids in the key stay theirs
            self.memo_chars += len(r or "")
            sharing.own[key] = entry
        if entry.plain:
            sharing.store.put(key, entry)
        return r

    def replay_own(self, key: MemoKey, sharing: "shared_memo.Sharing") -> None:
        """Where this compile's memo answers: replay the records of its entry (the conjunctions
        around keep complete records), or taint them where it has none."""
        entry = sharing.own.get(key)
        if entry is None:
            sharing.taint += 1
        else:
            entry.replay(self, sharing)

    def memo_key(self, items: list[Conjunct]) -> Optional[MemoKey]:
        """A conjunction's subschemas as compiled here (not through their ``$ref``: entering a
        target through a ``$ref`` counts towards its recursion, entering it directly does not),
        their base URIs and signs, with the recursion counts in force; None (not remembered)
        where a resolver's base URI cannot be read."""
        parts = []
        for ctx, pos in items:
            base = resolver_base_uri(ctx.resolver)
            if base is None:
                return None
            parts.append((*ctx_identity(ctx), base, pos))
        return tuple(parts), tuple(sorted((k, n) for k, n in self.active.items() if n))

    def conjunction_key(self, items: list[Conjunct]) -> ConjunctionKey:
        """What identifies a conjunction: its subschemas (a bare ``$ref`` by its target) and signs."""
        key = []
        for ctx, pos in items:
            s = ctx.schema
            if isinstance(s, dict) and len(s) == 1 and isinstance(s.get("$ref"), str):
                ctx = self.doc.resolve_ref(ctx, s["$ref"])
            key.append((*ctx_identity(ctx), pos))
        return tuple(key)

    def compile_as_rule(self, items: list[Conjunct]) -> Optional[str]:
        """Grammar mode: a placeholder for a conjunction met inside itself (its rule), else its regex."""
        key = self.conjunction_key(items)
        n = self.rule_of.get(key)
        if n is not None and n in self.rule_bodies:
            return placeholder(n)
        if key in self.open_keys:
            if n is None:
                n = self.rule_of[key] = len(self.rule_of)
            return placeholder(n)
        self.open_keys.add(key)
        cuts = self.recursion_cuts
        try:
            r = self.compile_items(items)
        finally:
            self.open_keys.discard(key)
        n = self.rule_of.get(key)
        if n is None:
            # hoisting: a large conjunction becomes a rule that every later occurrence names (its
            # language is the same wherever it occurs: placeholders stand for whole rules) -- unless
            # recursion was cut off inside it, which may depend on where it was met
            if self.hoist_chars is None or r is None or len(r) <= self.hoist_chars or self.recursion_cuts != cuts:
                return r
            n = self.rule_of[key] = len(self.rule_of)
        self.rule_bodies[n] = r
        return placeholder(n)

    def compile_ctx(self, ctxs: list[Ctx]) -> Optional[str]:
        """The regex of the conjunction of the subschemas ctxs."""
        return self.compile([(c, True) for c in ctxs])

    def apply_action(self, flat: Flat, action: Action) -> None:
        """Apply one action of a chosen branch: absorb a subschema or its negation
        (:class:`~.ir.Holds`), forbid a property, require properties, or narrow the types."""
        if isinstance(action, Holds):
            self.absorb(flat, action.ctx, action.positive)
            return
        flat.constrained = True
        if isinstance(action, Forbid):
            flat.forbidden.add(action.name)
        elif isinstance(action, Require):
            for n in action.names:
                if n not in flat.required:
                    flat.required.append(n)
        elif isinstance(action, Unseen):
            flat.unseen.append(action)
        else:
            types = set(action.types)
            flat.types = types if flat.types is None else intersect_types(flat.types, types)

    def compile_flat(self, flat: Flat) -> Optional[str]:
        """The regex of flat (None: the empty language)."""
        return self.check_size(alt(self.flat_parts(flat)))

    def flat_parts(self, flat: Flat) -> list[str]:
        """Alternatives (one per JSON type and branch, deduplicated) of a flat schema."""
        self.tick()
        if flat.groups:
            n_combos = 1
            for _, branches, _ in flat.groups:
                n_combos *= max(1, len(branches))
            if n_combos > MAX_BRANCH_COMBINATIONS:
                raise CompileLimitError(
                    f"anyOf/oneOf/dependency combinations ({n_combos}) exceed the limit of {MAX_BRANCH_COMBINATIONS}"
                )
            kind, branches, ptr = flat.groups[0]
            rest = flat.copy()
            rest.groups = flat.groups[1:]
            while True:  # each retry adds ptr to one set: at most two
                try:
                    return self.group_parts(kind, branches, ptr, rest)
                except UnseenClaimFailed as e:
                    # a branch's object declares a name the split counted as never declared: once more
                    # without counting on undeclared names (declared_names)
                    if e.pointer != ptr or ptr in self.plain_oneof:
                        raise
                    self.plain_oneof.add(ptr)
                except UnsupportedKeywordError as e:
                    # a oneOf refused where a string branch's negation needs a DFA past its bounds: once
                    # more, its string branches told apart by their patterns' automata where they can be
                    if kind != "oneOf" or e.keyword != "oneOf" or e.pointer != ptr or ptr in self.automata_oneof:
                        raise
                    self.automata_oneof.add(ptr)
        return self.leaf_parts(flat)

    def group_parts(self, kind: str, branches: list[list[Action]], ptr: str, rest: Flat) -> list[str]:
        """The alternatives of the first branch group (``kind`` at ``ptr``), each branch applied to
        ``rest`` (the flat without that group)."""
        if kind == "oneOf":
            declared = self.opts.additional_properties != "spec" and ptr not in self.plain_oneof
            branches = self.one_of_branches(branches, ptr, rest.types, frozenset(rest.required),
                                            context_names(rest, declared))
        outs: list[str] = []
        for bi, br in enumerate(branches):
            f2 = rest.copy()
            try:
                for act in br:
                    self.apply_action(f2, act)
                parts = self.flat_parts(f2)
            except UnsupportedKeywordError as e:
                if kind == "if" and bi == 1 and e.keyword == "not":
                    # the 'else' side needs 'not if', which is not exact here: refused by name (before
                    # 2026-12-05 it was dropped without a word); allow_unenforced drops it, recorded
                    self.unsupported("if", ptr, f"its 'else' side needs the negation of 'if', which is not exact here ({e})")
                    if ptr not in self.dropped_else:
                        self.dropped_else.append(ptr)
                    continue
                raise
            for r in parts:
                if r not in outs:
                    outs.append(r)
        if self.grammar_mode and self.hoist_chars is not None and len("".join(outs)) > self.opts.max_regex_chars:
            # each branch combination of a schema's dependencies and conditionals writes the whole object
            # again: the grammar adds their sizes where no regex holds them all
            outs = [self.fresh_rule(r, "group-part") if len(r) > self.hoist_chars else r for r in outs]
        self.check_size("".join(outs))
        return outs

    def leaf_parts(self, flat: Flat) -> list[str]:
        """The alternatives of a flat without branch groups (its recursion counted)."""
        # recursion accounting
        for key in set(flat.refs):
            self.active[key] = self.active.get(key, 0) + 1
        try:
            over = [k for k in set(flat.refs) if self.active[k] > self.opts.max_recursion_depth + 1]
            for k in set(flat.refs):
                if self.active[k] > 1:
                    self.recursive = True
                    self.max_seen_depth = max(self.max_seen_depth, min(self.active[k] - 1, self.opts.max_recursion_depth))
            if over:
                self.max_seen_depth = max(self.max_seen_depth, self.opts.max_recursion_depth)
                self.reducible = True
                self.recursion_cuts += 1
                return []
            parts = self.compile_leaf(flat)
            self.check_size("".join(parts))
            return parts
        finally:
            for key in set(flat.refs):
                self.active[key] -= 1

    def compile_leaf(self, flat: Flat) -> list[str]:
        """The alternatives, one per JSON type, of a flat without branch groups."""
        if not flat.constrained and not flat.nots:
            return [self.any_value()]
        types = set(ALL_TYPES) if flat.types is None else set(flat.types)
        # 'not' subschemas
        for nctx in flat.nots:
            self.apply_not(flat, nctx, types)
        if flat.enum is not None:
            check_unseen_constants(flat)  # constants are written as given: the oneOf's claims checked here
            r = self.compile_enum(flat)
            return [] if r is None else [r]
        excluded = [v for _, vals in flat.excluded for v in vals]
        exb = [v for v in excluded if isinstance(v, bool)]  # 1 == True in Python: compare booleans only
        if excluded:
            ex_types = {type_of(v) for v in excluded}
            if True in exb and False in exb:
                types.discard("boolean")
            for t in ("object", "array"):
                if t in ex_types and t in types:
                    self.unsupported("not", flat.excluded[0][0].ptr, f"excluding {t} constants is not supported")
            if ex_types & {"integer", "number"} and types & {"integer", "number"}:
                self.unsupported("not", flat.excluded[0][0].ptr, "excluding numeric constants is not supported")
            if None in excluded:
                types.discard("null")
        if not types:
            return []
        out = []
        if "object" in types:
            out.append(self.compile_object(flat))
        if "array" in types:
            out.append(self.compile_array(flat))
        if "string" in types:
            out.append(self.compile_string(flat))
        if "number" in types:
            out.append(self.compile_number(flat, integer=False))
        elif "integer" in types:
            out.append(self.compile_number(flat, integer=True))
        if "boolean" in types:
            out.append("false" if True in exb else "true" if False in exb else "(true|false)")
        if "null" in types:
            out.append("null")
        return [r for r in out if r is not None]
