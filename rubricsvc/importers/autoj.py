"""Auto-J scenario criteria (GAIR-NLP/auto-j, ``other_resources/scenario_criteria``) as rubrics.

Each ``specials/<scenario>.yaml`` is one scenario::

    basic-writing:
      !include "./other_resources/scenario_criteria/basics/basic_writing.yaml"
    extended:
      conciseness: {content: "...", weight: 5, type: content}

A basics file maps criterion names to the same {content, weight, type}. The include path is
relative to the repository root; it is looked up from the scenario's folder upwards, so any
copy that keeps the ``other_resources/scenario_criteria`` layout imports. Every file read (a
scenario, or the file an include names) must lie inside the imported root once symlinks are
resolved: the folder given (its parent when that is the ``specials`` folder itself, so that
``basics`` is inside). An include outside it, absolute, with ``..``, or through a symlink that
points outside, fails the import with the file and the include.

Every scenario becomes a shared rubric (no prompt: a scenario applies to many prompts) named
``autoj/<scenario>``; its criteria are those of each included basics file, in the order of the
includes, followed by the extended ones, each in file order:

- text = ``content`` (the checkable statement; names repeat, e.g. ``accuracy`` in both a basics
  file and ``extended``, the contents do not);
- weight = ``weight`` exactly; category ``important`` (Auto-J grades importance by weight only);
- theme = ``type`` (``basic`` for basics, ``content``, ``format`` or ``style`` for extended);
- tags = ``name:<name>`` and ``from:<section>`` (the include's key, e.g. ``basic-writing``, or
  ``extended``).

``origin_detail`` names the scenario file and its includes. Unknown keys, a repeated key or a
missing include fail the import with the file and the entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import UniqueKeyLoader, load_yaml
from rubricsvc.importers.common import RubricBatch, located, parse
from rubricsvc.inputpolicy import text_problem
from rubricsvc.rubrics.schemas import CriterionSpec, RubricSpec

SCENARIO_DIR = Path("other_resources/scenario_criteria")
EXTENDED = "extended"


@dataclass(frozen=True)
class _Include:
    """An ``!include`` tag, resolved once the including file is known."""

    path: str


class _Loader(UniqueKeyLoader):
    """Refuses repeated keys (a repeated criterion name would silently drop one) and reads
    ``!include`` tags."""

    leaf_types = (_Include,)


def _construct_include(loader: _Loader, node: yaml.Node) -> _Include:
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(
            None, None, "!include takes a file path", node.start_mark
        )
    path = str(loader.construct_scalar(node))
    problem = text_problem(path)
    if problem is not None:
        raise yaml.constructor.ConstructorError(
            None, None, f"!include path {problem}", node.start_mark
        )
    return _Include(path)


_Loader.add_constructor("!include", _construct_include)


class _Criterion(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    content: str = Field(min_length=1)
    weight: float
    type: str = Field(min_length=1, max_length=100)


def read_autoj_rubrics(path: Path) -> RubricBatch:
    """One rubric per scenario under ``path`` (the repository, ``scenario_criteria`` or
    ``specials``)."""
    specials = _specials_dir(path)
    files = sorted(specials.glob("*.yaml"))
    if not files:
        raise ValidationFailed(f"{path}: no scenario files (specials/*.yaml)")
    # The imported root: nothing outside it is read. Given the specials folder itself, its
    # parent (scenario_criteria), which holds the basics the scenarios include.
    root = (path.parent if specials == path and path.name == "specials" else path).resolve()
    basics: dict[Path, Any] = {}
    return RubricBatch("autoj", str(path), [_scenario(file, root, basics) for file in files])


def _specials_dir(path: Path) -> Path:
    for candidate in (path / SCENARIO_DIR / "specials", path / "specials", path):
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    raise ValidationFailed(
        f"{path}: expected the Auto-J repository or its scenario_criteria folder"
    )


def _scenario(file: Path, root: Path, basics: dict[Path, Any]) -> RubricSpec:
    resolved = file.resolve()
    if not resolved.is_relative_to(root):
        raise ValidationFailed(
            f"{file}: resolves to {resolved}, outside the imported folder {root}"
        )
    document = load_yaml(file, _Loader)
    if not isinstance(document, dict) or not document:
        raise ValidationFailed(f"{file}: expected a mapping of basics includes and 'extended'")
    sections: list[tuple[str, Any, Path]] = []
    includes = []
    for key, value in document.items():
        if isinstance(value, _Include):
            included = _resolve(file, value.path, root)
            if included not in basics:
                basics[included] = load_yaml(included, _Loader)
            sections.append((str(key), basics[included], included))
            includes.append({"key": str(key), "path": value.path})
        elif key != EXTENDED:
            raise ValidationFailed(f"{file}: {key!r}: expected 'extended' or an !include")
    # Basics first, in include order, then the scenario's own criteria (Auto-J's reading).
    if EXTENDED in document:
        sections.append((EXTENDED, document[EXTENDED], file))
    criteria = [
        criterion
        for section, items, source in sections
        for criterion in _criteria(section, items, source)
    ]
    with located(str(file)):
        return RubricSpec(
            name=f"autoj/{file.stem}",
            criteria=criteria,
            origin="imported",
            origin_detail={"source": "autoj", "path": str(file), "includes": includes},
        )


def _criteria(section: str, items: Any, source: Path) -> list[CriterionSpec]:
    if not isinstance(items, dict) or not items:
        raise ValidationFailed(f"{source}: {section}: expected a mapping of named criteria")
    criteria = []
    for name, data in items.items():
        location = f"{source}: {section}.{name}"
        if not isinstance(data, dict):
            raise ValidationFailed(f"{location}: expected {{content, weight, type}}")
        item = parse(_Criterion, location, data)
        with located(location):
            criteria.append(
                CriterionSpec(
                    text=item.content,
                    weight=item.weight,
                    theme=item.type,
                    tags=[f"name:{name}", f"from:{section}"],
                )
            )
    return criteria


def _resolve(file: Path, include: str, root: Path) -> Path:
    """The basics file an include names (relative to the repository root, an ancestor), with
    its symlinks resolved; it must lie inside ``root`` (resolved)."""
    relative = Path(include)
    if relative.is_absolute() or ".." in relative.parts:
        raise ValidationFailed(
            f"{file}: !include {include!r}: expected a path inside the repository, within the "
            f"imported folder {root}"
        )
    for base in file.resolve().parents:
        candidate = base / relative
        if candidate.is_file():
            resolved = candidate.resolve()
            if not resolved.is_relative_to(root):
                raise ValidationFailed(
                    f"{file}: !include {include!r}: resolves to {resolved}, outside the imported "
                    f"folder {root}"
                )
            return resolved
    raise ValidationFailed(f"{file}: !include {include!r}: no such file above {file.parent}")
