"""Random texts of compiled schemas' languages, judged by ``jsonschema``: a false-accept search that
needs no value generator (so it reaches recursive schemas, which hypothesis-jsonschema cannot draw).

For each schema it compiles the output (the Lark grammar where there is one, else the regex) for a
byte vocabulary with llguidance and walks it: at each step a random byte among those the matcher
allows (structural bytes and a small alphabet), stopping with some chance where the text is
complete. Every distinct complete text is parsed as JSON and validated; a text that is not JSON or
that the schema rejects is a false accept.

``python benchmarks/language_walks.py [--walks N] [--additional-properties spec] FILES...``
(JSONSchemaBench files, ``{"schema": ...}``) prints one line per schema and exits 1 where any
false accept was found.

``--instances`` walks each file's bundled tests instead (its own key order and the compiler's, as
``coverage.py`` serialises them) through the compiled output, byte by byte: ``coverage.py`` matches
the regex only, so a grammar (and a schema whose output is a grammar alone) gets no instance check
there. It prints the schemas where an invalid instance is accepted, or where the grammar refuses a
valid instance that the schema's regex (``regex`` package) accepts: a string the grammar lost (the
greedy-lexing check once let such grammars through). Valid instances both refuse are the regex's
documented choices, counted by ``coverage.py``. Exits 1 where either kind is found.
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import jsonschema

from constrained_spec.errors import ConstrainedSpecError
from constrained_spec.grammar.backends.llguidance import compile_grammar
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex
from constrained_spec.grammar.vocab import TokenVocabulary

BYTES = TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(256,), size=257)
#: the bytes a walk tries, in a random order each step: JSON structure and a small alphabet
ALPHABET = b'{}[],:"0123456789-.tfnruealsbcdghijkmopqvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ_/'
CLOSERS = b'"}]'


@dataclass
class WalkReport:
    """What the walks of one schema found."""

    name: str
    source: str  # "lark" or "regex"
    texts: int  # distinct complete texts
    valid: int
    false_accepts: list[bytes]
    unfinished: int  # walks that stopped at a dead end or the length cap
    matcher_errors: list[bytes]  # prefixes where the matcher allowed a byte and then refused it


class MatcherRefused(Exception):
    """The matcher allowed a byte (``accepts_prefix_bytes``) and then refused to advance on it."""

    def __init__(self, prefix: bytes) -> None:
        super().__init__(prefix)
        self.prefix = prefix


def walk(grammar: Any, rng: random.Random, cap: int) -> Optional[bytes]:
    """One random text of the grammar's language (None: the walk got stuck or passed ``cap``).
    Raises :class:`MatcherRefused` where the matcher contradicts itself."""
    m = grammar.matcher()
    out = bytearray()
    while len(out) < cap:
        if m.is_accepting() and rng.random() < 0.3:
            return bytes(out)
        cands = list(ALPHABET)
        rng.shuffle(cands)
        if len(out) > cap // 3:  # close strings and structures sooner as the text grows
            cands = list(CLOSERS) + cands
        nxt = next((c for c in cands if m.accepts_prefix_bytes(bytes([c]))), None)
        if nxt is None:
            return bytes(out) if m.is_accepting() else None
        try:
            m.advance(nxt)
        except ConstrainedSpecError as e:
            raise MatcherRefused(bytes(out) + bytes([nxt])) from e
        out.append(nxt)
    return bytes(out) if m.is_accepting() else None


def walk_schema(path: str, walks: int, options: SchemaOptions, seed: int = 1) -> WalkReport:
    """Walk one schema's compiled language ``walks`` times and judge every text."""
    schema = json.load(open(path))["schema"]
    compiled = schema_to_regex(schema, options)
    source = "lark" if compiled.lark is not None else "regex"
    grammar = compile_grammar(source, compiled.lark if compiled.lark is not None else compiled.regex, BYTES)
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
    rng = random.Random(seed)
    seen: set[bytes] = set()
    valid = unfinished = 0
    bad: list[bytes] = []
    errors: list[bytes] = []
    for _ in range(walks):
        try:
            text = walk(grammar, rng, rng.choice([60, 200, 600]))
        except MatcherRefused as e:
            errors.append(e.prefix)
            continue
        if text is None:
            unfinished += 1
            continue
        if text in seen:
            continue
        seen.add(text)
        try:
            ok = validator.is_valid(json.loads(text))
        except ValueError:
            ok = False
        if ok:
            valid += 1
        else:
            bad.append(text)
    return WalkReport(path.rsplit("/", 1)[-1], source, len(seen), valid, bad, unfinished, errors)


@dataclass
class InstanceReport:
    """What walking one schema's bundled tests through its compiled output found."""

    name: str
    source: str  # "lark" or "regex"
    valid_refused: int
    invalid_accepted: list[str]
    lost: list[str]  # valid texts the grammar refuses and the schema's regex accepts


def byte_accepts(grammar: Any, text: str) -> bool:
    """Whether the matcher takes ``text`` byte by byte and accepts at its end."""
    m = grammar.matcher()
    for b in text.encode("utf-8"):
        if not m.accepts_prefix_bytes(bytes([b])):
            return False
        m.advance(b)
    return bool(m.is_accepting())


def check_instances(path: str, options: SchemaOptions) -> InstanceReport:
    """Walk the file's bundled tests (both key orders) through its compiled output."""
    from grammar_bench import _load_coverage

    from constrained_spec.grammar.json_schema import canonical_key_orders

    cov = _load_coverage()
    case = json.load(open(path))
    schema = case["schema"]
    compiled = schema_to_regex(schema, options)
    source = "lark" if compiled.lark is not None else "regex"
    grammar = compile_grammar(source, compiled.lark if compiled.lark is not None else compiled.regex, BYTES)
    regex = cov._compile(compiled.regex) if compiled.lark is not None and compiled.regex else None
    order = canonical_key_orders(schema)
    refused = 0
    accepted: list[str] = []
    lost: list[str] = []
    for test in case.get("tests", []):
        data = test["data"]
        texts = [cov._dumps(data)] + ([cov._dumps(cov.reorder_keys(data, order))] if isinstance(data, (dict, list)) else [])
        texts = [t for t in dict.fromkeys(texts) if t is not None]
        if any(byte_accepts(grammar, t) for t in texts):
            if not test["valid"]:
                accepted.append(texts[-1])
            continue
        if test["valid"]:
            refused += 1
            if regex is not None and any(cov._fullmatch(regex, t, 5.0) for t in texts):
                lost.append(texts[-1])
    return InstanceReport(path.rsplit("/", 1)[-1], source, refused, accepted, lost)


def instances_main(files: list[str], options: SchemaOptions) -> int:
    """``--instances``: one line per schema where something is off, then the totals."""
    schemas = refused = 0
    accepted: list[str] = []
    lost: list[str] = []
    for pattern in files:
        for path in sorted(glob.glob(pattern)):
            try:
                r = check_instances(path, options)
            except ConstrainedSpecError:
                continue
            schemas += 1
            refused += r.valid_refused
            accepted += r.invalid_accepted
            lost += r.lost
            if r.invalid_accepted or r.lost:
                print(f"{r.name}: {r.source} invalid-accepted {len(r.invalid_accepted)} lost {len(r.lost)}")
                for t in (r.invalid_accepted + r.lost)[:2]:
                    print("  ", t[:200])
    print(f"schemas {schemas}: invalid accepted {len(accepted)}, valid refused {refused} "
          f"(by the grammar alone, its regex accepting them: {len(lost)})")
    return 1 if accepted or lost else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="JSONSchemaBench files or globs")
    ap.add_argument("--walks", type=int, default=400)
    ap.add_argument("--additional-properties", default="declared", choices=["declared", "spec"])
    ap.add_argument("--instances", action="store_true", help="walk the bundled tests instead of random texts")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    options = SchemaOptions(additional_properties=args.additional_properties)
    if args.instances:
        return instances_main(args.files, options)
    total_bad = 0
    for pattern in args.files:
        for path in sorted(glob.glob(pattern)):
            try:
                r = walk_schema(path, args.walks, options)
            except ConstrainedSpecError as e:
                print(f"{path.rsplit('/', 1)[-1]}: refused ({type(e).__name__})")
                continue
            total_bad += len(r.false_accepts)
            print(f"{r.name}: {r.source} texts {r.texts} valid {r.valid} false-accepts {len(r.false_accepts)} "
                  f"unfinished {r.unfinished} matcher-errors {len(r.matcher_errors)}")
            for t in r.false_accepts[:3]:
                print("  FALSE ACCEPT", t[:300])
            for t in r.matcher_errors[:1]:
                print("  MATCHER REFUSED its own byte after", t[-120:])
    print(f"false accepts: {total_bad}")
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
