"""lark as the judge of a Lark grammar's language: load the grammar, parse every finished output.

The lazy engine enforces a Lark grammar token by token in llguidance's dialect; the Python ``lark``
package (Earley, dynamic lexer) is the reference: a grammar it cannot load is refused, and an output
it cannot parse is an error, never a returned value.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from constrained_spec.errors import GrammarError, OutputValidationError
from constrained_spec.lru import LRUCache

_PARSERS: LRUCache[str, Any] = LRUCache(64)
_LOCK = threading.Lock()


#: ``%import`` directives: only lark's built-in ``common`` library may be named (llguidance knows no
#: other), so a grammar never makes lark look for files on this machine
_IMPORT = re.compile(r"^\s*%import\s+(\.?[\w.]*)", re.MULTILINE)
_ALLOWED_IMPORTS = ("common",)


def check_imports(text: str) -> None:
    """:class:`GrammarError` for any ``%import`` of a module other than lark's ``common``."""
    for match in _IMPORT.finditer(text):
        module = match.group(1).split(".")[0] if not match.group(1).startswith(".") else match.group(1)
        if module not in _ALLOWED_IMPORTS:
            raise GrammarError(f"%import of {match.group(1)!r} is not allowed: grammars may import only from lark's "
                               f"built-in 'common' library (no grammar file is read)")


def check_lark_grammar(text: str) -> Any:
    """lark's Earley parser for ``text`` (cached); :class:`GrammarError` naming what lark refuses.

    Imports are checked first (:func:`check_imports`): only lark's ``common`` library."""
    check_imports(text)
    with _LOCK:
        hit = _PARSERS.get(text)
    if hit is not None:
        return hit
    from lark import Lark
    from lark.exceptions import LarkError

    try:
        parser = Lark(text, parser="earley", start="start")
    except LarkError as exc:
        raise GrammarError(f"lark cannot load the grammar: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from exc
    except Exception as exc:  # noqa: BLE001 - lark raises plain exceptions for some inputs (e.g. bad regexes)
        raise GrammarError(f"lark cannot load the grammar: {type(exc).__name__}: {exc}") from exc
    with _LOCK:
        _PARSERS.put(text, parser)
    return parser


def parse_with_lark(grammar: str, output: str) -> Any:
    """lark's parse tree of ``output``; :class:`OutputValidationError` if lark rejects it."""
    from lark.exceptions import LarkError

    parser = check_lark_grammar(grammar)
    try:
        return parser.parse(output)
    except LarkError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OutputValidationError(f"the output is not in the grammar's language (lark): {first}") from exc
