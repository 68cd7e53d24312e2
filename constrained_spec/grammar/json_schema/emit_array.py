"""Emitter of arrays: positional items (``prefixItems``/``items``), ``minItems``/``maxItems``,
``contains`` (+ ``minContains``), and ``uniqueItems`` over finite item domains."""

from __future__ import annotations

from typing import Any, Optional

from constrained_spec.grammar.json_schema.base import CompilerBase
from constrained_spec.grammar.json_schema.context import Ctx
from constrained_spec.grammar.json_schema.ir import EMPTY, Flat
from constrained_spec.grammar.json_schema.negation import negation_keyword
from constrained_spec.grammar.json_schema.options import MAX_UNIQUE_DOMAIN, UNROLL_BUDGET
from constrained_spec.grammar.json_schema.regex_text import SeqItem, expanded_size, group, rep, sequence, strip_opt
from constrained_spec.grammar.json_schema.values import json_key, norm_numbers

__all__ = ["ArrayEmitter", "UNIQUE_SEQUENCE_CHARS"]

#: most characters the exact regex of ``uniqueItems`` over a finite domain (every order) may take;
#: past it the items keep one order (a sound part of the language)
UNIQUE_SEQUENCE_CHARS = 20_000


class ArrayEmitter(CompilerBase):
    """Arrays: items by position, counts, ``contains`` and ``uniqueItems``."""

    def _pos_ctxs(self, flat: Flat, i: int) -> list[Ctx]:
        """The subschemas of the item at position i."""
        out: list[Ctx] = []
        for pre, rest in flat.arr_owners:
            if i < len(pre):
                out.append(pre[i])
            elif rest is not None:
                out.append(rest)
        return out

    def _rest_ctxs(self, flat: Flat) -> list[Ctx]:
        """The subschemas of the items after every prefix."""
        return [rest for _, rest in flat.arr_owners if rest is not None]

    def compile_array(self, flat: Flat) -> Optional[str]:
        """The regex of the arrays of flat."""
        ws = self.ws
        sep = ws + "," + ws
        m = flat.min_items
        M = flat.max_items
        if M is not None and M < m:
            return EMPTY
        contains = [c for c in flat.contains if c[1] > 0]
        for _cctx, _mn, mx, ptr in flat.contains:
            if mx is not None:
                self.unsupported("maxContains", ptr.rsplit("/", 1)[0] + "/maxContains", "maxContains is not supported")
        n_contains = max([mn for _, mn, _, _ in contains], default=0)
        n_prefix = max([len(pre) for pre, _ in flat.arr_owners], default=0)
        exact_contains = n_prefix == 0 and M is None and m <= n_contains and not flat.unique
        for cctx, _mn, _mx, ptr in flat.contains:
            if id(cctx.schema) in self.negated_items and not exact_contains:
                kw, at = negation_keyword(ptr)  # a oneOf branch negated to keep the branches apart is the oneOf's
                self.unsupported(kw, at, "'not: {items: ...}' is enforced as an item anywhere in the array, not "
                                 "beside prefixItems, maxItems, uniqueItems or minItems above one")
        if flat.unique:
            return self.unique_array(flat, max(m, n_contains), M)
        rest_ctxs = self._rest_ctxs(flat)
        rest = self.compile_ctx(rest_ctxs) if rest_ctxs else self.any_value()
        if contains and n_prefix == 0 and M is None and m <= n_contains:
            # X* C (X* C){k-1} X*  -- the k matching items anywhere
            cre = self.compile_ctx(rest_ctxs + [c for c, _, _, _ in contains])
            if cre is None:
                return EMPTY
            c = group(cre)
            if rest is None:
                body = c + rep("(" + sep + c + ")", n_contains - 1, n_contains - 1)
            else:
                x = group(rest)
                body = rep("(" + x + sep + ")", 0, None) + c + rep(
                    "(" + rep("(" + sep + x + ")", 0, None) + sep + c + ")", n_contains - 1, n_contains - 1
                ) + rep("(" + sep + x + ")", 0, None)
            return "\\[" + ws + body + ws + "\\]"
        m = max(m, n_contains)
        if M is not None and M < m:
            return EMPTY
        positions = max(n_prefix, n_contains)
        elems: list[Optional[str]] = []
        for i in range(positions):
            if M is not None and i >= M:
                break
            ctxs = self._pos_ctxs(flat, i)
            if i < n_contains:
                ctxs += [c for c, _, _, _ in contains]
            elems.append(self.compile_ctx(ctxs) if ctxs else self.any_value())

        def tail(i: int) -> Optional[str]:
            if M is not None and i >= M:
                return ""
            if i < len(elems):
                elem = elems[i]
                if elem is None:
                    return "" if i >= m else None
                t = tail(i + 1)
                if t is None:
                    return "" if i >= m else None
                piece = (sep if i > 0 else "") + group(elem) + t
                return "(" + piece + ")?" if i >= m else piece
            # the rest
            need = max(0, m - i)
            most = None if M is None else M - i
            if rest is None:
                return "" if need == 0 else None
            if most == 0:
                return ""
            e = group(rest)
            if most is not None and most > need:
                # bounded repetition is unrolled by the DFA builder: cap the count of heavy
                # elements (lowering maxItems is a sound restriction)
                cost = expanded_size(e) + len(sep) + 1
                if cost * most > UNROLL_BUDGET:
                    most = max(need, UNROLL_BUDGET // cost, 1)
            if i == 0:
                inner_lo = max(0, need - 1)
                inner_hi = None if most is None else most - 1
                body = e + rep("(" + sep + e + ")", inner_lo, inner_hi) if (inner_hi is None or inner_hi > 0) else e
                return body if need >= 1 else "(" + body + ")?"
            return rep("(" + sep + e + ")", need, most)

        members = tail(0)
        if members is None:
            return EMPTY
        return "\\[" + ws + members + ws + "\\]"

    def distinct_sequences(self, items: list[str], m: int, M: Optional[int], sep: str) -> Optional[str]:
        """The members (between the brackets) of the arrays of m..M distinct items in any order, each
        item one of ``items`` (regexes of distinct values): arrays as sets, exact. A trie over the
        sequences (one branch per unused item), so its size grows with their number; None where it
        would pass :data:`UNIQUE_SEQUENCE_CHARS` (the caller keeps one order)."""
        budget = [UNIQUE_SEQUENCE_CHARS]

        def after(used: frozenset[int]) -> Optional[str]:
            n = len(used)
            alts = [""] if n >= m else []
            if M is None or n < M:
                for i, it in enumerate(items):
                    if i in used:
                        continue
                    rest = after(used | {i})
                    if rest is None:
                        return None
                    alts.append(sep + group(it) + rest)
                    budget[0] -= len(alts[-1])
                    if budget[0] < 0:
                        return None
            if alts == [""]:
                return ""
            body = "|".join(a for a in alts if a)
            return "(" + body + ")" + ("?" if "" in alts else "")

        firsts = []
        for i, it in enumerate(items):
            if M is not None and M < 1:
                break
            rest = after(frozenset({i}))
            if rest is None:
                return None
            firsts.append(group(it) + rest)
        if not firsts:
            return "" if m == 0 else None
        body = "(" + "|".join(firsts) + ")"
        return self.check_size(body + "?" if m == 0 else body)

    def unique_array(self, flat: Flat, m: int, M: Optional[int]) -> Optional[str]:
        """Arrays of m..M distinct items: exact for finite item domains (strictly ordered
        subsequences), otherwise uniqueItems is refused (or recorded) and dropped."""
        ws = self.ws
        sep = ws + "," + ws
        if M is not None and M <= 1:
            f2 = flat.copy()
            f2.unique = None
            return self.compile_array(f2)
        # finite item domain -> strictly ordered subsequences of the domain
        n_prefix = max([len(pre) for pre, _ in flat.arr_owners], default=0)
        rest_ctxs = self._rest_ctxs(flat)
        if n_prefix == 0 and rest_ctxs and not flat.contains:
            itf = Flat()
            for c in rest_ctxs:
                self.absorb(itf, c)
            values: Optional[list[Any]] = None
            if itf.enum is not None and not itf.groups:
                values = [v for v in itf.enum if self.doc.valid_all(itf.sources, v)]
            elif itf.types is not None and itf.types <= {"boolean", "null"} and not itf.groups:
                values = [v for v in ([True, False] if "boolean" in itf.types else []) + ([None] if "null" in itf.types else []) if self.doc.valid_all(itf.sources, v)]
            if values is not None and len(values) <= MAX_UNIQUE_DOMAIN:
                seen: set[str] = set()
                vals: list[Any] = []
                for v in values:
                    k = json_key(norm_numbers(v))
                    if k not in seen:
                        seen.add(k)
                        vals.append(v)
                if m > len(vals):
                    return EMPTY
                exact = self.distinct_sequences([self.value_regex(v) for v in vals], m, M, sep)
                if exact is not None:
                    return "\\[" + ws + exact + ws + "\\]"
                if m <= 1:
                    if M is not None and M < len(vals):
                        vals = vals[:M]
                    regs = [SeqItem("opt", self.value_regex(v)) for v in vals]
                    body = sequence(regs, sep, self.check_size)
                    if m == 1:
                        body = strip_opt(body)
                    return "\\[" + ws + body + ws + "\\]"
        self.unsupported("uniqueItems", flat.unique or "", "uniqueItems is only enforced for finite item types or maxItems <= 1")
        f2 = flat.copy()
        f2.unique = None
        return self.compile_array(f2)
