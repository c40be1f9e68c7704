"""The package layering, read from the code's imports: no cycle, settings read at the boundary."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP_PACKAGES = ("rubricsvc", "workers", "trainer")

# Where a process starts and reads its settings: CLI commands, the API app's creation, the
# worker entry point (the whole workers package: app factory, task, signal handlers) and the
# trainer's launcher, its config and the Celery scorer it runs in its own process.
SETTINGS_BOUNDARY = (
    "rubricsvc/config.py",
    "rubricsvc/cli/",
    "rubricsvc/api/app.py",
    "workers/",
    "trainer/grpo.py",
    "trainer/config.py",
    "trainer/celery_scorer.py",
)


@dataclass(frozen=True)
class Import:
    """One import statement: where it is and which module it names."""

    path: str
    line: int
    module: str


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for package in TOP_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            yield relative, ast.parse(path.read_text(encoding="utf-8"), relative)


def _imports() -> Iterator[Import]:
    """Every import of our packages, at module level or inside a function (lazy ones too)."""
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from rubricsvc import db`` imports rubricsvc.db, not rubricsvc.
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                if name.split(".")[0] in TOP_PACKAGES:
                    yield Import(path, node.lineno, name)


# Packages that are one layer with another: the judge backends left ``judging/`` for a package
# of their own, but they and ``judging`` still import each other (backends read judging's types,
# judge configs ask the backend registry), as they did while the backends lived in ``judging/``.
SAME_LAYER = {"rubricsvc.backends": "rubricsvc.judging"}


def _unit(module_or_path: str) -> str:
    """The layer a module belongs to: ``rubricsvc.<subpackage or module>`` (or the package it is
    one layer with, ``SAME_LAYER``), ``workers``, ``trainer``."""
    parts = module_or_path.removesuffix(".py").replace("/", ".").split(".")
    if parts[0] == "rubricsvc" and len(parts) > 1:
        unit = f"rubricsvc.{parts[1]}"
        return SAME_LAYER.get(unit, unit)
    return parts[0]


def _graph() -> dict[str, dict[str, Import]]:
    """Layer -> the layers it imports, each with one import that shows it."""
    graph: dict[str, dict[str, Import]] = {}
    for found in _imports():
        source, target = _unit(found.path), _unit(found.module)
        if target not in (source, "rubricsvc", "rubricsvc.__version__", "rubricsvc.__init__"):
            graph.setdefault(source, {}).setdefault(target, found)
    return graph


def _cycle(graph: dict[str, dict[str, Import]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of layers (first repeated last), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(unit: str) -> list[str] | None:
        if unit in path:
            return [*path[path.index(unit) :], unit]
        if unit in done:
            return None
        path.append(unit)
        for target in sorted(graph.get(unit, {})):
            if found := visit(target):
                return found
        path.pop()
        done.add(unit)
        return None

    for unit in sorted(graph):
        if found := visit(unit):
            return found
    return None


def test_the_package_graph_has_no_cycle() -> None:
    graph = _graph()
    assert "rubricsvc.scoring" in graph["rubricsvc.api"]  # the graph is read, not empty
    assert _unit("rubricsvc/backends/base.py") == _unit("rubricsvc.judging.types")
    cycle = _cycle(graph)
    shown = [
        f"{a} -> {b} ({graph[a][b].path}:{graph[a][b].line})" for a, b in pairwise(cycle or [])
    ]
    assert cycle is None, "import cycle:\n" + "\n".join(shown)


def test_the_cycle_check_finds_a_cycle() -> None:
    edge = Import("x.py", 1, "x")
    assert _cycle({"a": {"b": edge}, "b": {"c": edge}, "c": {"a": edge}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": edge}, "b": {"c": edge}}) is None


def test_settings_are_read_only_at_the_boundary() -> None:
    readers = set()
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name == "get_settings":
                readers.add(path)
    below = sorted(path for path in readers if not path.startswith(SETTINGS_BOUNDARY))
    assert "rubricsvc/api/app.py" in readers  # calls are found
    assert below == [], f"get_settings() below the boundary: {below}"


def test_the_database_and_the_settings_are_leaves() -> None:
    graph = _graph()
    assert set(graph.get("rubricsvc.config", {})) <= {"rubricsvc.errors"}
    assert "rubricsvc.config" not in graph.get("rubricsvc.db", {})
    assert set(graph.get("rubricsvc.batching", {})) == set()


def test_only_plugins_import_the_plugin_surface() -> None:
    """``rubricsvc.ext`` re-exports the registries for plugins; the platform itself imports
    them where they live, so the surface can only ever sit on top."""
    users = sorted(
        f"{found.path}:{found.line}"
        for found in _imports()
        if found.module == "rubricsvc.ext" or found.module.startswith("rubricsvc.ext.")
    )
    assert users == []
