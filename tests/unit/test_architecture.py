"""The package layering, read from the code's imports: no cycle between packages or inside one,
settings read at the boundary."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterator
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


@functools.cache
def _modules() -> tuple[tuple[str, ast.Module], ...]:
    """Every source file of ours, parsed (once: each check reads them all)."""
    parsed = []
    for package in TOP_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            parsed.append((relative, ast.parse(path.read_text(encoding="utf-8"), relative)))
    return tuple(parsed)


@functools.cache
def _imports() -> tuple[Import, ...]:
    """Every import of our packages, at module level or inside a function (lazy ones too)."""
    return tuple(_read_imports())


def _read_imports() -> Iterator[Import]:
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


Module = tuple[str, ...]


def _module_of(path: str) -> Module:
    """``rubricsvc/judging/config.py`` -> ("rubricsvc", "judging", "config"); a package's
    ``__init__.py`` is the package."""
    parts = tuple(path.removesuffix(".py").split("/"))
    return parts[:-1] if parts[-1] == "__init__" else parts


@functools.cache
def _ours() -> frozenset[Module]:
    """Every module and package of ours."""
    return frozenset(_module_of(path) for path, _ in _modules())


def _packages() -> list[Module]:
    return sorted(m for m in _ours() if (ROOT.joinpath(*m) / "__init__.py").is_file())


def _resolve(name: str) -> Module:
    """The module an import reaches: the longest start of ``name`` that is one of ours, so
    ``rubricsvc.judging.modes.get_mode`` (a name the package re-exports) is the package and
    ``rubricsvc.judging.modes.text`` is the module."""
    parts = tuple(name.split("."))
    for end in range(len(parts), 0, -1):
        if parts[:end] in _ours():
            return parts[:end]
    raise AssertionError(f"{name} names no module of ours")


Graph = dict[str, dict[str, Import]]


def _edges(unit: Callable[[Module], str | None]) -> Graph:
    """``unit`` of each importing module -> ``unit`` of what it imports, each with one import
    that shows it; modules ``unit`` leaves out (None) and a unit's imports of itself ignored."""
    graph: Graph = {}
    for found in _imports():
        source, target = unit(_module_of(found.path)), unit(_resolve(found.module))
        if source is not None and target is not None and source != target:
            graph.setdefault(source, {}).setdefault(target, found)
    return graph


def _unit(module: Module) -> str:
    """The layer a module belongs to: ``rubricsvc.<subpackage or module>`` (``rubricsvc`` for
    the package's own ``__init__``), ``workers``, ``trainer``."""
    return ".".join(module[:2]) if module[0] == "rubricsvc" else module[0]


def _graph() -> Graph:
    """Every package and top-level module of ``rubricsvc``, and ``workers`` and ``trainer`` as
    a whole: each -> those it imports."""
    return _edges(_unit)


def _package_graph(package: Module) -> Graph:
    """The modules and subpackages directly in ``package`` (``__init__`` for the package's own
    module), each -> those of them it imports, whatever module inside it does the importing."""

    def member(module: Module) -> str | None:
        if module[: len(package)] != package:
            return None
        return module[len(package)] if len(module) > len(package) else "__init__"

    return _edges(member)


def _cycle(graph: Graph) -> list[str] | None:
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


def _shown(graph: Graph, cycle: list[str]) -> str:
    return "\n".join(
        f"{a} -> {b} ({graph[a][b].path}:{graph[a][b].line})" for a, b in pairwise(cycle)
    )


def test_the_package_graph_has_no_cycle() -> None:
    """Every pair of packages of ``rubricsvc``, and each of them against ``workers`` and
    ``trainer``: one direction at most, through any chain."""
    graph = _graph()
    assert "rubricsvc.scoring" in graph["rubricsvc.api"]  # the graph is read, not empty
    assert "rubricsvc.scoring" in graph["workers"]
    assert "trainer" in graph["rubricsvc.cli"]  # `rubricsvc train` starts the trainer
    cycle = _cycle(graph)
    assert cycle is None, "import cycle:\n" + _shown(graph, cycle)


def test_no_package_has_a_cycle_inside() -> None:
    """Within each package (``rubricsvc/judging/``, ``judging/modes/``, ``trainer/adapters/``,
    ...), its modules and subpackages import one another in one direction too."""
    packages = _packages()
    assert ("rubricsvc", "judging", "modes") in packages
    assert ("trainer", "adapters") in packages
    found = {}
    for package in packages:
        graph = _package_graph(package)
        if cycle := _cycle(graph):
            found[".".join(package)] = _shown(graph, cycle)
    assert found == {}, "import cycles inside packages:\n" + "\n".join(
        f"{package}:\n{shown}" for package, shown in found.items()
    )


def test_the_backends_are_below_judging() -> None:
    """What a backend is asked and answers (``backends.types``), preparing the bundled model
    (``backends.embedded``), the neutralizing of judged text (``rubricsvc.neutral``) and the
    capability lookup both registries share (``rubricsvc.capabilities``) sit at or below the
    backends: judging uses the backends, never the other way round."""
    graph = _graph()
    assert "rubricsvc.backends" in graph["rubricsvc.judging"]
    upwards = ["rubricsvc.backends", "rubricsvc.judging"]
    assert upwards[1] not in graph.get(upwards[0], {}), _shown(graph, upwards)


def test_a_judge_config_knows_the_modes_not_the_other_way_round() -> None:
    """A judge config names a mode and asks the mode registry about it; a mode reads only the
    settings it is given (``modes.base.JudgeSettings``)."""
    judging = _package_graph(("rubricsvc", "judging"))
    assert "modes" in judging["config"]
    assert "config" not in judging.get("modes", {}), _shown(judging, ["modes", "config"])


def test_the_cycle_check_finds_a_cycle() -> None:
    edge = Import("x.py", 1, "x")
    assert _cycle({"a": {"b": edge}, "b": {"c": edge}, "c": {"a": edge}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": edge}, "b": {"c": edge}}) is None


def test_imports_are_resolved_to_our_modules() -> None:
    assert _resolve("rubricsvc.judging.modes.get_mode") == ("rubricsvc", "judging", "modes")
    assert _resolve("rubricsvc.judging.modes.text") == ("rubricsvc", "judging", "modes", "text")
    assert _resolve("rubricsvc.__version__") == ("rubricsvc",)
    assert _module_of("rubricsvc/judging/__init__.py") == ("rubricsvc", "judging")
    assert _unit(("rubricsvc", "judging", "modes", "base")) == "rubricsvc.judging"
    assert _unit(("trainer", "adapters", "verl")) == "trainer"


def test_imports_are_absolute() -> None:
    """A relative import would be invisible to the checks above."""
    relative = sorted(
        f"{path}:{node.lineno}"
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level > 0
    )
    assert relative == []


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


# The modules that serve the reward routes: parse, call the reward pipeline, serialize.
REWARD_EDGE = ("rubricsvc/api/routes/rewards.py", "rubricsvc/api/direct.py")
PIPELINE = ("rubricsvc", "scoring", "pipeline")


def test_the_reward_route_goes_one_way_through_the_pipeline() -> None:
    """A reward request's path reads top-down: the routes (and ``api.direct``, which serves
    them) reach ``rubricsvc.scoring`` only through ``scoring.pipeline``; inside ``scoring``,
    no module imports the pipeline (it is the top of the reward path, calling its stages'
    modules below it), and nothing in ``scoring`` imports the API."""
    imports = _imports()
    reached = {
        (found.path, _resolve(found.module))
        for found in imports
        if found.path in REWARD_EDGE and _resolve(found.module)[:2] == ("rubricsvc", "scoring")
    }
    assert ("rubricsvc/api/routes/rewards.py", PIPELINE) in reached  # the route calls it
    beside = sorted(
        f"{path} -> {'.'.join(module)}" for path, module in reached if module != PIPELINE
    )
    assert beside == [], "reward routes past the pipeline:\n" + "\n".join(beside)
    upwards = sorted(
        f"{found.path}:{found.line} -> {found.module}"
        for found in imports
        if found.path.startswith("rubricsvc/scoring/")
        and (_resolve(found.module) == PIPELINE or found.module.startswith("rubricsvc.api"))
        and _module_of(found.path) != PIPELINE
    )
    assert upwards == [], "back up the reward path:\n" + "\n".join(upwards)
