"""Exact regexes for bounded integers and decimals written in JSON number syntax.

Everything here works on decimal digit strings (``decimal.Decimal``), never on binary
floats, so the regexes are exact for the decimal value of the JSON text.  The emitted
regexes use only ``[0-9]``-style classes, literal characters, groups, ``|`` and bounded
or unbounded repetition, so they read the same in Python ``re`` and Rust ``regex``.

Public helpers:

* :func:`integer_range` -- JSON integers ``-?(0|[1-9][0-9]*)`` in ``[lo, hi]``.
* :func:`decimal_range` -- JSON numbers without exponent, ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``
  in a range with inclusive/exclusive ends and an optional cap on the number of
  fraction digits.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Optional

__all__ = ["integer_range", "decimal_range", "nonneg_int_range", "int_bounds", "DIGITS"]

DIGITS = "[0-9]"


def _digit_class(lo: int, hi: int) -> str:
    if lo > hi:
        raise ValueError("empty digit class")
    if lo == hi:
        return str(lo)
    if lo == 0 and hi == 9:
        return DIGITS
    if hi == lo + 1:
        return f"[{lo}{hi}]"
    return f"[{lo}-{hi}]"


def _rep(n: int) -> str:
    if n == 0:
        return ""
    if n == 1:
        return DIGITS
    return DIGITS + "{" + str(n) + "}"


def _alt(parts: list[str]) -> str:
    parts = [p for p in parts]
    if len(parts) == 1:
        return parts[0]
    return "(" + "|".join(parts) + ")"


def _same_len(a: str, b: str) -> list[str]:
    """Alternatives matching the digit strings of length len(a) between a and b inclusive."""
    n = len(a)
    if n == 0:
        return [""]
    if a == b:
        return [a]
    if a[0] == b[0]:
        return [a[0] + _alt(_same_len(a[1:], b[1:]))]
    out: list[str] = []
    lo_d, hi_d = int(a[0]), int(b[0])
    rest = n - 1
    # low edge
    if a[1:] == "0" * rest:
        mid_lo = lo_d
    else:
        out.append(a[0] + _alt(_same_len(a[1:], "9" * rest)))
        mid_lo = lo_d + 1
    if b[1:] == "9" * rest:
        mid_hi = hi_d
        high = None
    else:
        mid_hi = hi_d - 1
        high = b[0] + _alt(_same_len("0" * rest, b[1:]))
    if mid_lo <= mid_hi:
        out.append(_digit_class(mid_lo, mid_hi) + _rep(rest))
    if high is not None:
        out.append(high)
    return out


def nonneg_int_range(lo: int, hi: Optional[int]) -> Optional[str]:
    """Regex for canonical non-negative integers in [lo, hi] (hi None = unbounded)."""
    lo = max(lo, 0)
    if hi is not None and hi < lo:
        return None
    parts: list[str] = []
    la = len(str(lo))
    lb = len(str(hi)) if hi is not None else la
    for length in range(la, lb + 1):
        start = lo if length == la else 10 ** (length - 1)
        end = hi if (hi is not None and length == lb) else 10**length - 1
        if start > end:
            continue
        parts.extend(_same_len(str(start).rjust(length, "0"), str(end)))
    if hi is None:
        parts.append("[1-9]" + DIGITS + "{" + str(la) + ",}")
    if not parts:
        return None
    return _alt(parts)


def integer_range(lo: Optional[int], hi: Optional[int]) -> Optional[str]:
    """Regex for JSON integers (no ``-0``, no leading zeros) in [lo, hi]; None = empty."""
    if lo is not None and hi is not None and lo > hi:
        return None
    if lo is None and hi is None:
        return "(0|-?[1-9][0-9]*)"
    parts: list[str] = []
    # non-negative part
    if hi is None or hi >= 0:
        pos = nonneg_int_range(max(lo, 0) if lo is not None else 0, hi)
        if pos is not None:
            parts.append(pos)
    # negative part: -y with y in [max(1, -hi), -lo]
    if lo is None or lo < 0:
        ylo = max(1, -hi) if hi is not None else 1
        yhi = -lo if lo is not None else None
        neg = nonneg_int_range(ylo, yhi)
        if neg is not None:
            parts.append("-" + neg)
    if not parts:
        return None
    return _alt(parts)


# ---------------------------------------------------------------------------
# decimals


def _split(d: Decimal) -> tuple[int, str]:
    """Non-negative decimal -> (integer part, fraction digits without trailing zeros)."""
    if d < 0:
        raise ValueError("negative")
    s = format(d, "f")
    if "." in s:
        ip, fp = s.split(".", 1)
    else:
        ip, fp = s, ""
    return int(ip), fp.rstrip("0")


def _any_frac(q: Optional[int]) -> str:
    if q is None:
        return "(\\.[0-9]+)?"
    if q <= 0:
        return ""
    return "(\\.[0-9]{1," + str(q) + "})?"


def _rest(n_max: Optional[int]) -> str:
    """Any digits, at most n_max of them (None = unbounded)."""
    if n_max is None:
        return "[0-9]*"
    if n_max <= 0:
        return ""
    if n_max == 1:
        return "[0-9]?"
    return "[0-9]{0," + str(n_max) + "}"


def _q1(q: Optional[int]) -> Optional[int]:
    return None if q is None else q - 1


def _frac(
    lo: str, ls: bool, hi: Optional[str], hs: bool, q: Optional[int]
) -> tuple[list[str], bool]:
    """Fraction digit strings f with 0.lo <=/< 0.f <=/< 0.hi.

    ``lo``/``hi`` carry no trailing zeros ('' is zero); ``hi`` None means no upper bound
    (every fraction is < 1).  Returns (alternatives for non-empty f, whether f may be empty).
    At most ``q`` digits when q is not None.
    """
    empty_ok = lo == "" and not ls and (hi is None or hi != "" or not hs)
    if q is not None and q <= 0:
        return [], empty_ok
    if lo == "" and hi == "":
        if ls or hs:
            return [], False
        return ["0+" if q is None else ("0" if q == 1 else "0{1," + str(q) + "}")], True
    if lo == "" and ls and hi is None:
        if q is None:
            return ["[0-9]*[1-9][0-9]*"], False
        return ["(" + "|".join(("0" * i) + "[1-9]" + _rest(q - i - 1) for i in range(q)) + ")"], False
    l0 = int(lo[0]) if lo else 0
    lrest = lo[1:] if lo else ""
    hrest: Optional[str]
    if hi is None:
        h0, hrest = 9, None
    elif hi == "":
        h0, hrest = 0, ""
    else:
        h0, hrest = int(hi[0]), hi[1:]
    alts: list[str] = []
    run_lo = None  # consecutive digits whose tail is unconstrained
    q1 = _q1(q)

    def flush(upto: int) -> None:
        nonlocal run_lo
        if run_lo is not None:
            alts.append(_digit_class(run_lo, upto) + _rest(q1))
            run_lo = None

    for c in range(l0, h0 + 1):
        sublo, subls = (lrest.rstrip("0"), ls) if c == l0 else ("", False)
        if hrest is not None and c == h0:  # hrest is None exactly where hi is
            subhi, subhs = hrest.rstrip("0"), hs
        else:
            subhi, subhs = None, False
        if sublo == "" and not subls and subhi is None:
            if run_lo is None:
                run_lo = c
            continue
        flush(c - 1)
        sub_alts, sub_empty = _frac(sublo, subls, subhi, subhs, q1)
        if not sub_alts and not sub_empty:
            continue
        if not sub_alts:
            alts.append(str(c))
        elif sub_empty:
            alts.append(str(c) + "(" + "|".join(sub_alts) + ")?")
        else:
            alts.append(str(c) + _alt(sub_alts))
    flush(h0)
    return alts, empty_ok


def _wrap_frac(alts: list[str], empty_ok: bool) -> Optional[str]:
    if not alts:
        return "" if empty_ok else None
    body = "\\." + _alt(alts)
    return "(" + body + ")?" if empty_ok else body


def _nonneg_decimal(
    a: Decimal, a_strict: bool, b: Optional[Decimal], b_strict: bool, q: Optional[int]
) -> Optional[str]:
    """Non-negative numbers x with a <= x <= b (strictness per end); a >= 0."""
    ai, da = _split(a)
    if b is not None:
        if b < a or (b == a and (a_strict or b_strict)):
            return None
        bi, db = _split(b)
        if ai == bi:
            fr = _wrap_frac(*_frac(da, a_strict, db, b_strict, q))
            return None if fr is None else str(ai) + fr
    parts: list[str] = []
    lowf = _wrap_frac(*_frac(da, a_strict, None, False, q))
    if lowf is not None:
        parts.append(str(ai) + lowf)
    if b is None:
        mid = nonneg_int_range(ai + 1, None)
    else:
        mid = nonneg_int_range(ai + 1, bi - 1) if bi - 1 >= ai + 1 else None
    if mid is not None:
        parts.append(mid + _any_frac(q))
    if b is not None:
        highf = _wrap_frac(*_frac("", False, db, b_strict, q))
        if highf is not None:
            parts.append(str(bi) + highf)
    if not parts:
        return None
    return _alt(parts)


def decimal_range(
    lo: Optional[Decimal],
    lo_strict: bool,
    hi: Optional[Decimal],
    hi_strict: bool,
    max_frac_digits: Optional[int] = None,
) -> Optional[str]:
    """Regex for JSON numbers without exponent whose decimal value lies in the range.

    ``max_frac_digits`` caps the number of digits after the point (None = unbounded).
    Returns None when the range holds no such number.
    """
    q = max_frac_digits
    parts: list[str] = []
    # non-negative part
    if hi is None or hi > 0 or (hi == 0 and not hi_strict):
        if lo is None or lo < 0:
            a, a_strict = Decimal(0), False
        else:
            a, a_strict = lo, lo_strict
        pos = _nonneg_decimal(a, a_strict, hi, hi_strict, q)
        if pos is not None:
            parts.append(pos)
    # negative part: -y, y > 0, y in [ -hi, -lo ]
    if lo is None or lo < 0:
        if hi is None or hi >= 0:
            ya, ya_strict = Decimal(0), True
        else:
            ya, ya_strict = -hi, hi_strict
        yb = -lo if lo is not None else None
        neg = _nonneg_decimal(ya, ya_strict, yb, lo_strict, q)
        if neg is not None:
            parts.append("-" + neg)
    if not parts:
        return None
    return _alt(parts)


def int_bounds(
    lo: Optional[Decimal], lo_strict: bool, hi: Optional[Decimal], hi_strict: bool
) -> tuple[Optional[int], Optional[int]]:
    """Integer interval equivalent to the decimal bounds."""
    ilo = ihi = None
    if lo is not None:
        c = lo.to_integral_value(rounding=ROUND_CEILING)
        ilo = int(c) + (1 if (lo_strict and c == lo) else 0)
    if hi is not None:
        f = hi.to_integral_value(rounding=ROUND_FLOOR)
        ihi = int(f) - (1 if (hi_strict and f == hi) else 0)
    return ilo, ihi
