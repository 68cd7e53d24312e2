"""The nesting count of regex texts against llguidance's own parser (the oracle), and the
compiler's output kept within it: long excluded names written flat, deeper regexes routed."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Callable

import jsonschema
import pytest

from constrained_spec.errors import CompileLimitError, GrammarError
from constrained_spec.grammar.backends.llguidance import compile_grammar
from constrained_spec.grammar.json_schema import schema_to_regex
from constrained_spec.grammar.regex_nesting import REGEX_NEST_LIMIT, group_depth, nest_height, too_deep
from constrained_spec.grammar.vocab import TokenVocabulary

BYTES = TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(256,), size=257)
DEV2 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "jsonschemabench-dev2" / "data"


def llguidance_loads(pattern: str) -> bool:
    try:
        compile_grammar("regex", pattern, BYTES)
        return True
    except GrammarError:
        return False


def _wrapped(seed: int) -> str:
    """A pattern built by random wrappings until its count is near the limit (either side)."""
    rng = random.Random(seed)
    wraps: list[Callable[[str], str]] = [
        lambda p: "(" + p + ")", lambda p: "(" + p + ")*", lambda p: "(" + p + ")+?", lambda p: "(" + p + "){2,3}",
        lambda p: "(" + p + "|b)", lambda p: "(a|" + p + "|[x-z])?", lambda p: "a" + p, lambda p: p + "[0-9a]",
        lambda p: "(?:" + p + ")", lambda p: "(?:" + p + "c)*", lambda p: "\\." + p + "\\(", lambda p: "[(]" + p,
        lambda p: "(" + p + "[a\\]])", lambda p: "(" + p + ")d{4}",
    ]
    p = rng.choice(["a", "[a-z]", "\\.", "b*"])
    goal = REGEX_NEST_LIMIT - 8 + rng.randrange(16)
    while nest_height(p) < goal:
        p = rng.choice(wraps)(p)
    return p


def _families() -> list[str]:
    out = []
    for k in (82, 83, 84):  # each level a group, its sequence and a repetition: 3 levels
        p = "a"
        for _ in range(k):
            p = "(a" + p + ")*"
        out.append(p)
    for k in (250, 251):  # groups alone: 1 level each
        out.append("(" * k + "a" + ")" * k)
    return out


PATTERNS = _families() + [_wrapped(seed) for seed in range(40)]


def _disagreements(refused_by: Callable[[str], bool]) -> list[str]:
    return [p[:60] for p in PATTERNS if refused_by(p) != (not llguidance_loads(p))]


def test_nest_count_agrees_with_llguidance_at_the_limit() -> None:
    assert {too_deep(p) for p in PATTERNS} == {True, False}  # both sides of the limit are tried
    assert _disagreements(too_deep) == []


def test_negative_control_group_depth_alone_disagrees() -> None:
    """Counting groups only (what a bracket counter sees) misses repetitions and sequences: the
    same comparison rejects it."""
    assert _disagreements(lambda p: group_depth(p) > REGEX_NEST_LIMIT)


def test_count_reads_classes_escapes_and_lazy_quantifiers() -> None:
    assert nest_height("a") == 0
    assert nest_height("ab") == 1  # a sequence
    assert nest_height("[ab]") == 2 and nest_height("[a]") == 1 and nest_height("[a-z]") == 1
    assert nest_height("\\(\\)") == 1  # escaped parentheses are characters
    assert nest_height("[()]") == 2  # so are parentheses in a class
    assert nest_height("(a)*?") == nest_height("(a)*") == 2  # a lazy '?' is a flag
    assert nest_height("(a|b)") == 2 and nest_height("a{2,3}") == 1 and nest_height("a{x}") == 1


LONG = ["runIntrospectionScriptBeforeAccessTokenAsJwtCreationAndIncludeClaims" * 2,
        "keepClientAuthorizationAfterExpirationAndAlsoSomethingElseThatIsLong",
        "keepClientAuthorizationAfterExpirationAndAlsoSomethingElseThatIsLonger", "k", "ke"]


def _near(words: list[str], rng: random.Random) -> list[str]:
    out = list(words)
    for w in words:
        out += [w[:i] for i in range(len(w))] + [w + "x", w + "yy"]
        for _ in range(20):
            i = rng.randrange(len(w))
            out.append(w[:i] + rng.choice("aZ_0~") + w[i + 1:])  # (extra names are printable ASCII here)
    return out


def test_excluded_long_names_are_written_flat_and_exactly() -> None:
    """``not`` of long strings and extra property names beside long declared ones: the trie's runs
    are written flat (the regex nests well within the limit, and llguidance loads it), and the
    language is the schema's (``re.fullmatch`` against ``jsonschema``, near every word)."""
    rng = random.Random(5)
    strings = {"type": "string", "not": {"enum": LONG}}
    objects = {"type": "object", "properties": {w: {"type": "boolean"} for w in LONG},
               "additionalProperties": {"type": "integer"}}
    for schema, values in ((strings, _near(LONG, rng)),
                           (objects, [{k: v} for k in _near(LONG, rng) for v in (True, 1)])):
        regex = schema_to_regex(schema).regex
        assert nest_height(regex) < REGEX_NEST_LIMIT  # a 136-character name: about one level per character
        assert llguidance_loads(regex)
        checker = jsonschema.Draft202012Validator(schema)
        for v in values:
            text = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
            assert bool(re.fullmatch(regex, text)) == checker.is_valid(v), text


def test_a_pattern_nested_past_the_limit_is_refused_by_name() -> None:
    """A pattern llguidance cannot parse: refused at compile time (kind ``size``), not loaded
    as a grammar that fails at generation."""
    p = "a"
    for _ in range(90):
        p = "(b" + p + ")*"
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^" + p + "$"}}, "required": ["x"]}
    with pytest.raises(CompileLimitError, match="nests deeper") as info:
        schema_to_regex(schema)
    assert info.value.kind == "size"


@pytest.mark.skipif(not DEV2.is_dir(), reason="../shared/data/jsonschemabench-dev2 is absent")
def test_dev_schema_with_a_long_property_name_loads_in_llguidance() -> None:
    """Github_medium---o6290: a 68-character property name nested its key language 139 groups
    deep, past llguidance's parser (the schema compiled; generation failed)."""
    schema = json.loads((DEV2 / "Github_medium---o6290.json").read_text())["schema"]
    regex = schema_to_regex(schema).regex
    assert not too_deep(regex)
    assert llguidance_loads(regex)
