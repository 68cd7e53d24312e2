"""Schemas whose regex passes ``max_regex_chars``: the grammar holds them (large conjunctions as rules).

A Kubernetes-Deployment-like schema (shared ``$defs`` used in many places, written here) is refused
today at a 20,000-character cap (its regex copies every definition at every use). With hoisting the
Lark grammar names each large subschema once, so it compiles; ``regex`` is ``""`` and ``narrowed``
says only the grammar holds the language.

Oracles: ``json.loads`` + ``jsonschema`` (plus the compiler's documented restrictions, checked
independently here: compact canonical text, integers without a fraction, properties in declared
order). The matcher is walked byte by byte through the lazy engine (llguidance), as the Generator
compiles the schema. A negative control: the walk tells a looser schema's grammar from this one's.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re

import jsonschema
import pytest
from grammar_oracles import byte_walk as accepts

from constrained_spec.errors import CompileLimitError
from constrained_spec.grammar import output_spec
from constrained_spec.grammar.backends.llguidance import compile_grammar
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex
from constrained_spec.grammar.json_schema.options import NO_REGEX_NOTE
from constrained_spec.grammar.vocab import TokenVocabulary

#: a cap the schema below passes (its regex has about 32,000 characters): a small cap keeps the test fast
CAP = 20_000
OPTS = SchemaOptions(max_regex_chars=CAP)


def _s(**k) -> dict:
    return {"type": "string", **k}


def _i(**k) -> dict:
    return {"type": "integer", **k}


def _ref(name: str) -> dict:
    return {"$ref": "#/$defs/" + name}


def _arr(items: dict, **k) -> dict:
    return {"type": "array", "items": items, **k}


BOOL = {"type": "boolean"}
NAME = _s(pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", maxLength=63)
PORT = _i(minimum=1, maximum=65535)


def k8s_like_schema(require_first: bool = True) -> dict:
    """A Kubernetes-Deployment-like schema: every object closed, its first property required where
    it names none (``require_first``), so no retry of the compiler can shrink its regex."""

    def obj(props: dict, req: tuple = ()) -> dict:
        required = list(req) or ([next(iter(props))] if require_first else [])
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}

    handler = {"httpGet": obj({"path": _s(), "port": PORT, "scheme": {"enum": ["HTTP", "HTTPS"]}, "host": _s()}, ("port",)),
               "exec": obj({"command": _arr(_s())}), "tcpSocket": obj({"port": PORT, "host": _s()}, ("port",))}
    defs = {
        "Quantity": _s(pattern="^[0-9]+(\\.[0-9]+)?(m|Ki|Mi|Gi|k|M|G)?$"),
        "Labels": {"type": "object", "additionalProperties": _s(maxLength=20), "maxProperties": 4},
        "ObjectMeta": obj({"name": NAME, "namespace": NAME, "labels": _ref("Labels"), "annotations": _ref("Labels"),
                           "uid": _s(), "generation": _i(minimum=0)}),
        "KeyRef": obj({"name": NAME, "key": _s(), "optional": BOOL}, ("key",)),
        "EnvVar": obj({"name": _s(minLength=1), "value": _s(),
                       "valueFrom": obj({"configMapKeyRef": _ref("KeyRef"), "secretKeyRef": _ref("KeyRef")})}, ("name",)),
        "Port": obj({"name": NAME, "containerPort": PORT, "protocol": {"enum": ["TCP", "UDP", "SCTP"]}}, ("containerPort",)),
        "Resources": obj({"limits": obj({"cpu": _ref("Quantity"), "memory": _ref("Quantity")}),
                          "requests": obj({"cpu": _ref("Quantity"), "memory": _ref("Quantity")})}),
        "Handler": obj(handler),
        "Probe": obj({**handler, "initialDelaySeconds": _i(minimum=0), "periodSeconds": _i(minimum=1),
                      "failureThreshold": _i(minimum=1)}),
        "SecurityContext": obj({"capabilities": obj({"add": _arr(_s()), "drop": _arr(_s())}), "privileged": BOOL,
                                "runAsUser": _i(minimum=0), "runAsNonRoot": BOOL, "readOnlyRootFilesystem": BOOL,
                                "seLinuxOptions": obj({"user": _s(), "role": _s(), "type": _s(), "level": _s()})}),
        "VolumeMount": obj({"name": NAME, "mountPath": _s(), "readOnly": BOOL}, ("name", "mountPath")),
        "Container": obj({"name": NAME, "image": _s(), "command": _arr(_s()), "args": _arr(_s()),
                          "ports": _arr(_ref("Port")), "env": _arr(_ref("EnvVar")), "resources": _ref("Resources"),
                          "volumeMounts": _arr(_ref("VolumeMount")), "livenessProbe": _ref("Probe"),
                          "readinessProbe": _ref("Probe"), "imagePullPolicy": {"enum": ["Always", "Never", "IfNotPresent"]},
                          "securityContext": _ref("SecurityContext"),
                          "lifecycle": obj({"postStart": _ref("Handler"), "preStop": _ref("Handler")})}, ("name",)),
        "Volume": obj({"name": NAME, "emptyDir": obj({"medium": _s(), "sizeLimit": _ref("Quantity")}),
                       "configMap": obj({"name": NAME, "defaultMode": _i(minimum=0, maximum=511)}),
                       "hostPath": obj({"path": _s(), "type": _s()}, ("path",))}, ("name",)),
        "PodSpec": obj({"containers": _arr(_ref("Container"), minItems=1), "initContainers": _arr(_ref("Container")),
                        "volumes": _arr(_ref("Volume")), "restartPolicy": {"enum": ["Always", "OnFailure", "Never"]},
                        "nodeSelector": _ref("Labels"), "serviceAccountName": NAME, "hostNetwork": BOOL}, ("containers",)),
    }
    spec = obj({"replicas": _i(minimum=0), "selector": obj({"matchLabels": _ref("Labels")}),
                "template": obj({"metadata": _ref("ObjectMeta"), "spec": _ref("PodSpec")}, ("spec",)),
                "strategy": obj({"type": {"enum": ["Recreate", "RollingUpdate"]},
                                 "rollingUpdate": obj({"maxUnavailable": {"type": ["integer", "string"]},
                                                       "maxSurge": {"type": ["integer", "string"]}})})}, ("template",))
    return {"type": "object", "$defs": defs, "additionalProperties": False, "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {"apiVersion": {"const": "apps/v1"}, "kind": {"const": "Deployment"},
                           "metadata": _ref("ObjectMeta"), "spec": spec}}


SCHEMA = k8s_like_schema()


# -- a generator of valid values, written from the schema's keywords (not from the compiler) ------

STRINGS = ["", "a", "web-1", "nginx:1.25", "100m", "2Gi", "0.5", "/var/log", "x y", "é", 'q"t', "b\\s", "TCP"]


def _resolve(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def generate(rng: random.Random, schema: dict, root: dict, depth: int = 0):
    """A random value valid against ``schema`` (the keywords the schema above uses)."""
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    t = schema["type"]
    if isinstance(t, list):
        t = rng.choice(t)
    if t == "boolean":
        return rng.random() < 0.5
    if t == "integer":
        lo, hi = schema.get("minimum", -50), schema.get("maximum", 70000)
        return rng.choice([lo, hi, rng.randint(lo, hi)])
    if t == "string":
        ok = [s for s in STRINGS if len(s) >= schema.get("minLength", 0) and len(s) <= schema.get("maxLength", 99)
              and re.search(schema.get("pattern", ""), s)]
        return rng.choice(ok)
    if t == "array":
        n = rng.randint(schema.get("minItems", 0), 2 if depth < 9 else schema.get("minItems", 0))
        return [generate(rng, schema["items"], root, depth + 1) for _ in range(n)]
    props = schema.get("properties", {})
    if not props:  # Labels: free keys, string values
        return {f"k{j}": generate(rng, schema["additionalProperties"], root) for j in range(rng.randint(0, 3))}
    required = schema.get("required", [])
    p = 0.6 if depth < 9 else 0.15
    return {k: generate(rng, s, root, depth + 1) for k, s in props.items() if k in required or rng.random() < p}


# -- the oracle -----------------------------------------------------------------------------------


def dumps(v) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _in_order(v, schema: dict, root: dict) -> bool:
    """Declared properties in declared order, and no float (integers are written without a fraction)."""
    if isinstance(v, float):
        return False
    schema = _resolve(schema, root)
    if isinstance(v, dict):
        props = list(schema.get("properties", {}))
        idx = [props.index(k) for k in v if k in props]
        extra = schema.get("additionalProperties", {})
        return idx == sorted(idx) and all(
            _in_order(x, schema["properties"][k] if k in props else extra if isinstance(extra, dict) else {}, root)
            for k, x in v.items())
    if isinstance(v, list):
        return all(_in_order(x, schema.get("items", {}), root) for x in v)
    return True


def oracle(schema: dict, text: str) -> bool:
    try:
        v = json.loads(text)
    except ValueError:
        return False
    if dumps(v) != text or not jsonschema.Draft202012Validator(schema).is_valid(v):
        return False
    return _in_order(v, schema, schema)


def mutations(rng: random.Random, text: str, n: int) -> list[str]:
    alphabet = '{}[]":,0123456789-abnlutrfsevxo '
    out = []
    for _ in range(n):
        s = list(text)
        for _ in range(rng.randint(1, 2)):
            i = rng.randrange(len(s) + 1)
            op = rng.random()
            if op < 0.35 and i < len(s):
                del s[i]
            elif op < 0.7:
                s.insert(i, rng.choice(alphabet))
            elif i < len(s):
                s[i] = rng.choice(alphabet)
        out.append("".join(s))
    return out


# -- the matcher, walked byte by byte -----------------------------------------------------------


@pytest.fixture(scope="module")
def byte_vocab() -> TokenVocabulary:
    return TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(256,), size=257)


@pytest.fixture(scope="module")
def compiled():
    return schema_to_regex(SCHEMA, OPTS)


def test_the_regex_passes_the_cap():
    """The premise: no regex of this schema fits the cap (the compiler's retries cannot shrink it)."""
    from constrained_spec.grammar.json_schema.compiler import Compiler

    comp = Compiler(SCHEMA, OPTS)
    with pytest.raises(CompileLimitError) as info:
        comp.run()
    assert getattr(info.value, "kind", "") == "size" and not comp.reducible


def test_schema_over_the_cap_compiles_to_a_grammar(compiled):
    """It was refused (CompileLimitError, kind size); now the grammar holds it, and says there is no regex."""
    assert compiled.lark is not None
    assert compiled.regex == "" and compiled.narrowed == (NO_REGEX_NOTE,)
    assert len(compiled.lark) < CAP  # sizes add up: the grammar is smaller than the cap the regex passes
    spec = output_spec(SCHEMA, OPTS)
    assert spec.grammar == compiled.lark


@pytest.fixture(scope="module")
def compiled_optional():
    """The schema with its objects' properties optional where it names none required: its regex passes
    the cap too, even where the compiler's retries require each such object's first property (at the
    default cap those retries fit a regex of this shape, a narrowing: the grammar holds the whole
    language)."""
    return schema_to_regex(OPTIONAL_SCHEMA, OPTS)


OPTIONAL_SCHEMA = k8s_like_schema(require_first=False)


def test_all_optional_variant_compiles_to_a_grammar(compiled_optional):
    assert compiled_optional.lark is not None and compiled_optional.regex == ""


@pytest.mark.parametrize("which", ["required_first", "all_optional"])
def test_language_equals_jsonschema(which, request, byte_vocab):
    """Valid values and their mutations: the grammar accepts exactly what the oracle accepts."""
    schema, compiled = ((SCHEMA, request.getfixturevalue("compiled")) if which == "required_first"
                        else (OPTIONAL_SCHEMA, request.getfixturevalue("compiled_optional")))
    grammar = compile_grammar("lark", compiled.lark, byte_vocab)
    rng = random.Random(0)
    valid = [dumps(generate(rng, schema, schema)) for _ in range(25)]
    texts = list(dict.fromkeys(valid + [m for t in valid for m in mutations(rng, t, 6)]))
    counts = {True: 0, False: 0}
    for text in texts:
        want = oracle(schema, text)
        got = accepts(grammar, text)
        assert got == want, f"grammar {'accepts' if got else 'refuses'} {text[:300]!r}; oracle says {want}"
        counts[want] += 1
    assert all(oracle(schema, t) for t in valid)
    assert counts[True] >= 25 and counts[False] >= 50, counts
    assert max(len(t) for t in valid) > 2000, max(len(t) for t in valid)  # values deep in the schema, not just its required spine


def test_negative_control(compiled, byte_vocab):
    """The walk tells grammars apart: a looser schema's grammar (``replicas`` without its minimum)
    accepts a value this schema's grammar refuses, and the oracle sides with the exact one."""
    loose = json.loads(json.dumps(SCHEMA))
    del loose["properties"]["spec"]["properties"]["replicas"]["minimum"]
    loose_lark = schema_to_regex(loose, OPTS).lark
    assert loose_lark is not None
    text = dumps({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                  "spec": {"replicas": -1, "template": {"spec": {"containers": [{"name": "app"}]}}}})
    assert not oracle(SCHEMA, text) and oracle(loose, text)
    assert accepts(compile_grammar("lark", loose_lark, byte_vocab), text)
    assert not accepts(compile_grammar("lark", compiled.lark, byte_vocab), text)
    assert accepts(compile_grammar("lark", compiled.lark, byte_vocab), text.replace("-1", "1"))


def test_automaton_engine_refuses_a_grammar_only_schema(compiled):
    """The automaton engine runs regexes only: a schema with no regex is its CompileLimitError, not the
    empty regex's language."""
    from constrained_spec.grammar import OutputSpec
    from constrained_spec.grammar.backends.outlines_core import OutlinesCoreBackend

    spec = OutputSpec("json", compiled.regex, SCHEMA, grammar=compiled.lark)
    backend = OutlinesCoreBackend(TokenVocabulary({0: b"a"}, (1,), 2), fallback=None, disk_cache=False)  # type: ignore[arg-type]
    with pytest.raises(CompileLimitError, match="lazy engine"):
        backend.compile(spec)


def test_where_no_exact_grammar_can_be_built_the_refusal_stays(monkeypatch):
    """Greedy lexing that could lose strings (here: the check made to say so) means no grammar, and
    the schema is refused as before -- never a looser grammar."""
    import constrained_spec.grammar.json_schema.emit_lark as emit_lark

    monkeypatch.setattr(emit_lark, "greedy_safe_ids", lambda *args, **kwargs: False)
    with pytest.raises(CompileLimitError) as info:
        schema_to_regex(SCHEMA, OPTS)
    assert getattr(info.value, "kind", "") == "size"


def test_json_token_grammar_where_longer_terminals_fail(monkeypatch, byte_vocab):
    """Where the grammars of longer terminals fail the greedy-lexing check (here: made to fail), the
    last try cuts the terminals at JSON punctuation (``build_lark(split=True)``): it compiles, and its
    language is still exactly the oracle's (valid values and their mutations)."""
    import constrained_spec.grammar.json_schema.emit_lark as emit_lark

    real = emit_lark._build_lark
    calls: list[bool] = []

    def longer_terminals_fail(*args, split: bool = False, **kwargs):
        calls.append(split)
        return real(*args, split=split, **kwargs) if split else None

    monkeypatch.setattr(emit_lark, "_build_lark", longer_terminals_fail)
    compiled = schema_to_regex(SCHEMA, OPTS)
    assert compiled.lark is not None and compiled.regex == "" and True in calls
    assert '/\\{/' in compiled.lark and '/:/' in compiled.lark  # punctuation as terminals of their own
    grammar = compile_grammar("lark", compiled.lark, byte_vocab)
    rng = random.Random(1)
    valid = [dumps(generate(rng, SCHEMA, SCHEMA)) for _ in range(15)]
    texts = list(dict.fromkeys(valid + [m for t in valid for m in mutations(rng, t, 6)]))
    counts = {True: 0, False: 0}
    for text in texts:
        want = oracle(SCHEMA, text)
        assert accepts(grammar, text) == want, text[:300]
        counts[want] += 1
    assert counts[True] >= 15 and counts[False] >= 40, counts


def test_merged_rules_keep_the_language():
    """Rules the same up to the names of the rules they use are written once; rules that differ stay."""
    from constrained_spec.grammar.json_schema.emit_lark import _merged

    rules = {"r1": ("seq", [("T", "A"), ("rep", ("R", "r2"), 0, 1)]), "r2": ("seq", [("T", "A"), ("rep", ("R", "r1"), 0, 1)]),
             "r3": ("seq", [("T", "B"), ("rep", ("R", "r1"), 0, 1)])}
    root, kept = _merged(("alt", [("R", "r2"), ("R", "r3")]), rules)
    assert set(kept) == {"r1", "r3"} and root == ("alt", [("R", "r1"), ("R", "r3")])
    assert kept["r3"] == ("seq", [("T", "B"), ("rep", ("R", "r1"), 0, 1)])


NARROWING_OPTS = dataclasses.replace(OPTS, max_regex_chars=40_000)  # the retries' regex fits: a narrowed one


def test_narrowed_regex_comes_with_its_grammar():
    """At this cap the all-optional schema's retries fit a regex that requires each such object's
    first property (a narrowing, listed in ``narrowed``): the grammar holds the whole language."""
    compiled = schema_to_regex(OPTIONAL_SCHEMA, NARROWING_OPTS)
    assert compiled.regex and any("first property required" in n for n in compiled.narrowed)
    assert compiled.lark is not None


def test_narrowed_regex_without_a_grammar_is_refused_by_name(monkeypatch):
    """No grammar can be built (the greedy-lexing check made to fail): the narrowed regex alone is
    not returned as the schema's language (before 2026-12-05 it was, silently); it is refused with
    the pointers of the narrowing, or with ``allow_unenforced`` kept with them recorded."""
    import constrained_spec.grammar.json_schema.emit_lark as emit_lark

    monkeypatch.setattr(emit_lark, "greedy_safe_ids", lambda *args, **kwargs: False)
    with pytest.raises(CompileLimitError, match="first property required") as info:
        schema_to_regex(OPTIONAL_SCHEMA, NARROWING_OPTS)
    assert getattr(info.value, "kind", "") == "size"
    kept = schema_to_regex(OPTIONAL_SCHEMA, dataclasses.replace(NARROWING_OPTS, allow_unenforced=True))
    assert kept.lark is None and kept.regex
    assert any("first property required" in u for u in kept.unenforced)


def test_narrowed_regex_gets_json_token_grammar_where_longer_terminals_fail(monkeypatch, byte_vocab):
    """Where the grammars of longer terminals fail, the JSON-token terminals are tried for a narrowed
    regex too (before 2026-12-05 only where no regex fitted): the grammar compiles in llguidance and its
    language is the oracle's, including values the narrowed regex rejects (a first property missing)."""
    import constrained_spec.grammar.json_schema.emit_lark as emit_lark

    real = emit_lark._build_lark
    monkeypatch.setattr(emit_lark, "_build_lark",
                        lambda *a, split=False, **k: real(*a, split=split, **k) if split else None)
    compiled = schema_to_regex(OPTIONAL_SCHEMA, NARROWING_OPTS)
    assert compiled.lark is not None and '/:/' in compiled.lark
    grammar = compile_grammar("lark", compiled.lark, byte_vocab)
    rng = random.Random(3)
    valid = [dumps(generate(rng, OPTIONAL_SCHEMA, OPTIONAL_SCHEMA)) for _ in range(15)]
    texts = list(dict.fromkeys(valid + [m for t in valid for m in mutations(rng, t, 6)]))
    narrowed_out = 0
    for text in texts:
        want = oracle(OPTIONAL_SCHEMA, text)
        assert accepts(grammar, text) == want, text[:300]
        narrowed_out += want and re.fullmatch(compiled.regex, text) is None
    assert narrowed_out >= 1  # the grammar holds values the regex alone would have lost


def test_automaton_engine_refuses_a_narrowed_regex():
    """The automaton engine runs the regex: where it holds only part of the language (the grammar
    holds all of it), the spec is refused naming the narrowing and the lazy engine (before
    2026-12-05 the engine ran the narrowed regex without a word). Control: a schema whose regex is
    exact compiles on that engine."""
    from constrained_spec.grammar.backends.outlines_core import OutlinesCoreBackend

    spec = output_spec(OPTIONAL_SCHEMA, NARROWING_OPTS)
    assert spec.regex and spec.grammar is not None and spec.narrowed
    backend = OutlinesCoreBackend(TokenVocabulary({i: bytes([i]) for i in range(256)}, (256,), 257),
                                  fallback=None, disk_cache=False)  # type: ignore[arg-type]
    with pytest.raises(CompileLimitError, match="first property required.*lazy engine"):
        backend.compile(spec)
    exact = output_spec({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, OPTS)
    assert not exact.narrowed
    backend.compile(exact)
