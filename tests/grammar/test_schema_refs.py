"""Schemas read no file and no URL: ``$ref`` retrieval is refused everywhere unless ``ref_allow`` lists it.

Oracles: a real HTTP server on 127.0.0.1 that counts the requests it gets (it must get none), a
secret string in a temp file that must appear in no result, error or output, and jsonschema's own
validators (Draft4Validator for draft-04 rules) on enumerated values against the compiled regex.
"""

from __future__ import annotations

import json
import re
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonschema
import pytest

from constrained_spec.errors import (
    OutputValidationError,
    RefRetrievalError,
    SchemaError,
)
from constrained_spec.grammar import OutputSpec
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex
from constrained_spec.grammar.schema_refs import (
    make_validator,
    normalize_draft,
    validation_errors,
)
from constrained_spec.tools import parse_tool_output, tool_call_schema

SECRET = "TOP-SECRET-7f3a9c1e"
INT_3_TO_7 = {"type": "integer", "minimum": 3, "maximum": 7}


class _Server:
    """An HTTP server on an ephemeral 127.0.0.1 port that serves INT_3_TO_7 and records each path."""

    def __init__(self) -> None:
        hits: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                body = json.dumps(INT_3_TO_7).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.hits = hits
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.close()


def _ints(regex: str, schema: dict, cls=jsonschema.Draft202012Validator, lo: int = -15, hi: int = 20) -> None:
    """The regex accepts exactly the integers in [lo, hi) that ``cls`` says are valid."""
    validator = cls(schema)
    for i in range(lo, hi):
        assert (re.fullmatch(regex, json.dumps(i)) is not None) == validator.is_valid(i), i


# -- the counter works, and jsonschema's default would fetch ------------------------------------


def test_the_hit_counter_sees_jsonschemas_default_retrieval(server):
    """Control: jsonschema's default registry fetches the URL (so zero hits below means something)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert jsonschema.Draft202012Validator({"$ref": server.base + "/int.json"}).is_valid(5)
    assert server.hits == ["/int.json"]


# -- no retrieval by default ---------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda b: {"$ref": b + "/int.json"},
    lambda b: {"type": "object", "properties": {"a": {"$ref": b + "/int.json#/minimum"}}},
    lambda b: {"$id": b + "/root.json", "type": "object", "properties": {"a": {"$ref": "other.json"}}},
    lambda b: {"allOf": [{"$ref": b + "/int.json"}], "unevaluatedProperties": False},
    lambda b: {"$schema": "http://json-schema.org/draft-04/schema#", "$ref": b + "/int.json"},
])
def test_compilation_fetches_nothing(server, make):
    schema = make(server.base)
    with pytest.raises(SchemaError) as ei:
        schema_to_regex(schema)
    assert isinstance(ei.value, RefRetrievalError)
    assert server.base in str(ei.value)  # names the reference
    assert server.hits == []


def test_output_validation_fetches_nothing(server):
    """The API's final check (CompiledConstraint.parse) and the validator factory retrieve nothing."""
    from constrained_spec.api import CompiledConstraint

    schema = {"type": "object", "properties": {"a": {"$ref": server.base + "/int.json"}}}
    with pytest.raises(RefRetrievalError, match=re.escape(server.base + "/int.json")):
        validation_errors(schema, {"a": 5})
    spec = OutputSpec("json", "", schema)
    with pytest.raises(SchemaError, match=re.escape(server.base)):
        CompiledConstraint(spec, None).parse('{"a": 5}')
    with pytest.raises(Exception):  # noqa: B017 - jsonschema's own error type for an unresolvable $ref
        make_validator(schema).is_valid({"a": 5})
    assert server.hits == []


def test_tool_argument_checks_fetch_nothing(server):
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"$ref": server.base + "/int.json"}}, "required": ["x"]}}}
    with pytest.raises(SchemaError, match=re.escape(server.base)):
        parse_tool_output({"name": "f", "arguments": {"x": 5}}, [tool])
    with pytest.raises(SchemaError, match=re.escape(server.base)):
        schema_to_regex(tool_call_schema([tool], "required"))
    assert server.hits == []


def test_the_server_refuses_a_remote_ref_with_a_400_and_no_hit(server):
    """A request cannot turn retrieval on: the server compiles with the default (empty) ref_allow."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from constrained_spec.api import Generator
    from constrained_spec.serving.app import ServerConfig, create_app

    class NoModelGenerator(Generator):
        def __init__(self) -> None:  # compile() only: the request is refused before any decoding
            from constrained_spec.config import GeneratorConfig

            self.config = GeneratorConfig()  # its schema_options: the defaults (no ref_allow)

        def compile(self, output_type, schema_draft=None):
            from constrained_spec.grammar import output_spec

            return output_spec(output_type, self.schema_options)

    schema = {"type": "object", "properties": {"a": {"$ref": server.base + "/int.json"}}}
    with TestClient(create_app(NoModelGenerator(), ServerConfig(model_name="m"))) as client:
        r = client.post("/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert r.status_code == 400, r.text
    assert server.base in r.json()["error"]["message"]
    assert server.hits == []


# -- files ----------------------------------------------------------------------------------------


def _secret_file(folder: Path) -> Path:
    path = folder / "secret.json"
    path.write_text(json.dumps({"enum": [SECRET]}))
    return path


def test_a_file_ref_is_refused_and_the_secret_leaks_nowhere(tmp_path, capsys):
    secret = _secret_file(tmp_path)
    schemas = [
        {"$ref": secret.as_uri()},
        {"type": "object", "properties": {"a": {"$ref": secret.as_uri()}}},
        {"$id": (tmp_path / "root.json").as_uri(), "$ref": "secret.json"},
        {"$ref": str(secret)},
    ]
    for schema in schemas:
        with pytest.raises(SchemaError) as ei:
            schema_to_regex(schema)
        assert SECRET not in str(ei.value) and SECRET not in repr(ei.value)
        with pytest.raises(SchemaError) as ei:
            validation_errors(schema, {"a": "x"})  # a value that reaches every $ref above
        assert SECRET not in str(ei.value)
        with pytest.raises(SchemaError) as ei:
            parse_tool_output({"name": "f", "arguments": {"a": {"a": "x"}}},
                              [{"name": "f", "parameters": {"type": "object", "properties": {"a": schema}}}])
        assert SECRET not in str(ei.value)
    out = capsys.readouterr()
    assert SECRET not in out.out and SECRET not in out.err


# -- the allow-list -------------------------------------------------------------------------------


def test_allowed_folder_is_read(tmp_path):
    folder = tmp_path / "schemas"
    folder.mkdir()
    (folder / "int.json").write_text(json.dumps(INT_3_TO_7))
    (folder / "sub").mkdir()
    (folder / "sub" / "wrap.json").write_text(json.dumps({"$ref": "../int.json"}))  # stays inside: ok
    opts = SchemaOptions(ref_allow=(str(folder),))
    for ref in [(folder / "int.json").as_uri(), "int.json"]:
        compiled = schema_to_regex({"$ref": ref}, opts)
        _ints(compiled.regex, INT_3_TO_7)  # the oracle: the referenced schema itself
        assert [e.message for e in validation_errors({"$ref": ref}, 9, opts)]
        assert validation_errors({"$ref": ref}, 4, opts) == []
    # a file URI of the folder is a folder entry too
    compiled = schema_to_regex({"$ref": (folder / "int.json").as_uri()}, SchemaOptions(ref_allow=(folder.as_uri(),)))
    _ints(compiled.regex, INT_3_TO_7)
    # the options of an API value's final check carry the allow-list
    from constrained_spec.api import CompiledConstraint

    spec = OutputSpec("json", "", {"$ref": "int.json"}, schema_options=opts)
    assert CompiledConstraint(spec, None).parse("5") == 5
    with pytest.raises(OutputValidationError):
        CompiledConstraint(spec, None).parse("8")


def test_allowed_folder_refuses_escapes(tmp_path):
    _secret_file(tmp_path)
    folder = tmp_path / "allowed"
    folder.mkdir()
    (folder / "link.json").symlink_to(tmp_path / "secret.json")
    opts = SchemaOptions(ref_allow=(str(folder),))
    refs = [
        "../secret.json",
        (folder / "x").as_uri().replace("/x", "/../secret.json"),
        (tmp_path / "secret.json").as_uri(),
        "link.json",  # a symlink out of the folder
        str(folder),  # the folder itself is no file
    ]
    for ref in refs:
        with pytest.raises(RefRetrievalError) as ei:
            schema_to_regex({"$ref": ref}, opts)
        assert SECRET not in str(ei.value), ref


def test_allowed_url_prefix(server):
    opts = SchemaOptions(ref_allow=(server.base + "/allowed/",))
    compiled = schema_to_regex({"$ref": server.base + "/allowed/int.json"}, opts)
    _ints(compiled.regex, INT_3_TO_7)
    assert server.hits == ["/allowed/int.json"]
    for ref in [server.base + "/other/int.json", server.base + "/allowed/../other/int.json",
                server.base + "/allowedX/int.json", server.base.replace("127.0.0.1", "localhost") + "/allowed/int.json"]:
        with pytest.raises(RefRetrievalError):
            schema_to_regex({"$ref": ref}, opts)
    assert server.hits == ["/allowed/int.json"]


def test_options_validate_their_fields():
    with pytest.raises(ValueError):
        SchemaOptions(ref_allow="/tmp")
    with pytest.raises(ValueError):
        SchemaOptions(draft="5")
    assert SchemaOptions(draft="draft-07").draft == "7" and normalize_draft("2020") == "2020-12"


# -- $id ------------------------------------------------------------------------------------------


def test_an_id_that_is_no_base_uri_raises():
    schema = {"$id": "http://[bad", "type": "object", "properties": {"a": {"$ref": "#/$defs/x"}},
              "$defs": {"x": {"type": "integer"}}}
    with pytest.raises(SchemaError, match=r"\$id"):
        schema_to_regex(schema)


def test_ref_sibling_id_is_ignored_before_2019_09():
    """Draft 7: ``$ref`` ignores its sibling ``$id`` (the test suite's ref#6, once a false accept)."""
    schema = {
        "$id": "http://localhost:1234/draft7/ref-and-id1/base.json",
        "$ref": "int.json",
        "definitions": {
            "bigint": {"$id": "int.json", "maximum": 10},
            "smallint": {"$id": "/draft7/ref-and-id1-int.json", "maximum": 2},
        },
    }
    compiled = schema_to_regex(schema, SchemaOptions(draft="7"))
    _ints(compiled.regex, schema, jsonschema.Draft7Validator)


# -- drafts ---------------------------------------------------------------------------------------

DRAFT4_INT = {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 10, "exclusiveMaximum": True}
DRAFT4_NUM = {"type": "number", "minimum": -1.5, "maximum": 2.5, "exclusiveMaximum": True}


@pytest.mark.parametrize("how", ["option", "$schema"])
def test_draft4_boolean_exclusive_bounds(how):
    schema_i, schema_n = dict(DRAFT4_INT), dict(DRAFT4_NUM)
    opts = SchemaOptions(draft="4") if how == "option" else SchemaOptions()
    if how == "$schema":
        for s in (schema_i, schema_n):
            s["$schema"] = "http://json-schema.org/draft-04/schema#"
    _ints(schema_to_regex(schema_i, opts).regex, DRAFT4_INT, jsonschema.Draft4Validator)
    regex = schema_to_regex(schema_n, opts).regex
    oracle = jsonschema.Draft4Validator(DRAFT4_NUM)
    for k in range(-40, 40):
        for v in (k / 10, k / 4):
            assert (re.fullmatch(regex, json.dumps(v)) is not None) == oracle.is_valid(v), v
    assert oracle.is_valid(2.4) and not oracle.is_valid(2.5)  # the oracle reads draft-04 rules


def test_a_schema_draft_wins_over_the_option():
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "integer",
              "maximum": 5, "exclusiveMaximum": 3}
    _ints(schema_to_regex(schema, SchemaOptions(draft="4")).regex, schema)


def test_without_a_draft_a_draft4_schema_is_read_as_2020_12():
    with pytest.raises(SchemaError):  # exclusiveMaximum must be a number in 2020-12
        schema_to_regex(DRAFT4_INT)


def test_draft7_items_array_and_definitions():
    schema = {"type": "array", "items": [{"type": "integer"}, {"type": "boolean"}], "additionalItems": False,
              "definitions": {"x": {"type": "null"}}}
    regex = schema_to_regex(schema, SchemaOptions(draft="7")).regex
    oracle = jsonschema.Draft7Validator(schema)
    for v in ([], [1], [1, True], [True], [1, True, None], [1, 2], ["a"], [0, False]):
        assert (re.fullmatch(regex, json.dumps(v, separators=(",", ":"))) is not None) == oracle.is_valid(v), v


def test_output_validation_follows_the_draft():
    from constrained_spec.api import CompiledConstraint

    opts = SchemaOptions(draft="4")
    spec = OutputSpec("json", schema_to_regex(DRAFT4_INT, opts).regex, DRAFT4_INT, schema_options=opts)
    assert CompiledConstraint(spec, None).parse("9") == 9
    with pytest.raises(OutputValidationError):
        CompiledConstraint(spec, None).parse("10")


def test_cli_has_schema_draft():
    from constrained_spec.cli.commands import build_parser

    args = build_parser().parse_args(["generate", "--schema", "s.json", "--prompt", "p", "--schema-draft", "4"])
    assert args.schema_draft == "4"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--schema", "s.json", "--prompt", "p", "--schema-draft", "5"])


def test_cli_schema_draft_reads_a_draft4_schema(tmp_path, capsys):
    """The schema is checked before any model loads: by 2020-12 rules it is invalid, by draft-04 it is fine
    (the run then stops at the missing model)."""
    from constrained_spec.cli.commands import main

    path = tmp_path / "d4.json"
    path.write_text(json.dumps(DRAFT4_INT))
    base = ["generate", "--schema", str(path), "--prompt", "p", "--model", str(tmp_path / "no-model"), "--draft", "none"]
    for extra, schema_refused in (([], True), (["--schema-draft", "4"], False)):
        try:
            rc = main(base + extra)
        except SystemExit as exc:
            rc = exc.code
        err = capsys.readouterr().err
        assert rc != 0
        assert ("exclusiveMaximum" in err) == schema_refused, err


def test_generator_compile_takes_a_schema_draft():
    """``Generator.run(..., schema_draft=)`` compiles (and later validates) by that draft's rules."""
    from constrained_spec.grammar.compiler import GrammarCompiler
    from constrained_spec.grammar.vocab import TokenVocabulary

    compiler = GrammarCompiler(TokenVocabulary({i: bytes([i]) for i in range(256)}, (256,), 257), None)  # Generator.compile's
    with pytest.raises(SchemaError):
        compiler.compile(DRAFT4_INT)
    compiled = compiler.compile(DRAFT4_INT, schema_draft="4")
    assert compiled.spec.schema_options.draft == "4"
    _ints(compiled.spec.regex, DRAFT4_INT, jsonschema.Draft4Validator)
    assert compiled.parse("9") == 9
    with pytest.raises(OutputValidationError):
        compiled.parse("0")
