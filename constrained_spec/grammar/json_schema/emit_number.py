"""Emitter of numbers: ``minimum``/``maximum`` (inclusive or exclusive) and ``multipleOf`` as
decimal text ranges (:mod:`constrained_spec.grammar.numeric_ranges`)."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Optional

from constrained_spec.grammar.json_schema.base import CompilerBase
from constrained_spec.grammar.json_schema.ir import EMPTY, Flat
from constrained_spec.grammar.json_schema.options import MAX_ENUMERATED_MULTIPLES
from constrained_spec.grammar.json_schema.regex_text import alt, cat, group
from constrained_spec.grammar.json_schema.values import frac_digits, is_pow10
from constrained_spec.grammar.numeric_ranges import decimal_range, int_bounds, integer_range, nonneg_int_range

__all__ = ["NumberEmitter", "non_integers_between"]

#: the fraction of a number that is not an integer, spelled without an exponent (every such value
#: has that spelling: a narrowing of spellings, not of values)
_NON_ZERO_FRACTION = "\\.[0-9]*[1-9][0-9]*"


def non_integers_between(lo: Optional[Decimal], hi: Optional[Decimal]) -> Optional[tuple[Optional[str]]]:
    """The numbers that are not integers within integral bounds ``lo``/``hi`` (None: unbounded; a
    non-integer never equals one, so strictness does not matter), spelled without an exponent:
    ``n.F`` (a value in (n, n+1)) for n in [max(lo, 0), hi - 1], ``-n.F`` (in (-n-1, -n)) for n in
    [max(-hi, 0), -lo - 1]. A 1-tuple holding the regex (None: no such number); None where a bound
    is not an integer (not written here)."""
    if any(b is not None and b != b.to_integral_value() for b in (lo, hi)):
        return None
    ilo = None if lo is None else int(lo)
    ihi = None if hi is None else int(hi)
    parts: list[str] = []
    if ihi is None or ihi >= 1:
        pos = nonneg_int_range(max(ilo, 0) if ilo is not None else 0, None if ihi is None else ihi - 1)
        if pos is not None:
            parts.append(group(pos) + _NON_ZERO_FRACTION)
    if ilo is None or ilo <= -1:
        neg = nonneg_int_range(max(-ihi, 0) if ihi is not None else 0, None if ilo is None else -ilo - 1)
        if neg is not None:
            parts.append("-" + group(neg) + _NON_ZERO_FRACTION)
    return (alt(parts) if parts else None,)


class NumberEmitter(CompilerBase):
    """Integers and numbers within bounds, multiples of ``multipleOf``."""

    def compile_number(self, flat: Flat, integer: bool) -> Optional[str]:
        """The regex of the numbers (integers when integer) of flat."""
        lo, lo_s, hi, hi_s = flat.lo, flat.lo_strict, flat.hi, flat.hi_strict
        big = Decimal(10) ** 40
        if lo is not None and lo < -big:
            lo, lo_s = -big, False
        if hi is not None and hi > big:
            hi, hi_s = big, False
        mults = [m for m, _ in flat.multiple_of]
        if any(m <= 0 for m in mults):
            return EMPTY
        if flat.non_integer and not integer and mults and all(m == m.to_integral_value() for m in mults):
            return EMPTY  # multiples of an integer are integers, and 'not: {type: integer}' removes them
        if integer or (mults and all(m == m.to_integral_value() for m in mults)):
            # integers (a number that is a multiple of an integer is an integer)
            ilo, ihi = int_bounds(lo, lo_s, hi, hi_s)
            k = 1
            for m in mults:
                fr = Fraction(m)
                k = k * fr.numerator // math.gcd(k, fr.numerator)
            if k == 1:
                return integer_range(ilo, ihi)
            return self.int_multiples(k, ilo, ihi, flat.multiple_of[0][1])
        if flat.non_integer:
            if lo is None and hi is None and not mults:
                # the numbers that are not integers, each spelled without an exponent (every such
                # value has that spelling: a narrowing of spellings, not of values)
                return "-?(0|[1-9][0-9]*)\\.[0-9]*[1-9][0-9]*"
            between = None if mults else non_integers_between(lo, hi)
            if between is not None:  # integral bounds: the integer parts in range, each with a fraction
                return between[0]
            self.unsupported("not", flat.non_integer_ptr, "'not: {type: integer}' on bounded numbers or multiples is not supported")
        q: Optional[int] = None
        frac_set: Optional[set[str]] = None
        for m, ptr in flat.multiple_of:
            fr = Fraction(m)
            if fr.numerator == 1 and is_pow10(fr.denominator):
                qq = len(str(fr.denominator)) - 1
                q = qq if q is None else min(q, qq)
            elif fr.denominator > 1 and (1 / fr).denominator == 1 and (1 / fr).numerator <= 100:
                # m divides 1: fractions j*m, j < 1/m
                n = int(1 / fr)
                fs = {frac_digits(fr * j) for j in range(n)}
                frac_set = fs if frac_set is None else frac_set & fs
            else:
                self.unsupported("multipleOf", ptr, f"multipleOf {m} is only supported for integers and divisors of 1")
        if lo is None and hi is None and q is None and frac_set is None:
            return "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?"
        if frac_set is not None:
            return self.number_frac_set(lo, lo_s, hi, hi_s, frac_set, q)
        # exclusive bounds: keep enough headroom for binary floating point
        for b, strict in ((lo, lo_s), (hi, hi_s)):
            if strict and b is not None:
                digits = len(str(abs(int(b))))
                cap = max(1, 15 - digits)
                q = cap if q is None else min(q, cap)
        return decimal_range(lo, lo_s, hi, hi_s, q)

    def number_frac_set(
        self, lo: Optional[Decimal], lo_s: bool, hi: Optional[Decimal], hi_s: bool, fracs: set[str], q: Optional[int]
    ) -> Optional[str]:
        """Numbers whose fractional part is one of ``fracs`` (digit strings) in the range."""
        fr_alts = sorted(f for f in fracs if f != "")
        if q is not None:
            fr_alts = [f for f in fr_alts if len(f) <= q]
        frac_re = "(\\.(" + "|".join(fr_alts) + "))?" if fr_alts else ""
        if lo is None and hi is None:
            return "-?(0|[1-9][0-9]*)" + frac_re
        # integral bounds only
        if (lo is not None and lo != lo.to_integral_value()) or (hi is not None and hi != hi.to_integral_value()):
            self.unsupported("multipleOf", "", "multipleOf with fractional bounds")
            return EMPTY
        # x = I + f, f in fracs (value in [0,1))
        parts: list[Optional[str]] = []
        ilo = int(lo) if lo is not None else None
        ihi = int(hi) if hi is not None else None
        # non-negative numbers: I >= 0 ; negative: -(I + f)
        # build via integer ranges on the integer part, handling the ends exactly
        nonzero = "(\\.(" + "|".join(fr_alts) + "))" if fr_alts else None
        # interior: integer parts strictly inside the range -> any fraction
        # (we only emit non-negative integer parts with fractions; negative numbers
        #  with fractions are emitted as '-' + positive)
        # positive side
        pos_lo = 0 if ilo is None or ilo < 0 else ilo
        if ihi is None or ihi >= 0:
            # integer values
            a = pos_lo + (1 if (ilo is not None and ilo == pos_lo and lo_s) else 0)
            b = ihi - (1 if (ihi is not None and hi_s) else 0) if ihi is not None else None
            r = integer_range(a, b)
            if r is not None:
                parts.append(r)
            # values with a non-zero fraction: I in [pos_lo, ihi-1]
            if nonzero:
                r2 = integer_range(pos_lo, None if ihi is None else ihi - 1)
                if r2 is not None and (ihi is None or ihi - 1 >= pos_lo):
                    parts.append(cat(group(r2), nonzero))
        if ilo is None or ilo < 0:
            # negative values -y, y > 0, y <= -ilo (strict if lo_s), y >= -ihi if ihi < 0
            ya = 1 if (ihi is None or ihi >= 0) else -ihi + (1 if hi_s else 0)
            yb = None if ilo is None else -ilo - (1 if lo_s else 0)
            r = integer_range(ya, yb)
            if r is not None and ya >= 1:
                parts.append("-" + group(r))
            if nonzero:
                ya2 = 0 if (ihi is None or ihi >= 0) else -ihi
                yb2 = None if ilo is None else -ilo - 1
                r2 = integer_range(ya2, yb2)
                if r2 is not None and (yb2 is None or yb2 >= ya2):
                    parts.append("-" + cat(group(r2), nonzero))
        return alt(parts)

    def int_multiples(self, k: int, ilo: Optional[int], ihi: Optional[int], ptr: str) -> Optional[str]:
        """The integers in [ilo, ihi] (None: unbounded) that are multiples of k."""
        if ilo is not None and ihi is not None:
            if ilo > ihi:
                return EMPTY
            first = -(-ilo // k) * k
            count = 0 if first > ihi else (ihi - first) // k + 1
            if count <= MAX_ENUMERATED_MULTIPLES:
                vals = [str(first + i * k) for i in range(count)]
                return alt(vals) if vals else EMPTY
        # k = 2^a 5^b: the last t digits decide
        a = b = 0
        kk = k
        while kk % 2 == 0:
            kk //= 2
            a += 1
        while kk % 5 == 0:
            kk //= 5
            b += 1
        if kk == 1 and (ilo is None or ilo in (0, 1) or ilo < -(10**18)) and (ihi is None):
            t = max(a, b)
            ends = sorted({str(j * k % 10**t).rjust(t, "0") for j in range(10**t // math.gcd(k, 10**t) + 1)})
            # small numbers (fewer than t digits) that are multiples
            small = [str(j) for j in range(0, 10 ** (t - 1)) if j % k == 0] if t > 1 else ["0"]
            tail = "(" + "|".join(ends) + ")"
            pos_small = [s for s in small if s != "0"]
            body_pos = "[1-9][0-9]*" + tail if t >= 1 else "[1-9][0-9]*"
            pos = alt(pos_small + [body_pos, *([e.lstrip("0") for e in ends if e.lstrip("0") and len(e.lstrip("0")) == t and int(e) % k == 0])])
            assert pos is not None  # body_pos is one of the alternatives
            parts = []
            if ilo is None or ilo <= 0:
                parts.append("0")
            parts.append(pos)
            if ilo is None:
                parts.append("-" + pos)
            return alt(parts)
        self.unsupported("multipleOf", ptr, f"multipleOf {k} with this range is not supported")
        return integer_range(ilo, ihi)
