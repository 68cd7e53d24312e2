"""Emitter of objects: declared properties (required first-class, optional ones as a
comma-separated sequence), extra properties from ``additionalProperties``/``patternProperties``/
``propertyNames``, ``minProperties``/``maxProperties``, and the property order."""

from __future__ import annotations

import itertools
from typing import Any, Optional

from constrained_spec.errors import UnsupportedKeywordError
from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema.base import CompilerBase
from constrained_spec.grammar.json_schema.content_dfa import DfaTooLarge
from constrained_spec.grammar.json_schema.context import Ctx, NegCtx
from constrained_spec.grammar.json_schema.declared_names import check_unseen
from constrained_spec.grammar.json_schema.finite_names import named_extras
from constrained_spec.grammar.json_schema.ir import EMPTY, Flat, Owner
from constrained_spec.grammar.json_schema.key_languages import key_cells
from constrained_spec.grammar.json_schema.member_counts import counted_max, member_shapes
from constrained_spec.grammar.json_schema.negation import negation_keyword
from constrained_spec.grammar.json_schema.options import DECLARED_PROPERTIES_NOTE, LOCAL_OBJECT_CAP
from constrained_spec.grammar.json_schema.py_regex import line_pattern, py_search, universal_pattern
from constrained_spec.grammar.json_schema.regex_text import SeqItem, alt, group, rep, sequence

__all__ = ["ObjectEmitter", "canonical_key_orders", "KEY_RANGES", "Extra"]

#: characters of generated extra property names: printable ASCII without '"' and '\\'
#: (a restriction that keeps the name-exclusion regexes small)
KEY_RANGES = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E))

#: most member sequences :meth:`ObjectEmitter.count_shapes` writes for one object's property counts
MAX_SHAPES = 64

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
        check_unseen(flat, names, self.opts.additional_properties != "spec")
        extras = self.object_extras(flat, [it[2] for it in items] + sorted(flat.forbidden), names)
        counted = self.count_shapes(flat, items, extras, n_req)
        if counted is None:
            return EMPTY
        shapes, non_empty = counted
        ptr = flat.sources[0][0].ptr if flat.sources else ""
        if len(shapes) == 1:
            body = self._one_shape(list(shapes[0]), sep, ptr, non_empty)
        else:
            bodies = [self._shape_body(sh, sep) for sh in shapes]
            joined = alt([b for b in bodies if b])
            if joined is not None and "" in bodies:
                joined = group(joined) + "?"
            body = joined if joined is not None else ("" if "" in bodies else None)
            if body is not None:
                self.check_size(body)
        if body is None:
            return EMPTY
        return "\\{" + ws + body + ws + "\\}"

    def _shape_body(self, shape: list[SeqItem], sep: str) -> Optional[str]:
        """The members of one shape (:func:`~.member_counts.member_shapes`), in declared order or,
        where asked and small, in any order."""
        if not shape:
            return ""
        if self.opts.property_order == "any" and 1 < len(shape) <= self.opts.max_any_order_properties and all(
            it.kind in ("req", "opt") for it in shape
        ):
            return self.any_order(shape, sep)
        return sequence(shape, sep, self.check_size)

    def _one_shape(self, seq_items: list[SeqItem], sep: str, ptr: str, non_empty: bool) -> Optional[str]:
        """The members of an object with one shape; ``non_empty``: at least one of them (all optional)."""
        n_req = sum(1 for it in seq_items if it.kind == "req")
        n_decl = sum(1 for it in seq_items if it.kind != "star")
        if n_req == 0 and n_decl > 1:
            self.read_linear = True  # (the size-cap retries: this compile's steps depend on linear_objects)
        if self.opts.linear_objects and n_req == 0 and n_decl > 1:
            seq_items[0] = SeqItem("req", seq_items[0].regex)  # a sound restriction that keeps the regex linear
            self.length_narrowed.append((ptr or "#") + " (first property required)")
            n_req = 1
        if self.opts.property_order == "any" and len(seq_items) <= self.opts.max_any_order_properties and all(
            it.kind in ("req", "opt") for it in seq_items
        ) and len(seq_items) > 1:
            return self.any_order(seq_items, sep, non_empty and n_req == 0)
        all_optional = n_req == 0 and len(seq_items) > 1
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
            n_req = 1
        if body is not None and non_empty and n_req == 0:
            body = _without_empty(body)
        return body

    @staticmethod
    def _count_keyword(ptr: str, keyword: str) -> tuple[str, str]:
        """The keyword (and pointer) a refused count bound is named by: ``keyword`` where the schema
        wrote it (the pointer ends with it), else the ``not`` (or ``oneOf``) whose negation flipped
        the other bound into it (:func:`~.negation.plan_not`)."""
        if ptr.rsplit("/", 1)[-1] == keyword:
            return keyword, ptr
        return negation_keyword(ptr)

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
            return self.fresh_rule(text, "object-part")

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

    def count_shapes(self, flat: Flat, items: list[list[str]], extras: list[Extra],
                     n_req: int) -> Optional[tuple[list[list[SeqItem]], bool]]:
        """The member sequences under ``minProperties``/``maxProperties``, exactly: (shapes whose union
        they are (:func:`~.member_counts.member_shapes`), whether the one shape must be non-empty);
        None where no object has the counts. Refused by name (``minProperties``: two or more extra
        properties would have to differ in name, or more than the declared properties; past
        ``MAX_SHAPES``: the keyword that binds); recorded, the older sound part."""
        lo = max(0, flat.min_props - n_req)
        named = False
        if lo >= 2 and any(count != 1 for _, _, count in extras):
            # two or more counted beyond the required ones: rules of finitely many names as one
            # optional member per name (only here, so that other objects keep their regex)
            spelled = named_extras(extras)
            named, extras = spelled != extras, spelled
        ws = self.ws
        seq = [SeqItem("req" if kind == "req" else "opt", kv) for kind, kv, _ in items]
        # an extra rule of one literal name (count 1) is one more optional member
        seq += [SeqItem("opt" if count == 1 else "star", k + ws + ":" + ws + group(v), count) for k, v, count in extras]
        hi = None if flat.max_props is None else flat.max_props - n_req
        if hi is not None and hi < lo:
            return None
        most = counted_max(seq)
        binding_hi = hi is not None and (most is None or most > hi)
        if lo == 0 and not binding_hi:
            return [seq], False
        stars = any(it.kind == "star" for it in seq)
        n_opt = sum(1 for it in seq if it.kind == "opt")
        closed = any(o.ap is not None and o.ap.schema is False for o in flat.owners)
        if named and closed and not stars and lo > n_opt:
            return None  # the schema's names, all spelled out, are too few: no object has the counts
        if lo >= 2 and stars:
            self.unsupported(
                *self._count_keyword(flat.min_props_ptr, "minProperties"),
                "minProperties two or more above the required properties where extra properties from an "
                "infinite set of names may be among them (two such names would have to differ, and no regular "
                "language tells unbounded names apart; a repeated name counts once)",
            )
            return self._sound_part(flat, items, extras, n_req)
        if lo > n_opt + (1 if stars else 0):
            self.unsupported(
                *self._count_keyword(flat.min_props_ptr, "minProperties"),
                "minProperties larger than the properties generated; " + DECLARED_PROPERTIES_NOTE,
            )
            return self._sound_part(flat, items, extras, n_req)
        if lo == 1 and not binding_hi and all(it.kind != "req" for it in seq):
            return [seq], True
        shapes = member_shapes(seq, lo, hi, MAX_SHAPES)
        if shapes is None:
            kw, ptr = (self._count_keyword(flat.max_props_ptr, "maxProperties") if binding_hi
                       else self._count_keyword(flat.min_props_ptr, "minProperties"))
            self.unsupported(kw, ptr, f"the property counts need more than {MAX_SHAPES} member sequences")
            return self._sound_part(flat, items, extras, n_req)
        if not shapes:
            return None
        return shapes, False

    def _sound_part(self, flat: Flat, items: list[list[str]], extras: list[Extra],
                    n_req: int) -> Optional[tuple[list[list[SeqItem]], bool]]:
        """Where the counts are recorded as unenforced: the older sound part (optional properties made
        required in declared order for ``minProperties``; the ``maxProperties`` budget to the first
        optional properties, then to the first extra rule)."""
        items = [list(it) for it in items]
        n_opt = sum(1 for it in items if it[0] == "opt")
        if flat.max_props is not None:
            budget = flat.max_props - n_req
            if budget < 0:
                return None
            if n_opt > budget:
                kept = 0
                for it in items:
                    if it[0] == "opt":
                        if kept >= budget:
                            it[0] = "drop"
                        kept += 1
                items = [it for it in items if it[0] != "drop"]
                budget = 0
            else:
                budget -= n_opt
            extras = [(k, v, (min(c, budget) if c is not None else budget) if i == 0 else 0)
                      for i, (k, v, c) in enumerate(extras)]
            extras = [e for e in extras if e[2] != 0]
        need = flat.min_props - n_req
        for it in items:
            if need > 0 and it[0] == "opt":
                it[0] = "req"
                need -= 1
        ws = self.ws
        seq = [SeqItem("req" if it[0] == "req" else "opt", it[1]) for it in items]
        ex = [SeqItem("star", k + ws + ":" + ws + group(v), c) for k, v, c in extras]
        if need > 0 and ex:
            first = ex[0]  # at least one extra property, of the first rule
            more = None if first.count is None else first.count - 1
            return [seq + [SeqItem("req", first.regex)] + ([SeqItem("star", first.regex, more)] if more != 0 else [])
                    + ex[1:]], False
        return [seq + ex], False

    def any_order(self, seq_items: list[SeqItem], sep: str, non_empty: bool = False) -> Optional[str]:
        """The alternation of every order of the (required/optional) items (``non_empty``: at least
        one of them, where all are optional)."""
        outs: list[Optional[str]] = []
        for perm in itertools.permutations(seq_items):
            r = sequence(list(perm), sep, self.check_size)
            if r is not None:
                outs.append(_without_empty(r) if non_empty else r)
        return alt(outs)

    def object_extras(self, flat: Flat, declared: list[str], all_names: list[str]) -> list[Extra]:
        """Regexes (key, value, max_count) for properties beyond the declared ones: a name gets the
        schemas of exactly the patterns it matches, ``additionalProperties`` where it matches none
        (:func:`~.key_languages.key_cells`); refused by name (recorded: :meth:`_extras_sound_part`)
        where the cells pass a DFA bound or ``propertyNames`` sits beside the patterns."""
        owner = self._extras_owner(flat, all_names)
        if owner is None:
            return []
        if not owner.patterns:
            return self._extras_sound_part(flat, owner, declared, all_names)
        ptr = (owner.ptr or "") + "/patternProperties"
        if flat.property_names:
            self.unsupported("patternProperties", ptr, "patternProperties beside propertyNames (the names would need "
                             "the intersection of both)")
            return self._extras_sound_part(flat, owner, declared, all_names)
        names = sorted(set(declared) | set(all_names))
        ap_ctx = owner.ap
        if ap_ctx is None and self.opts.additional_properties == "spec":
            ap_ctx = Ctx(True, owner.ptr or "", None)  # no additionalProperties: any other name, any value
        ap_open = ap_ctx is not None and ap_ctx.schema is not False
        if len(owner.patterns) == 1 and not ap_open:
            # one pattern and no other names: its names as before, where no declared name matches it
            p, pc = owner.patterns[0]
            key: Optional[str] = None
            if universal_pattern(p) or line_pattern(p):
                key = self.content_excluding(names, 0, None, KEY_RANGES)
            elif not any(py_search(p, n) for n in names):
                try:
                    key = ecma.to_content_regex(p, self.canon_char)
                except ecma.PatternError as e:
                    self.refuse("patternProperties", ptr, str(e))
            else:
                key = "<cells>"
            if key != "<cells>":
                v = self.compile_ctx([pc])
                return [] if key is None or v is None else [('"' + key + '"', v, None)]
        try:
            cells = key_cells(tuple(p for p, _ in owner.patterns), tuple(names), KEY_RANGES if ap_open else None)
        except DfaTooLarge as e:
            self.unsupported("patternProperties", ptr, f"the names matching each set of patterns need a DFA past its bounds ({e})")
            return self._extras_sound_part(flat, owner, declared, all_names)
        except ecma.PatternError as e:
            self.refuse("patternProperties", ptr, str(e))
        out: list[Extra] = []
        for matched, body in cells:
            ctxs = [owner.patterns[i][1] for i in matched] if matched else [ap_ctx]
            v = self.compile_ctx([c for c in ctxs if c is not None])
            if v is not None:
                out.append(('"' + body + '"', v, None))
        return out

    def _extras_owner(self, flat: Flat, all_names: list[str]) -> Optional[Owner]:
        """The one owner of ``additionalProperties``/``patternProperties`` the extras follow (a free-form
        one where the schema declares nothing or asks for the schema's extras); None where none."""
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
                return None
        nontrivial = [o for o in owners if o.patterns or (o.ap is not None and o.ap.schema is not True)]
        if len(nontrivial) > 1:
            return None
        return nontrivial[0] if nontrivial else explicit[0]

    def _extras_sound_part(self, flat: Flat, owner: Owner, declared: list[str], all_names: list[str]) -> list[Extra]:
        """The extras of an owner without patterns (exact: ``additionalProperties`` alone, ``propertyNames``
        read as before), and the older sound part where the exact cells are refused and recorded: one rule
        per pattern and one for every other name, each value every pattern's schema together."""
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


def _without_empty(body: str) -> str:
    """The regex of an all-optional member sequence (``(...)?``, :func:`~.regex_text.sequence`) without
    its empty sequence."""
    if not body.endswith(")?"):
        raise ValueError("not an all-optional member sequence: " + body[-20:])
    return body[:-1]


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
