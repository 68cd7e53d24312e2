"""The compile seam: a GrammarCompiler returns a CompiledConstraint that travels (into ``Generator.run``
and through the server's queue) without being compiled again; back ends behind one interface, the
outlines-core one optional; a Generator's keywords routed to its config objects."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from constrained_spec.config import BatchConfig, CompileConfig, DecodeConfig, GeneratorConfig
from constrained_spec.errors import ConfigError, VocabularyMismatchError
from constrained_spec.grammar import CFG, Regex, output_spec
from constrained_spec.grammar.backends import GRAMMAR_ENGINES, make_backend
from constrained_spec.grammar.backends.llguidance import LazyGrammar, LlguidanceBackend
from constrained_spec.grammar.backends.outlines_core import OutlinesCoreBackend
from constrained_spec.grammar.compiler import CompiledConstraint, compile_for_vocabulary
from constrained_spec.grammar.vocab import TokenVocabulary

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
BYTES = TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(256,), size=257)


@pytest.fixture(scope="module")
def generator(tiny_generator):
    return tiny_generator(num_draft_tokens=3, max_new_tokens=40)


def counting_builds(monkeypatch, generator) -> list[Any]:
    """The specs the generator's back end builds from here on."""
    built: list[Any] = []
    real = generator.compiler.backend.compile

    def spy(spec, *args, **kwargs):
        built.append(spec)
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(generator.compiler.backend, "compile", spy)
    return built


def test_run_takes_a_compiled_constraint_and_compiles_nothing(generator, monkeypatch):
    compiled = generator.compile(SCHEMA)
    assert isinstance(compiled, CompiledConstraint) and generator.compile(compiled) is compiled
    generator.compiler._cache.clear()  # nothing cached: only the object handed in can spare the build
    built = counting_builds(monkeypatch, generator)
    handed = generator.run("A flag:", compiled)
    assert built == []
    by_type = generator.run("A flag:", SCHEMA)  # negative control: the output type itself is compiled
    assert len(built) == 1
    assert handed.token_ids == by_type.token_ids and handed.value == by_type.value == json.loads(handed.text)


def test_a_constraint_compiled_for_another_vocabulary_is_refused(generator):
    foreign = compile_for_vocabulary(Regex("ab"), BYTES, None)
    with pytest.raises(VocabularyMismatchError, match="another vocabulary"):
        generator.run("x", foreign, max_new_tokens=4)
    own = compile_for_vocabulary(Regex("ab"), generator.vocab, generator.tokenizer.encode)  # control: this vocabulary's
    assert generator.run("x", own, max_new_tokens=8).value == "ab"


def test_the_server_hands_the_compiled_constraint_to_run(generator, monkeypatch):
    from fastapi.testclient import TestClient

    from constrained_spec.serving import ServerConfig, create_app

    class Recorder:
        def __init__(self, inner):
            self.inner, self.handed = inner, []

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def run(self, prompt, output_type, **options):
            self.handed.append(output_type)
            return self.inner.run(prompt, output_type, **options)

    generator.compiler._cache.clear()
    built = counting_builds(monkeypatch, generator)
    schema = {**SCHEMA, "title": "seam"}  # a constraint no other test compiled
    body = {"messages": [{"role": "user", "content": "A flag?"}], "max_tokens": 40,
            "response_format": {"type": "json_schema", "json_schema": {"name": "f", "schema": schema}}}
    recorder = Recorder(generator)
    with TestClient(create_app(recorder, ServerConfig(model_name="tiny"))) as client:
        answers = [client.post("/v1/chat/completions", json=body) for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 200], answers[0].text
    assert len(built) == 1  # compiled once, at admission; the second request's from the admission cache
    assert all(isinstance(t, CompiledConstraint) for t in recorder.handed) and recorder.handed[0] is recorder.handed[1]


def test_generator_keywords_go_to_their_configs():
    config = GeneratorConfig().with_options(dtype="fp32", num_draft_tokens=2, max_batch_size=4, grammar_engine="automaton",
                                            max_new_tokens=9, proposers=None, eos_token_ids=[5])
    assert config.models.dtype == "fp32" and config.decode.num_draft_tokens == 2 and config.decode.proposers is None
    assert config.batch == BatchConfig(max_batch_size=4) and config.compile == CompileConfig(grammar_engine="automaton")
    assert config.max_new_tokens == 9 and config.eos_token_ids == (5,)
    whole = GeneratorConfig().with_options(decode=DecodeConfig(num_draft_tokens=2, adaptive=True), num_draft_tokens=4)
    assert whole.decode == DecodeConfig(num_draft_tokens=4, adaptive=True)  # the part whole, then its fields
    assert GeneratorConfig().with_options() == GeneratorConfig()


@pytest.mark.parametrize("options, needle", [
    ({"num_draft_tokenz": 3}, "num_draft_tokenz"),
    ({"decode": {"num_draft_tokens": 3}}, "decode="),
    ({"grammar_engine": "fast"}, "unknown grammar engine"),
    ({"max_batch_size": 2, "prefill_split": 64}, "prefill_split"),
    ({"schema_hint_style": "long"}, "schema hint style"),
])
def test_a_bad_generator_keyword_is_a_config_error_before_any_load(options, needle):
    from constrained_spec.api import Generator

    with pytest.raises(ConfigError, match=needle):
        Generator("no-such-model-anywhere", None, **options)  # a load would be a ModelLoadError


def test_an_unknown_run_keyword_is_still_a_type_error(generator):
    with pytest.raises(TypeError, match="temprature"):
        generator.run("x", Regex("a"), temprature=1.0)


def test_the_engine_names_agree():
    from constrained_spec.config import GRAMMAR_ENGINES as CONFIGURED

    assert CONFIGURED == GRAMMAR_ENGINES


def test_the_automaton_engine_without_outlines_core_names_its_extra(monkeypatch):
    import importlib.util

    assert make_backend("automaton", BYTES, None, disk_cache=False).name == "automaton"  # control: installed here
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "outlines_core" else real(name, *a))
    with pytest.raises(ConfigError, match=r"constrained-spec\[automaton\]"):
        make_backend("automaton", BYTES, None)
    assert make_backend("lazy", BYTES, None).name == "lazy"
    with pytest.raises(ConfigError, match="unknown grammar engine"):
        make_backend("fast", BYTES, None)


def test_the_automaton_back_end_hands_lark_grammars_to_llguidance():
    backend = OutlinesCoreBackend(BYTES, LlguidanceBackend(BYTES), disk_cache=False)
    grammar = backend.compile(output_spec(CFG('start: "(" start ")" | "x"\n')))
    assert isinstance(grammar, LazyGrammar)
    m = grammar.matcher()
    for b in b"((x))":
        m.advance(b)
    assert m.is_accepting()


def test_compiling_with_llguidance_imports_no_outlines_core():
    root = Path(__file__).resolve().parents[1]
    code = textwrap.dedent("""
        import sys
        from constrained_spec.cli.commands import check_regex
        from constrained_spec.grammar import Regex
        from constrained_spec.grammar.compiler import GrammarCompiler
        from constrained_spec.grammar.vocab import TokenVocabulary
        vocab = TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(256,), size=257)
        check_regex("a+b")
        GrammarCompiler(vocab, None).compile(Regex("a+b")).matcher().advance(97)
        print("outlines_core" in sys.modules)
        GrammarCompiler(vocab, None, engine="automaton", disk_cache=False, compile_timeout=None).compile(Regex("a+b")).matcher().advance(97)
        print("outlines_core" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]  # the automaton build (the control) does import it
