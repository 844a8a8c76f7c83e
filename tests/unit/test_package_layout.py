"""The package layout of ``server/``: dependencies point one way, modules stay small.

Layers, lowest first (ARCHITECTURE.md, "Code map")::

    foundations  _errors, _runtime, _retry, _signals   (_retry takes its clock and jitter
                 from _runtime; _signals: the main thread's wait for a stop)
    protocol     _protocol/     metrics  _metrics/   settings  _settings
                 (side by side; _settings: how a config field declares its setting)
    config       _config            (validates the root prefix with protocol.keys)
    storage      _storage/
    log          _log/
    front ends   _http_server   (the HTTP/1.1 JSON server base both services share)
                 _kafka/        (Kafka's wire protocol over the broker's parts, which
                                 the broker hands it; side by side with _http_server)
    broker       _broker/    compaction  _compaction/   client  client/
                 (side by side: none imports another; the client speaks only the
                 wire layouts of _protocol)
    spark        spark/        (the data source and the job, on the client)

A module may import its own layer and the layers below it; side-by-side
packages do not import each other, except that a foundation may use another
(no cycles, like everything else). The faces (the
reference system's module names: ``leaderless_log_writer`` ...) sit on top
and may import anything but spark, beside ``_env_example`` (``.env.example``
from every process's settings); nothing inside a layer imports a face. Checked on the
source with ``ast``, including imports inside functions and under
``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import server

SERVER = Path(server.__file__).parent

LAYERS: dict[str, int] = {
    "server._errors": 0,
    "server._runtime": 0,
    "server._retry": 0,
    "server._signals": 0,
    "server._metrics": 1,
    "server._protocol": 1,
    "server._settings": 1,
    "server._config": 2,
    "server._storage": 3,
    "server._log": 4,
    "server._catalogue": 4,
    "server._groups": 4,
    "server._http_server": 5,
    "server._kafka": 5,
    "server._broker": 6,
    "server._admin": 6,
    "server._compaction": 6,
    "server.client": 6,
    "server.spark": 8,
    "server._env_example": 7,
}
FOUNDATIONS = 0
FACE = 7
FACES = {
    "server",
    "server.leaderless_log_admin",
    "server.leaderless_log_broker",
    "server.leaderless_log_common",
    "server.leaderless_log_compactor",
    "server.leaderless_log_compactor_server",
    "server.leaderless_log_metrics",
    "server.leaderless_log_reader",
    "server.leaderless_log_vacuum",
    "server.leaderless_log_writer",
}

MAX_LINES = 500
MAX_FACE_LINES = 80
LONG_MODULES: dict[str, int] = {}
"""Modules allowed past MAX_LINES, each with its reason (none today)."""


def _module_name(path: Path) -> str:
    rel = path.relative_to(SERVER.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(SERVER.rglob("*.py"))}


def _layer(module: str) -> int | None:
    if module in FACES:
        return FACE
    best = None
    for prefix, rank in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, rank)
    return None if best is None else best[1]


def _group(module: str) -> str:
    for prefix in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return prefix
    return module


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """The import statements under ``if TYPE_CHECKING:`` (never executed)."""
    nodes: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            nodes.update(n for stmt in node.body for n in ast.walk(stmt))
    return nodes


def _imports(module: str, path: Path, *, runtime_only: bool = False) -> set[str]:
    """Every ``server...`` module ``path`` imports, resolved to module names."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    skip = _type_checking_only(tree) if runtime_only else set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # ``from . import recovery`` imports a module
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in MODULES else target)
    return {name for name in found if name == "server" or name.startswith("server.")}


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}
RUNTIME_GRAPH = {module: _imports(module, path, runtime_only=True) for module, path in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module):
    if module.startswith("server.spark"):
        pytest.importorskip("pyspark")
    importlib.import_module(module)


def test_every_module_has_a_layer():
    assert [m for m in MODULES if _layer(m) is None] == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_higher_layer(module):
    rank = _layer(module)
    for target in GRAPH[module]:
        if target == "server" and module in FACES:
            continue
        target_rank = _layer(target)
        assert target_rank is not None, f"{module} imports {target}, which has no layer"
        assert target_rank <= rank, f"{module} (layer {rank}) imports {target} (layer {target_rank})"
        if target_rank == rank and rank not in (FACE, FOUNDATIONS):
            assert _group(target) == _group(module), f"{module} imports its sibling {target}"


def test_no_import_cycles():
    """Imports that run (at module level or inside a function) form no cycle;
    an annotation-only import under ``TYPE_CHECKING`` may point back."""
    seen: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(module: str, stack: list[str]) -> None:
        seen[module] = 1
        for target in sorted(RUNTIME_GRAPH.get(module, ())):
            if target not in RUNTIME_GRAPH or target in ("server", module):  # ``__main__`` re-imports itself
                continue
            if seen.get(target) == 1:
                cycle = stack[stack.index(target):] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in seen:
                visit(target, [*stack, target])
        seen[module] = 2

    for module in sorted(RUNTIME_GRAPH):
        if module not in seen:
            visit(module, [module])


def test_the_dev_tools_are_outside_the_runtime_package():
    for module, targets in GRAPH.items():
        assert not {t for t in targets if t.split(".")[0] in ("devstack", "loadtest", "testing", "dashboard", "tests")}, module
    assert not (SERVER / "devstack").exists()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module):
    lines = len(MODULES[module].read_text().splitlines())
    limit = LONG_MODULES.get(module, MAX_LINES)
    assert lines <= limit, f"{module} has {lines} lines (limit {limit}): split it by role"


def test_the_long_module_list_is_current():
    for module, limit in LONG_MODULES.items():
        assert module in MODULES, f"{module} is gone: drop it from LONG_MODULES"
        assert len(MODULES[module].read_text().splitlines()) > MAX_LINES, f"{module} is short again"


MAX_FUNCTION_LINES = 60
LONG_FUNCTIONS = {
    # Protocol procedures that read as the SPEC's numbered steps (ARCHITECTURE.md).
    "server._log.writer.LeaderlessLogWriter._commit": "SPEC 7.3 C1-C3",
    "server._compaction.compactor.LeaderlessLogCompactor._compact_new": "SPEC 7.7 K3-K6",
    # The read path's per-record loop: its varints are inlined, since a call per field halved the decode speed.
    "server._protocol.kafka_records.parse_columns": "inlined varints",
}


def _functions(module: str):
    tree = ast.parse(MODULES[module].read_text())

    def walk(node: ast.AST, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}{child.name}", child.end_lineno - child.lineno + 1
                yield from walk(child, f"{prefix}{child.name}.")

    yield from walk(tree, f"{module}.")


def test_functions_stay_short():
    long = {
        name: lines for module in MODULES for name, lines in _functions(module)
        if lines > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS
    }
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines: split them {long}"
    found = {name for module in MODULES for name, _ in _functions(module)}
    assert set(LONG_FUNCTIONS) <= found, "a listed long function is gone: drop it from LONG_FUNCTIONS"


@pytest.mark.parametrize("face", sorted(FACES - {"server"}))
def test_faces_are_short_re_exports(face):
    lines = len(MODULES[face].read_text().splitlines())
    assert lines <= MAX_FACE_LINES, f"{face} has {lines} lines: move its code into the package it faces"


def test_the_clients_speak_only_protocol():
    """The produce client and Spark reach the broker through the wire layouts
    of ``_protocol``, never through the broker's modules."""
    for module, targets in GRAPH.items():
        if _group(module) in ("server.client", "server.spark"):
            assert not {t for t in targets if _group(t) in ("server._broker", "server._compaction")}, module
