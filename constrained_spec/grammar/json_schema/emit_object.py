"""Emitter of objects: declared properties (required first-class, optional ones as a
comma-separated sequence), extra properties from ``additionalProperties``/``patternProperties``/
``propertyNames``, ``minProperties``/``maxProperties``, and the property order."""

from __future__ import annotations

import itertools
from typing import Any, Optional

from constrained_spec.errors import UnsupportedKeywordError
from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema.base import CompilerBase
from constrained_spec.grammar.json_schema.context import Ctx, NegCtx
from constrained_spec.grammar.json_schema.emit_lark import placeholder
from constrained_spec.grammar.json_schema.ir import EMPTY, Flat, Owner
from constrained_spec.grammar.json_schema.options import DECLARED_PROPERTIES_NOTE, LOCAL_OBJECT_CAP
from constrained_spec.grammar.json_schema.py_regex import line_pattern, py_search, universal_pattern
from constrained_spec.grammar.json_schema.regex_text import SeqItem, alt, group, rep, sequence

__all__ = ["ObjectEmitter", "canonical_key_orders", "KEY_RANGES", "Extra"]

#: characters of generated extra property names: printable ASCII without '"' and '\\'
#: (a restriction that keeps the name-exclusion regexes small)
KEY_RANGES = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E))

#: a rule for properties beyond the declared ones: (key regex with its quotes, value regex, how
#: many such properties at most (None: any number))
Extra = tuple[str, str, Optional[int]]


class ObjectEmitter(CompilerBase):
    """Objects: declared and extra properties, property counts and order."""

    def compile_object(self, flat: Flat) -> Optional[str]:
        """The regex of the objects of flat."""
        ws = self.ws
        sep = ws + "," + ws
        members = self._members(flat)
        if members is None:
            return EMPTY
        items, n_req, names = members
        extras = self.object_extras(flat, [it[2] for it in items] + sorted(flat.forbidden), names)
        limited = self._count_limits(flat, items, extras, n_req)
        if limited is None:
            return EMPTY
        items, extras, plus_extra = limited
        ptr = flat.sources[0][0].ptr if flat.sources else ""
        if self.opts.linear_objects and n_req == 0 and len(items) > 1:
            items[0][0] = "req"  # a sound restriction that keeps the regex linear
            self.length_narrowed.append((ptr or "#") + " (first property required)")
        seq_items = [SeqItem("req" if it[0] == "req" else "opt", it[1]) for it in items]
        extra_items = [(k + ws + ":" + ws + group(v), count) for k, v, count in extras]
        if plus_extra:
            # at least one extra property: the first one present is of rule i (at least once), the
            # rules after it as before (each 0..count times)
            heads = [group(e) + rep("(" + sep + group(e) + ")", 0, None if count is None else count - 1)
                     for e, count in extra_items]
            if len(heads) == 1:
                seq_items.append(SeqItem("req", heads[0]))
            else:
                firsts = [sequence([SeqItem("req", h)] + [SeqItem("star", e2, c2) for e2, c2 in extra_items[i + 1:]],
                                   sep, self.check_size) for i, h in enumerate(heads)]
                joined = alt(firsts)
                if joined is None:
                    return EMPTY
                seq_items.append(SeqItem("req", group(joined)))
        else:
            seq_items += [SeqItem("star", e, count) for e, count in extra_items]
        if self.opts.property_order == "any" and len(seq_items) <= self.opts.max_any_order_properties and all(
            it.kind in ("req", "opt") for it in seq_items
        ) and len(seq_items) > 1:
            body = self.any_order(seq_items, sep)
        else:
            all_optional = n_req == 0 and len(items) > 1
            if all_optional and self.grammar_mode and self._large(seq_items, sep):
                body = self.optional_sequence_rules(seq_items, sep)
            else:
                body = sequence(seq_items, sep, self.check_size)
            if all_optional:
                self.reducible = True
            if body is not None and all_optional and len(body) > LOCAL_OBJECT_CAP and not self.grammar_mode:
                # all-optional objects cost O(n log n) copies; past a size, require the
                # first property (a sound restriction) so that the regex stays linear; the
                # grammar (optional_sequence_rules) holds the whole language
                seq_items[0] = SeqItem("req", seq_items[0].regex)
                body = sequence(seq_items, sep, self.check_size)
                self.length_narrowed.append((ptr or "#") + " (first property required)")
        if body is None:
            return EMPTY
        return "\\{" + ws + body + ws + "\\}"

    @staticmethod
    def _large(seq_items: list[SeqItem], sep: str) -> bool:
        """Whether the regex of an all-optional sequence would pass LOCAL_OBJECT_CAP."""
        body = sequence(seq_items, sep)
        return body is None or len(body) > LOCAL_OBJECT_CAP

    def optional_sequence_rules(self, seq_items: list[SeqItem], sep: str) -> str:
        """Grammar mode: an all-optional comma-separated sequence as rules, linear in its items:
        each item a rule P_i, each tail T_i = (sep P_i)? T_(i+1) a rule, and the body
        ``(P_1 T_2 | P_2 T_3 | ... | P_n)?`` (repeatable 'star' items likewise)."""

        def rule(text: str) -> str:
            n = len(self.rule_of)
            self.rule_of[("object-part", n)] = n
            self.rule_bodies[n] = text
            return placeholder(n)

        parts: list[tuple[str, str, str]] = []  # (rule, the item first, the item after another)
        for it in seq_items:
            if it.kind == "star":
                cnt = it.count
                p = rule(group(it.regex))
                parts.append((p, p + rep("(" + sep + p + ")", 0, None if cnt is None else cnt - 1),
                              rep("(" + sep + p + ")", 0, cnt)))
            else:
                p = rule(group(it.regex))
                parts.append((p, p, "(" + sep + p + ")?"))
        tails: list[str] = [""] * (len(parts) + 1)
        for i in range(len(parts) - 1, 0, -1):
            tails[i] = rule(parts[i][2] + tails[i + 1]) if i < len(parts) - 1 else parts[i][2]
        firsts = [parts[i][1] + tails[i + 1] for i in range(len(parts))]
        return "(" + "|".join(firsts) + ")?"

    def _members(self, flat: Flat) -> Optional[tuple[list[list[str]], int, list[str]]]:
        """The declared properties of flat as ([kind, "name":value regex, name] items, number
        required, all names); None when a required one can have no value."""
        ws = self.ws
        owners = flat.owners
        required = list(flat.required)
        names = list(flat.props)
        for r in required:
            if r not in flat.props:
                names.append(r)
        if flat.property_names:
            pn_ok = {n: all(self.doc.valid(c, n) for c in flat.property_names) for n in names}
        else:
            pn_ok = {n: True for n in names}
        items: list[list[str]] = []  # [kind ("req"/"opt"), regex, name]: the kind may change
        n_req = 0
        for name in names:
            self.tick()
            forbidden = name in flat.forbidden or not pn_ok[name] or self.forbids(flat, name)
            is_req = name in required
            if forbidden:
                if is_req:
                    return None
                continue
            ctxs = list(flat.props.get(name, []))
            v: Optional[str]
            for o in owners:
                matched = False
                for p, pc in o.patterns:
                    if py_search(p, name):
                        ctxs.append(pc)
                        matched = True
                if name not in o.names and not matched and o.ap is not None:
                    ctxs.append(o.ap)
            if not ctxs:
                v = self.any_value()
            else:
                v = self.compile([(c, not isinstance(c, NegCtx)) for c in ctxs])
            if v is None:
                if is_req:
                    return None
                continue
            kv = '"' + ecma.literal(name) + '"' + ws + ":" + ws + group(v)
            items.append(["req" if is_req else "opt", kv, name])
            n_req += is_req
        return items, n_req, names

    def _count_limits(self, flat: Flat, items: list[list[str]], extras: list[Extra],
                      n_req: int) -> Optional[tuple[list[list[str]], list[Extra], bool]]:
        """Apply ``minProperties``/``maxProperties`` to the items and extra-property rules:
        (items, extras, whether one extra property is required); None when impossible."""
        # minProperties / maxProperties
        n_opt = sum(1 for it in items if it[0] == "opt")
        if flat.max_props is not None:
            M = flat.max_props
            if n_req > M:
                return None
            budget = M - n_req
            if n_opt > budget:
                kept = 0
                for it in items:
                    if it[0] == "opt":
                        if kept >= budget:
                            it[0] = "drop"
                        kept += 1
                items = [it for it in items if it[0] != "drop"]
                extras = []
                budget = 0
            else:
                budget -= n_opt
            # the budget is shared: give it to the first extra rule only
            extras = [(k, v, (min(c, budget) if c is not None else budget) if i == 0 else 0) for i, (k, v, c) in enumerate(extras)]
            extras = [e for e in extras if e[2] != 0]
        if flat.min_props > n_req:
            need = flat.min_props - n_req
            for it in items:
                if need <= 0:
                    break
                if it[0] == "opt":
                    it[0] = "req"
                    need -= 1
            plus_extra = False
            if need == 1 and extras:
                plus_extra = True  # one extra property is enough (duplicates still count one)
                need = 0
            if need > 0:
                self.unsupported(
                    "minProperties", flat.min_props_ptr,
                    "minProperties larger than the declared properties (extra properties may repeat a name); "
                    + DECLARED_PROPERTIES_NOTE,
                )
        else:
            plus_extra = False
        return items, extras, plus_extra

    def any_order(self, seq_items: list[SeqItem], sep: str) -> Optional[str]:
        """The alternation of every order of the (required/optional) items."""
        outs: list[Optional[str]] = []
        for perm in itertools.permutations(seq_items):
            r = sequence(list(perm), sep, self.check_size)
            if r is not None:
                outs.append(r)
        return alt(outs)

    def object_extras(self, flat: Flat, declared: list[str], all_names: list[str]) -> list[Extra]:
        """Regexes (key, value, max_count) for properties beyond the declared ones."""
        owners = flat.owners
        explicit = [o for o in owners if o.patterns or o.ap is not None]
        if not explicit:
            # additionalProperties absent: the schema allows any extra property.  We only
            # generate extras for free-form objects (no declared properties) unless
            # additional_properties="spec"; not generating them is a sound restriction.
            if self.opts.additional_properties == "spec" or not all_names:
                owners = owners + [Owner(set(), [], Ctx(True, "", None), "")]
                explicit = owners[-1:]
            else:
                return []
        nontrivial = [o for o in owners if o.patterns or (o.ap is not None and o.ap.schema is not True)]
        if len(nontrivial) > 1:
            return []
        owner = nontrivial[0] if nontrivial else explicit[0]
        out: list[Extra] = []
        pn_ctxs = flat.property_names
        # value schema for a pattern key: all pattern schemas (conservative when several)
        all_pat_ctxs = [pc for _, pc in owner.patterns]
        declared_set = set(declared) | set(all_names)
        for p, _pc in owner.patterns:
            if pn_ctxs:
                continue  # would need an intersection
            if universal_pattern(p) or line_pattern(p):
                key = self.content_excluding(sorted(declared_set), 0, None, KEY_RANGES)
            elif any(py_search(p, n) for n in declared_set):
                continue  # would need a set difference
            else:
                try:
                    key = ecma.to_content_regex(p, self.canon_char)
                except ecma.PatternError:
                    continue
            if key is None:
                continue
            v = self.compile_ctx(all_pat_ctxs)
            if v is None:
                continue
            out.append(('"' + key + '"', v, None))
        if owner.ap is not None and owner.ap.schema is not False:
            ctxs = [owner.ap] + all_pat_ctxs
            if pn_ctxs:
                pf = Flat()
                for c in pn_ctxs:
                    self.absorb(pf, c)
                if pf.enum is not None and not pf.groups:
                    for n in pf.enum:
                        if isinstance(n, str) and n not in declared_set and self.doc.valid_all(pf.sources, n):
                            ok = not any(py_search(p, n) for p, _ in owner.patterns)
                            if ok:
                                v = self.compile_ctx([owner.ap])
                                if v is not None:
                                    out.append(('"' + ecma.literal(n) + '"', v, 1))
                    return out
                if any(all(self.doc.valid(c, n) for c in pn_ctxs) for n in declared_set):
                    return out
                try:
                    key = self.compile_ctx(pn_ctxs)
                except UnsupportedKeywordError:
                    return out
                if key is None or not key.startswith('"'):
                    return out
                # keep only the string alternative
                ks = self._string_only(pn_ctxs)
                if ks is None:
                    return out
                v = self.compile_ctx(ctxs)
                if v is not None:
                    out.append((ks, v, None))
                return out
            key = self.content_excluding(sorted(declared_set), 0, None, KEY_RANGES)
            if key is None:
                return out
            v = self.compile_ctx(ctxs)
            if v is not None:
                out.append(('"' + key + '"', v, None))
        return out

    def _string_only(self, ctxs: list[Ctx]) -> Optional[str]:
        """The string alternative of the conjunction of ctxs (None when it has branches or
        ``not``, or allows no string)."""
        f = Flat()
        for c in ctxs:
            self.absorb(f, c)
        if f.groups or f.nots:
            return None
        if f.types is not None and "string" not in f.types:
            return None
        return self.compile_string(f)


def canonical_key_orders(schema: Any) -> dict[str, int]:
    """Property name -> rank in the order the compiler emits properties (first declaration
    in the schema, depth first).  Used to re-order instance keys before matching."""
    order: dict[str, int] = {}
    seen: set[int] = set()

    def walk(s: Any, depth: int) -> None:
        if depth > 50 or not isinstance(s, (dict, list)) or id(s) in seen:
            return
        seen.add(id(s))
        if isinstance(s, list):
            for x in s:
                walk(x, depth + 1)
            return
        if "$ref" in s and isinstance(s["$ref"], str):
            pass
        props = s.get("properties")
        if isinstance(props, dict):
            for k in props:
                order.setdefault(k, len(order))
        req = s.get("required")
        for k, v in s.items():
            if k in ("properties",):
                if isinstance(v, dict):
                    for sub in v.values():
                        walk(sub, depth + 1)
            elif k in ("enum", "const", "examples", "default", "required"):
                continue
            else:
                walk(v, depth + 1)
        if isinstance(req, list):
            for k in req:
                if isinstance(k, str):
                    order.setdefault(k, len(order) + 100000)

    walk(schema, 0)
    return order
