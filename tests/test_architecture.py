"""The package's rooms and the direction of their imports (every import statement, function-level
ones included, read from the source with ``ast``; nothing is imported to check).

Imports run one way: CLI and server -> API -> engine -> grammar, models, sampling. The engine
imports nothing from serving or the CLI; serving imports only the public API; no module imports a
private name (``_x``) of another module. Inside ``models`` the offline store imports no runtime, the
runtimes (``models.torch``, ``models.llamacpp``) import of ``models`` only themselves, the protocol and the
store, and no ``models`` modules form a circle. Each rule has a negative control: the same checker run on
a made-up source that breaks it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "constrained_spec"

#: room -> rooms it may import (besides itself). Leaf utilities (errors, paths, lru, progress) are open to all.
LEAVES = {"errors", "paths", "lru", "progress"}
ALLOWED = {
    "package": {"api", "grammar", "sampling", "config"},  # the top-level facade re-exports the public names
    "grammar": set(),
    "sampling": set(),
    "models": {"config"},
    "config": set(),  # plain data: the default pair's names and the device, dtype and runtime choices live here
    "engine": {"grammar", "models", "sampling", "config"},
    "api": {"engine", "grammar", "models", "sampling", "config", "streams", "prompts"},
    "streams": set(),  # stream / arun / astream over a Generator it is handed (duck-typed)
    # prompt text (schema hint, type sketch, chat template, tool prompts): no HTTP, no engine, and not the
    # tools room either (constrained_spec.tools re-exports the tool prompts, so tools -> prompts only)
    "prompts": {"config"},
    "tools": {"grammar", "config", "prompts"},  # function calling: definitions, call grammar, messages, scanner
    "serving": {"api", "tools", "config", "grammar", "package", "prompts"},
    "cli": {"api", "tools", "config", "grammar", "models", "serving", "package"},
    "integrations": {"api", "grammar", "config", "package"},  # doors where users are: the public API only
}
#: what serving may reach: the public API only
SERVING_PUBLIC = {"constrained_spec", "constrained_spec.api", "constrained_spec.errors", "constrained_spec.tools",
                  "constrained_spec.config", "constrained_spec.grammar", "constrained_spec.prompts"}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    return parts[1]


def imports(source: str, module: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """(imported module, imported names) for every import of a ``constrained_spec`` module."""
    out = []
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names if alias.name.startswith("constrained_spec")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("constrained_spec"):
                out.append((target, [alias.name for alias in node.names]))
    return out


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    problems = []
    mine = room(module)
    for target, names in imports(source, module, is_package):
        theirs = room(target)
        if target == "constrained_spec" and names:  # ``from constrained_spec import x``: x may be a module
            theirs = names[0] if names[0] in ALLOWED or names[0] in LEAVES else "package"
        if theirs != mine and theirs not in LEAVES and theirs not in ALLOWED.get(mine, set()):
            problems.append(f"{module} ({mine}) imports {target} ({theirs})")
        if mine == "serving" and theirs != "serving":
            if target not in SERVING_PUBLIC and room(target) not in LEAVES:
                problems.append(f"{module} (serving) imports {target}, not the public API")
        for name in names:
            if name.startswith("_") and not name.startswith("__") and target != module:
                problems.append(f"{module} imports the private name {name} of {target}")
    return problems


def package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_rooms(path: Path) -> None:
    assert violations(path.read_text(), module_name(path), path.name == "__init__.py") == []


#: what the engine may import of ``models``: the runtime protocol, and the store's cache of measured costs; never a
#: runtime (transformers/torch, llama.cpp), which each implement the protocol in a room of their own
ENGINE_MODELS = {"constrained_spec.models.protocol", "constrained_spec.models.cost_cache"}


def runtime_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """The ``models`` modules past :data:`ENGINE_MODELS` that ``source`` imports."""
    found = []
    for target, names in imports(source, module, is_package):
        if target == "constrained_spec.models":
            found += [f"{target}.{n}" for n in names if f"{target}.{n}" not in ENGINE_MODELS]
        elif room(target) == "models" and target not in ENGINE_MODELS:
            found.append(target)
    return found


@pytest.mark.parametrize("path", sorted((PACKAGE / "engine").rglob("*.py")), ids=lambda p: p.name)
def test_the_engine_imports_no_runtime(path: Path) -> None:
    assert runtime_imports(path.read_text(), module_name(path), path.name == "__init__.py") == []


@pytest.mark.parametrize("source", ["from constrained_spec.models.torch.hf import HFModel\n",
                                    "def f():\n    from constrained_spec.models.llamacpp.model import LlamaCppRows\n",
                                    "from constrained_spec.models import batched\n",
                                    "from ..models.hf import HFModel\n"])
def test_negative_controls_runtime_imports_are_caught(source: str) -> None:
    assert runtime_imports(source, "constrained_spec.engine.batching") != []
    assert runtime_imports("from constrained_spec.models.protocol import SequenceModel\n", "constrained_spec.engine.batching") == []


def mutual_imports(sources: dict[str, str]) -> list[tuple[str, str]]:
    """Pairs of modules (name -> source) that import each other, at any level (function-level and
    TYPE_CHECKING imports included: a circle there is still one the reader must hold)."""
    graph = {m: {t for t, _ in imports(src, m, False)} for m, src in sources.items()}
    return sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, ()))


def test_no_two_engine_modules_import_each_other() -> None:
    sources = {module_name(p): p.read_text() for p in (PACKAGE / "engine").glob("*.py") if p.name != "__init__.py"}
    assert mutual_imports(sources) == []


def test_negative_control_a_circle_is_caught() -> None:
    sources = {"constrained_spec.engine.smc": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from constrained_spec.engine.request import X\n",
               "constrained_spec.engine.request": "def f():\n    from constrained_spec.engine.smc import decode_smc\n"}
    assert mutual_imports(sources) == [("constrained_spec.engine.request", "constrained_spec.engine.smc")]


#: the rooms inside ``models``: each runtime, and the offline store; the rest (``protocol``, ``cost_cache``, the
#: runtime choice ``runtime`` and ``loading``) sit at the top, where the engine and the API see them
MODELS_RUNTIMES = {"torch", "llamacpp"}
MODELS_STORE = "store"
#: what a runtime may import of ``models`` besides itself: the protocol it implements and the store
RUNTIME_MAY_IMPORT = {"constrained_spec.models.protocol"}


def models_room(module: str) -> str | None:
    """``torch``, ``llamacpp``, ``store``, ``top`` for another ``models`` module, None outside ``models``."""
    parts = module.split(".")
    if parts[:2] != ["constrained_spec", "models"]:
        return None
    if len(parts) > 2 and parts[2] in MODELS_RUNTIMES | {MODELS_STORE}:
        return parts[2]
    return "top"


def models_room_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Imports that break the rooms inside ``models``: the store imports no other ``models`` module (no runtime,
    no protocol); a runtime imports of ``models`` only itself, :data:`RUNTIME_MAY_IMPORT` and the store."""
    mine = models_room(module)
    if mine not in MODELS_RUNTIMES | {MODELS_STORE}:
        return []
    problems = []
    for target, names in imports(source, module, is_package):
        targets = [f"{target}.{n}" for n in names] if target in {"constrained_spec.models", f"constrained_spec.models.{mine}"} and names else [target]
        for full in targets:
            theirs = models_room(full)
            if theirs is None or theirs == mine:
                continue
            if mine == MODELS_STORE or not (theirs == MODELS_STORE or full in RUNTIME_MAY_IMPORT):
                problems.append(f"{module} ({mine}) imports {full} ({theirs})")
    return problems


@pytest.mark.parametrize("path", sorted((PACKAGE / "models").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_store_imports_no_runtime_and_runtimes_not_each_other(path: Path) -> None:
    assert models_room_violations(path.read_text(), module_name(path), path.name == "__init__.py") == []


@pytest.mark.parametrize("module, source", [
    ("constrained_spec.models.store.fetch", "from constrained_spec.models.torch.dtypes import concrete_dtype\n"),
    ("constrained_spec.models.store.cache", "def f():\n    from constrained_spec.models.llamacpp.model import load_llamacpp\n"),
    ("constrained_spec.models.store.sources", "from constrained_spec.models.protocol import SequenceModel\n"),
    ("constrained_spec.models.store.fetch", "from ..torch import hf\n"),
    ("constrained_spec.models.torch.hf", "from constrained_spec.models.llamacpp.model import LlamaCppModel\n"),
    ("constrained_spec.models.llamacpp.model", "def f():\n    from constrained_spec.models.torch import hf\n"),
    ("constrained_spec.models.llamacpp.model", "from constrained_spec.models import loading\n"),
    ("constrained_spec.models.torch.resolve", "from constrained_spec.models.runtime import resolve_runtime\n"),
])
def test_negative_controls_models_rooms_are_caught(module: str, source: str) -> None:
    assert models_room_violations(source, module) != []


def test_the_models_rooms_allow_what_they_should() -> None:
    """The checker is not blind to allowed imports: a runtime may use the store and the protocol, the store itself."""
    assert models_room_violations("from constrained_spec.models.store.fetch import fetch_gguf\n"
                                  "from constrained_spec.models.protocol import SequenceModel\n"
                                  "from constrained_spec.models.torch import packed_linear\n", "constrained_spec.models.torch.hf") == []
    assert models_room_violations("from constrained_spec.models.store.cache import known_source\n", "constrained_spec.models.store.fetch") == []


def import_cycles(sources: dict[str, str]) -> list[list[str]]:
    """The circles among modules (name -> source), of any length: each strongly connected component of more than
    one module, sorted (imports at any level count, as in :func:`mutual_imports`; an import of a package's name
    list counts as one of each named submodule that is in ``sources``)."""
    graph: dict[str, set[str]] = {}
    for m, src in sources.items():
        edges = set()
        for target, names in imports(src, m, False):
            edges |= {f"{target}.{n}" for n in names if f"{target}.{n}" in sources}
            if target in sources:
                edges.add(target)
        graph[m] = edges - {m}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_circle_among_the_models_modules() -> None:
    sources = {module_name(p): p.read_text() for p in (PACKAGE / "models").rglob("*.py") if p.name != "__init__.py"}
    assert import_cycles(sources) == []


def test_negative_control_a_models_circle_is_caught() -> None:
    pair = {"constrained_spec.models.torch.hf": "def rows():\n    from constrained_spec.models.torch.batched import BatchedHFModel\n",
            "constrained_spec.models.torch.batched": "from constrained_spec.models.torch.hf import HFModel\n"}
    assert import_cycles(pair) == [["constrained_spec.models.torch.batched", "constrained_spec.models.torch.hf"]]
    three = {"constrained_spec.models.a": "from constrained_spec.models import b\n",
             "constrained_spec.models.b": "from constrained_spec.models.c import x\n",
             "constrained_spec.models.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from constrained_spec.models.a import y\n",
             "constrained_spec.models.d": "from constrained_spec.models.a import z\n"}
    assert import_cycles(three) == [["constrained_spec.models.a", "constrained_spec.models.b", "constrained_spec.models.c"]]
    assert mutual_imports(three) == []  # the pair check alone misses a circle of three


def test_the_engine_imports_nothing_from_serving_the_cli_or_the_api() -> None:
    for path in (PACKAGE / "engine").rglob("*.py"):
        for target, _ in imports(path.read_text(), module_name(path), path.name == "__init__.py"):
            assert room(target) not in {"serving", "cli", "api", "tools", "prompts"}, (path, target)


@pytest.mark.parametrize("module, source", [
    ("constrained_spec.engine.loop", "from constrained_spec.serving.app import create_app\n"),
    ("constrained_spec.engine.loop", "def f():\n    from constrained_spec.cli import commands\n"),
    ("constrained_spec.grammar.matcher", "from constrained_spec.engine.loop import SpeculativeDecoder\n"),
    ("constrained_spec.sampling.acceptance", "from constrained_spec.models.torch.hf import HFModel\n"),
    ("constrained_spec.serving.app", "from constrained_spec.engine.stats import DecodeStats\n"),
    ("constrained_spec.api", "from constrained_spec.grammar.backends.outlines_core import _build_tables\n"),
    ("constrained_spec.engine.block", "from ..grammar.automaton import _short\n"),
    ("constrained_spec.prompts.chat", "from constrained_spec.serving.app import create_app\n"),
    ("constrained_spec.prompts.tools", "from constrained_spec.engine.loop import SpeculativeDecoder\n"),
    ("constrained_spec.prompts.tools", "from constrained_spec.tools.definitions import Tool\n"),
    ("constrained_spec.prompts.schema_hint", "from constrained_spec.api import Generator\n"),
    ("constrained_spec.tools.calling", "def f():\n    from constrained_spec.api import Generator\n"),
    ("constrained_spec.serving.completion", "from constrained_spec.prompts.tools import _template_messages\n"),
])
def test_negative_controls_are_caught(module: str, source: str) -> None:
    assert violations(source, module) != []


#: functions allowed past the size limits: Triton kernels (one launch, every pointer a parameter)
KERNEL_MODULES = {"sampling/kernels/triton_verify.py"}
MAX_FUNCTION_LINES = 100
MAX_PARAMETERS = 10


def oversized_functions(source: str) -> list[str]:
    """Functions in ``source`` over MAX_FUNCTION_LINES lines or MAX_PARAMETERS parameters (self/cls
    not counted), as 'name: why'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        args = node.args
        params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        count = len(params) - (1 if params[:1] in (["self"], ["cls"]) else 0)
        if lines > MAX_FUNCTION_LINES:
            found.append(f"{node.name}: {lines} lines")
        if count > MAX_PARAMETERS:
            found.append(f"{node.name}: {count} parameters")
    return found


def test_no_function_is_over_100_lines_or_10_parameters_outside_kernels() -> None:
    """Group parameters into typed dataclasses, and long bodies into named steps."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in KERNEL_MODULES:
            continue
        found = oversized_functions(path.read_text())
        if found:
            offenders[relative] = found
    assert offenders == {}


def test_the_size_check_catches_a_long_function_and_a_long_parameter_list() -> None:
    long_body = "def f():\n" + "    x = 1\n" * 100
    many = "class C:\n    def m(self, " + ", ".join(f"a{i}" for i in range(11)) + "):\n        pass\n"
    ok = "class C:\n    def m(self, " + ", ".join(f"a{i}" for i in range(10)) + "):\n        pass\n"
    assert oversized_functions(long_body) == ["f: 101 lines"]
    assert oversized_functions(many) == ["m: 11 parameters"]
    assert oversized_functions(ok) == []


def config_names() -> set[str]:
    """The names ``constrained_spec/config.py`` defines (not those it imports)."""
    names: set[str] = set()
    for node in ast.parse((PACKAGE / "config.py").read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def config_names_taken_elsewhere(source: str, module: str, is_package: bool = False) -> list[str]:
    """``config`` names that ``source`` imports from another module (a re-export) instead of config itself."""
    defined = config_names()
    return [f"{target}.{name}" for target, names in imports(source, module, is_package)
            if target != "constrained_spec.config" for name in names if name in defined]


@pytest.mark.parametrize("path", sorted((PACKAGE / "cli").rglob("*.py")), ids=lambda p: p.name)
def test_the_cli_takes_config_names_from_config(path: Path) -> None:
    assert config_names_taken_elsewhere(path.read_text(), module_name(path), path.name == "__init__.py") == []


def test_negative_control_a_config_name_through_models_is_caught() -> None:
    assert config_names() >= {"RUNTIMES", "DTYPE_CHOICES", "DEVICE_HELP", "normalize_device"}
    source = "from constrained_spec.models.runtime import RUNTIMES\nfrom constrained_spec.config import DTYPE_CHOICES\n"
    assert config_names_taken_elsewhere(source, "constrained_spec.cli.args") == ["constrained_spec.models.runtime.RUNTIMES"]
