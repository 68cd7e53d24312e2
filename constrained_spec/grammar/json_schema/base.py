"""State and bookkeeping shared by the parts of the compiler.

The compiler is one object (:class:`~constrained_spec.grammar.json_schema.compiler.Compiler`)
composed of one class per concern: keyword handlers (:mod:`.keywords`), combinators
(:mod:`.combinators`) and an emitter per JSON type (``emit_*``).  Each of them derives from
:class:`CompilerBase`, which holds the options, the schema document, the deadline, the
refusal/recording of unenforceable keywords and the size cap, and names the entry points the
parts call on one another (implemented by the part that owns them).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NoReturn, Optional, Union

from constrained_spec.errors import CompileLimitError, UnsupportedKeywordError
from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema.context import Ctx, SchemaDocument
from constrained_spec.grammar.json_schema.emit_lark import placeholder
from constrained_spec.grammar.json_schema.ir import Conjunct, Flat, Group
from constrained_spec.grammar.json_schema.options import SchemaOptions, whitespace_regex

if TYPE_CHECKING:
    from constrained_spec.grammar.json_schema.shared_memo import Sharing

__all__ = ["CompilerBase", "ConjunctionKey", "RuleKey", "MemoKey", "time_limit_error"]


def time_limit_error(budget_s: Optional[float]) -> CompileLimitError:
    """The error of a compile past its time budget (kind ``"time"``): the last-resort wall-time guard.
    It is raised out of every try (retries, grammars, the greedy-lexing check) instead of turning
    into "no answer there", so a busy host refuses by time rather than answering differently."""
    return CompileLimitError(f"compiling the schema took longer than {budget_s} s", kind="time")

#: a conjunction as the grammar mode knows it: per subschema (schema id, pointer, context type, sign)
ConjunctionKey = tuple[tuple[int, str, str, bool], ...]
#: a rule of the grammar mode: a conjunction met inside itself, or a (tag, number) of a rule the
#: emitters make (``"exact-string"``, ``"object-part"``)
RuleKey = Union[ConjunctionKey, tuple[str, int]]
#: a conjunction as the memo knows it: per subschema (schema id, pointer, context type, base URI,
#: sign), and the recursion counts in force ((``$ref`` target id, count) pairs)
MemoKey = tuple[tuple[tuple[int, str, str, str, bool], ...], tuple[tuple[int, int], ...]]


class CompilerBase:
    """Options, schema document, deadline, refusals and the size cap of one compilation."""

    #: remember each conjunction's regex (:meth:`Compiler.compile_items`); off only in tests
    #: that compare against compiling every occurrence again
    memoize = True

    def __init__(self, schema: Union[dict[str, Any], bool], options: SchemaOptions,
                 doc: Optional[SchemaDocument] = None) -> None:
        self.opts = options
        #: ``doc``: the document of an earlier compilation of the same schema under the same draft
        #: and ``ref_allow`` (checked once: the metaschema check is the slow part of a large schema)
        self.doc = doc if doc is not None else SchemaDocument(schema, options)
        self.draft = self.doc.draft
        self.ws = whitespace_regex(options)
        self.unenforced: list[str] = []
        #: 'if' pointers whose 'else' side was dropped (its negation of 'if' is not supported)
        self.dropped_else: list[str] = []
        #: 'oneOf' pointers whose string branches are told apart by their patterns' automata too
        #: (:func:`~constrained_spec.grammar.linear_regex.patterns_disjoint`): those where the DFA
        #: of a branch's negation passed its bounds first (elsewhere the output stays as it was)
        self.automata_oneof: set[str] = set()
        #: whether the 'oneOf' whose branches are being told apart now is one of those
        self.automata_now = False
        # the strict round of a oneOf (:meth:`Combinators.one_of_branches`): exact constructions only
        self.strict_oneof = False
        # the names every object has where the oneOf being told apart now is met (its context's required)
        self.oneof_given: frozenset[str] = frozenset()
        # the names its context declares where the declared mode counts on others being absent
        # (declared_names); None where it does not
        self.oneof_context: Optional[frozenset[str]] = None
        # the names the branch being told apart now was taken never to declare (declared_names)
        self.unseen_now: set[str] = set()
        #: 'oneOf' pointers told apart again without that (a branch's object declared such a name)
        self.plain_oneof: set[str] = set()
        self.synthetic: list[dict[str, Any]] = []  # schema parts the compiler made (negations), kept alive
        # ids of the ``contains`` subschemas a ``not: {items: S}`` made (exact only as "some item anywhere")
        self.negated_items: set[int] = set()
        # how many :meth:`Combinators._value_negatable` calls are open now (a recursive $ref met through
        # ``not: {items: ...}`` starts a new one: bounded by MAX_NEGATABLE_NESTING)
        self.negatable_nesting = 0
        # (id of a schema, its pointer) -> its parts for ``not`` by De Morgan (Combinators.conjunction_parts)
        self.conjunction_memo: dict[tuple[int, str], Optional[list[Ctx]]] = {}
        self.ignored_formats: dict[str, str] = {}  # pointer -> format name
        self.active: dict[int, int] = {}  # id of a $ref target -> how many times it is being compiled now
        self.max_seen_depth = 0
        self.deadline = (
            time.monotonic() + options.time_budget_s if options.time_budget_s is not None else None
        )
        self._any_cache: dict[int, str] = {}  # depth -> regex of any value
        self.reducible = False  # whether a retry with tighter restrictions can shrink the regex
        self.recursive = False  # whether a $ref target was met inside itself (the regex is unrolled)
        #: whether this compile's steps read ``any_value_depth`` (a free-form value at its default
        #: depth) and ``linear_objects`` (an all-optional object of two or more declared properties):
        #: the size-cap retries skip a try that differs from a failed one only in options it never read
        self.read_any_depth = False
        self.read_linear = False
        # grammar mode (emit_lark): a conjunction met again while it is being compiled becomes a
        # placeholder, and its regex (placeholders in it) the body of a rule
        self.grammar_mode = False
        self.rule_of: dict[RuleKey, int] = {}  # conjunction key -> rule number
        self.rule_bodies: dict[int, Optional[str]] = {}  # rule number -> its regex (None: empty)
        self.open_keys: set[ConjunctionKey] = set()  # conjunctions being compiled now
        #: grammar mode: a conjunction whose regex passes this many characters becomes a rule of its
        #: own too, so sizes add up instead of multiplying (None: only conjunctions met inside
        #: themselves and large all-optional objects become rules)
        self.hoist_chars: Optional[int] = None
        self.recursion_cuts = 0  # how many times recursion past max_recursion_depth was cut off
        #: JSON pointers where the regex holds a sound part of the language only (a narrowing):
        #: strings whose pattern and length bounds one regex cannot hold, large all-optional objects
        self.length_narrowed: list[str] = []
        #: grammar mode: rule number -> (pattern regex, length regex) of a string lexeme the
        #: grammar spells as their intersection (``/p/ & /l/``), exact where the regex narrows
        self.and_lexemes: dict[int, tuple[str, str]] = {}
        # (the conjunction's subschemas, the recursion counts in force) -> its regex: a subschema
        # met again under the same counts (a recursive $ref's branches, unrolled) compiles once
        self.conjunction_regex: dict[MemoKey, tuple[Optional[str], list[Conjunct]]] = {}
        self.memo_chars = 0  # characters of the regexes held there (bounded: compiler.MEMO_CHARS_FACTOR)
        #: this compile's part in the regexes its document's compiles share (:mod:`.shared_memo`)
        self.sharing: Optional["Sharing"] = None
        c = ecma.emit_set(ecma.ANY_RANGES)
        assert c is not None  # the set of every character is not empty
        self.canon_char: str = c
        # generic (non-canonical spellings allowed) character of a JSON string; no
        # surrogate escapes so that lengths count code points exactly
        self.str_char = '([^"\\\\\\x00-\\x1f]|\\\\(["\\\\/bfnrt]|u[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}))'

    # -- bookkeeping -------------------------------------------------------

    def tick(self) -> None:
        """Raise :func:`time_limit_error` once the time budget is spent."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise time_limit_error(self.opts.time_budget_s)

    def unsupported(self, keyword: str, ptr: str, reason: str = "") -> None:
        """Refuse a keyword, or record it when allow_unenforced."""
        if self.opts.allow_unenforced:
            tag = f"{ptr or '#'}/{keyword}" if not ptr.endswith("/" + keyword) else ptr
            if tag not in self.unenforced:
                self.unenforced.append(tag)
            return
        raise UnsupportedKeywordError(keyword, ptr or "#", reason)

    def refuse(self, keyword: str, ptr: str, reason: str = "") -> NoReturn:
        """Refuse a keyword even when allow_unenforced (it cannot even be approximated)."""
        raise UnsupportedKeywordError(keyword, ptr or "#", reason)

    def fresh_rule(self, text: str, kind: str) -> str:
        """Grammar mode: ``text`` as a rule of its own, named here alone (``kind`` says which part of
        the grammar made it), and the placeholder that stands for it."""
        n = len(self.rule_of)
        self.rule_of[(kind, n)] = n
        self.rule_bodies[n] = text
        return placeholder(n)

    def check_size(self, r: Optional[str]) -> Optional[str]:
        """r, or :class:`CompileLimitError` (kind ``"size"``) when it is over max_regex_chars."""
        if r is not None and len(r) > self.opts.max_regex_chars:
            raise CompileLimitError(f"regex grew past max_regex_chars={self.opts.max_regex_chars} characters", kind="size")
        return r

    # -- entry points the parts call on one another ------------------------------------------

    def negation_group(self, ctx: Ctx) -> Optional[Group]:
        """Combinators: ``not: ctx`` as an exact branch group where it is a disjunction on objects."""
        raise NotImplementedError

    def absorb(self, flat: Flat, ctx: Ctx, positive: bool = True, depth: int = 0) -> None:
        """Add the constraints of ctx (or of its negation) to flat (:mod:`.compiler`)."""
        raise NotImplementedError

    def compile(self, items: list[Conjunct]) -> Optional[str]:
        """The regex of the conjunction of (ctx, positive) pairs (:mod:`.compiler`)."""
        raise NotImplementedError

    def compile_ctx(self, ctxs: list[Ctx]) -> Optional[str]:
        """The regex of the conjunction of subschemas (:mod:`.compiler`)."""
        raise NotImplementedError

    def value_regex(self, v: Any) -> str:
        """The regex of one JSON value (:mod:`.emit_value`)."""
        raise NotImplementedError

    def any_value(self, depth: Optional[int] = None) -> str:
        """The regex of a free-form value (:mod:`.emit_value`)."""
        raise NotImplementedError

    def compile_string(self, flat: Flat) -> Optional[str]:
        """The regex of the strings of flat (:mod:`.emit_string`)."""
        raise NotImplementedError

    def content_excluding(self, words: list[str], lo: int, hi: Optional[int],
                          ranges: Optional[ecma.Ranges] = None) -> Optional[str]:
        """String content other than words (:mod:`.emit_string`)."""
        raise NotImplementedError

    def compile_array(self, flat: Flat) -> Optional[str]:
        """The regex of the arrays of flat (:mod:`.emit_array`)."""
        raise NotImplementedError

    def forbids(self, f: Flat, name: str) -> bool:
        """Whether f forbids a property called name (:mod:`.combinators`)."""
        raise NotImplementedError
