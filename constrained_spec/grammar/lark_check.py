"""lark as the judge of a Lark grammar's language: load the grammar, parse every finished output.

The lazy engine enforces a Lark grammar token by token in llguidance's dialect; the Python ``lark``
package (Earley, dynamic lexer) is the reference: a grammar it cannot load is refused, and an output
it cannot parse is an error, never a returned value.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from lark import Token, Tree

from constrained_spec.errors import EmptyLanguageError, GrammarError, OutputValidationError
from constrained_spec.lru import LRUCache

try:  # lark splits a ``~`` repeat into sub-rules from this many repeats on
    from lark.load_grammar import REPEAT_BREAK_THRESHOLD as _REPEAT_SPLIT
except ImportError:  # another lark: its value in 1.3.1
    _REPEAT_SPLIT = 50

_PARSERS: LRUCache[str, Any] = LRUCache(64)
_LOCK = threading.Lock()


#: ``%import`` directives: only lark's built-in ``common`` library may be named (llguidance knows no
#: other), so a grammar never makes lark look for files on this machine
#: (whitespace other than a newline around ``%import``: ``\s*`` after ``^`` spans newlines, and a
#: grammar of blank lines made the scan quadratic, 11 s on 20,000 lines)
_IMPORT = re.compile(r"^[^\S\n]*%import[^\S\n]+(\.?[\w.]*)", re.MULTILINE)
_ALLOWED_IMPORTS = ("common",)


def check_imports(text: str) -> None:
    """:class:`GrammarError` for any ``%import`` of a module other than lark's ``common``."""
    for match in _IMPORT.finditer(text):
        module = match.group(1).split(".")[0] if not match.group(1).startswith(".") else match.group(1)
        if module not in _ALLOWED_IMPORTS:
            raise GrammarError(f"%import of {match.group(1)!r} is not allowed: grammars may import only from lark's "
                               f"built-in 'common' library (no grammar file is read)")


#: the most alternatives one rule may expand into when lark loads it. lark flattens a rule's inline
#: groups, optionals and ``~`` repeats into separate alternatives, so they multiply: ``("a"|"b")~1..40``
#: is 2^41 alternatives, and lark's loader would run for ever on it (lark 1.3.1; a named rule
#: repeated, ``item~1..40``, is 40). Real grammars stay far below: the project's and the shared
#: corpus's largest rule expands into a few hundred.
MAX_RULE_EXPANSIONS = 2_000


class _TooMany(Exception):
    """A group lark would expand into more than :data:`MAX_RULE_EXPANSIONS` alternatives."""


def _alternatives(node: Any) -> int:
    """How many alternatives lark's loader makes of ``node`` (a node of lark's own parse of a grammar),
    capped just above :data:`MAX_RULE_EXPANSIONS`; :class:`_TooMany` for a group under ``*`` or
    ``+`` (which lark makes a rule of its own) over the cap. One pass over the tree."""
    cap = MAX_RULE_EXPANSIONS + 1
    if not isinstance(node, Tree):
        return 1
    kind, children = node.data, node.children
    if kind == "expansions":
        return min(cap, sum(_alternatives(c) for c in children))
    if kind == "expansion":
        count = 1
        for child in children:
            count = min(cap, count * _alternatives(child))
        return count
    if kind == "maybe":
        return min(cap, _alternatives(children[0]) + 1)
    if kind == "expr" and len(children) >= 2 and isinstance(children[1], Token):
        inner, op = _alternatives(children[0]), str(children[1])
        if op == "?":
            return min(cap, inner + 1)
        if op == "~":
            low = int(str(children[2]))
            high = int(str(children[3])) if len(children) > 3 else low
            if high >= _REPEAT_SPLIT:  # split into sub-rules of at most about ten copies each
                return min(cap, inner ** min(high, 10))
            return min(cap, sum(min(cap, inner**k) for k in range(low, high + 1)))
        if inner >= cap:
            raise _TooMany
        return 2 if op == "*" else 1  # * and + make the group a rule of its own
    return max((_alternatives(c) for c in children), default=1)


def check_expansion_size(text: str) -> None:
    """:class:`GrammarError` naming a rule that lark would expand into more than
    :data:`MAX_RULE_EXPANSIONS` alternatives (see there), or nested too deeply to count. A grammar
    lark cannot parse passes here: loading it gives lark's own error."""
    try:
        from lark.load_grammar import _parse_grammar  # lark's parse of the grammar text, before expansion
    except ImportError:  # another lark: its loader stays the judge
        return
    try:
        tree = _parse_grammar(text, "<grammar>")
    except Exception:  # noqa: BLE001 - reported by the load that follows
        return
    for rule in tree.children:
        if getattr(rule, "data", None) != "rule":
            continue
        name = str(rule.children[1])
        try:
            too_many = _alternatives(rule.children[-1]) > MAX_RULE_EXPANSIONS
        except _TooMany:
            too_many = True
        except RecursionError:
            raise GrammarError(f"rule {name!r} nests its groups too deeply to load") from None
        if too_many:
            raise GrammarError(f"rule {name!r} would expand into more than {MAX_RULE_EXPANSIONS:,} alternatives when lark "
                               f"loads it (inline groups, optionals and ~ repeats multiply); move a repeated group "
                               f"into a rule of its own, e.g. item~1..40 with item: \"a\" | \"b\"")


def check_lark_grammar(text: str) -> Any:
    """lark's Earley parser for ``text`` (cached); :class:`GrammarError` naming what lark refuses.

    Imports are checked first (:func:`check_imports`): only lark's ``common`` library; then the size
    lark would expand the rules into (:func:`check_expansion_size`)."""
    check_imports(text)
    with _LOCK:
        hit = _PARSERS.get(text)
    if hit is not None:
        return hit
    check_expansion_size(text)
    from lark import Lark
    from lark.exceptions import LarkError

    try:
        parser = Lark(text, parser="earley", start="start", regex=True)  # the ``regex`` module: matches can time out
    except LarkError as exc:
        raise GrammarError(f"lark cannot load the grammar: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from exc
    except Exception as exc:  # noqa: BLE001 - lark raises plain exceptions for some inputs (e.g. bad regexes)
        raise GrammarError(f"lark cannot load the grammar: {type(exc).__name__}: {exc}") from exc
    check_productive(parser)
    _bound_terminals(parser)
    with _LOCK:
        _PARSERS.put(text, parser)
    return parser


def check_productive(parser: Any, start: str = "start") -> None:
    """:class:`EmptyLanguageError` when rule ``start`` derives no finite string (its language is
    empty: ``x: "a" x`` with no way out), found by the fixpoint of productive rules over lark's
    loaded grammar; terminals count as productive."""
    rules = getattr(parser, "rules", None)
    if not rules:
        return
    productive: set[str] = set()
    changed = True
    while changed:
        changed = False
        for rule in rules:
            name = str(rule.origin.name)
            if name not in productive and all(sym.is_term or str(sym.name) in productive for sym in rule.expansion):
                productive.add(name)
                changed = True
    if start not in productive:
        raise EmptyLanguageError(f"rule {start!r} derives no finite text: every alternative of the rules it uses "
                                 f"needs another rule that never ends (the grammar's language is empty)")


def _bound_terminals(parser: Any) -> None:
    """Make lark's Earley loop match each terminal within the parse's budget.

    A terminal is a request's regex, matched by a backtracking engine (``/(a+)+b/`` at a run of a's
    takes minutes): each match gets the time left until the deadline that the text carries
    (:class:`_TimedText`), and past it the parse stops. Where this lark keeps its matcher elsewhere,
    the parser is marked unbounded and :func:`parse_with_lark` does not run it under a budget.
    """
    front: Any = getattr(getattr(parser, "parser", None), "parser", None)
    regexps = getattr(getattr(getattr(front, "term_matcher", None), "__self__", None), "regexps", None)
    if front is None or not isinstance(regexps, dict):
        parser._cs_unbounded = True  # our own mark on the cached parser
        return

    def match(term: Any, text: str, index: int = 0) -> Any:
        deadline = getattr(text, "deadline", None)
        if deadline is None:
            return regexps[term.name].match(text, index)
        left = deadline - time.monotonic()
        if left <= 0:
            raise _OverBudget
        try:
            return regexps[term.name].match(text, index, timeout=left)
        except TimeoutError:
            raise _OverBudget from None

    front.term_matcher = match


#: the seconds lark's Earley parser may spend on one finished output: a base plus a rate per
#: character, i.e. linear in the output. Earley runs in about 0.3 ms a character on unambiguous
#: grammars but is cubic on an ambiguous one (``x: x x | "a"`` takes 6 s on 93 characters); past the
#: budget the parse is abandoned and the output stands on the engine's acceptance alone
#: (:func:`parse_with_lark`)
PARSE_BUDGET_BASE_S = 0.25
PARSE_BUDGET_PER_CHAR_S = 0.001


def parse_budget(output: str) -> float:
    """The seconds lark may spend parsing ``output`` (see :data:`PARSE_BUDGET_BASE_S`)."""
    return PARSE_BUDGET_BASE_S + PARSE_BUDGET_PER_CHAR_S * len(output)


class _OverBudget(Exception):
    pass


class _TimedText(str):
    """The output, read by lark's dynamic-lexer Earley loop one character per column: the loop asks
    for the next character here, and past the deadline is stopped."""

    deadline = 0.0

    def __iter__(self) -> Any:
        for ch in str.__iter__(self):
            if time.monotonic() > self.deadline:
                raise _OverBudget
            yield ch


def parse_with_lark(grammar: str, output: str, budget_s: float | None = -1.0) -> Any:
    """lark's parse tree of ``output``; :class:`OutputValidationError` if lark rejects it.

    ``None`` when lark's Earley parser needs more than ``budget_s`` seconds (default:
    :func:`parse_budget`; an ambiguous grammar, where Earley is cubic): the caller then keeps the
    output on the strength of the grammar engine that accepted it, token by token, in linear time.
    ``budget_s=None``: no bound.
    """
    from lark.exceptions import LarkError

    parser = check_lark_grammar(grammar)
    text: str = output
    if budget_s is not None and getattr(parser, "_cs_unbounded", False):
        return None  # this lark's terminal matches cannot be bounded: the engine's acceptance stands
    if budget_s is not None:
        timed = _TimedText(output)
        timed.deadline = time.monotonic() + (parse_budget(output) if budget_s < 0 else budget_s)
        text = timed
    try:
        return parser.parse(text)
    except _OverBudget:
        return None
    except LarkError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OutputValidationError(f"the output is not in the grammar's language (lark): {first}") from exc
