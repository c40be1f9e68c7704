"""Rubric-only imports: public rubric formats read into ``RubricSpec`` lists, then saved.

Formats are chosen by name from one registry (``register_rubric_format``): the built-in ones
below are registered through the same call a plugin uses, so ``rubrics import --format`` takes
a plugin's format as it takes these. Every reader validates its whole source before anything
is stored, and maps onto the same internal model as the judged-data importers (the same rubric
names and content for HealthBench and DeepResearch Bench, so the two kinds of import recognise
each other's rubrics).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.importers.autoj import read_autoj_rubrics
from rubricsvc.importers.common import ImportReport, RubricBatch, save_rubric_batch
from rubricsvc.importers.deepresearch_bench import read_deepresearch_bench_rubrics
from rubricsvc.importers.healthbench import read_healthbench_rubrics
from rubricsvc.importers.prometheus import read_prometheus_rubrics
from rubricsvc.rubrics.files import load_rubric_files
from rubricsvc.rubrics.schemas import RubricSpec

RUBRIC_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".jsonl")

# Reads a file or folder into its rubrics, validated: a ``RubricBatch`` (with notes for the
# report), or the specs alone (the batch is then named after the format).
RubricReader = Callable[[Path], RubricBatch | Sequence[RubricSpec]]


@dataclass(frozen=True)
class RubricFormat:
    """A rubric format as registered: its reader and a line saying what it reads."""

    name: str
    reader: RubricReader
    about: str = ""


_FORMATS: dict[str, RubricFormat] = {}


def register_rubric_format(name: str, reader: RubricReader, *, about: str = "") -> RubricFormat:
    """Make ``reader`` the rubric format ``name`` (a name registered again is replaced);
    ``about`` is one line for listings."""
    if not name:
        raise ValueError(f"a rubric format needs a name: {reader!r}")
    registered = RubricFormat(name, reader, about)
    _FORMATS[name] = registered
    return registered


def rubric_format_names() -> list[str]:
    """Every registered rubric format's name, sorted."""
    return sorted(_FORMATS)


def read_own_rubrics(path: Path) -> RubricBatch:
    """The project's own rubric files (as for ``rubrics add``): one file, or a folder of them."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in RUBRIC_FILE_SUFFIXES)
        if not files:
            raise ValidationFailed(f"{path}: no rubric files ({', '.join(RUBRIC_FILE_SUFFIXES)})")
    else:
        files = [path]
    return RubricBatch("rubricsvc", str(path), load_rubric_files(files))


# The built-in formats, registered as a plugin's are.
register_rubric_format("autoj", read_autoj_rubrics, about="Auto-J's scenario criteria")
register_rubric_format(
    "deepresearch-bench", read_deepresearch_bench_rubrics, about="DeepResearch Bench criteria"
)
register_rubric_format("healthbench", read_healthbench_rubrics, about="HealthBench rubrics")
register_rubric_format("prometheus", read_prometheus_rubrics, about="Prometheus score rubrics")
register_rubric_format("rubricsvc", read_own_rubrics, about="the project's own rubric files")


def read_rubrics(format_name: str, path: Path) -> RubricBatch:
    """Every rubric of ``path`` in the format ``format_name``, validated."""
    registered = _FORMATS.get(format_name)
    if registered is None:
        known = ", ".join(rubric_format_names())
        raise NotFoundError(f"no rubric format {format_name!r}; known: {known}")
    if not path.exists():
        raise ValidationFailed(f"{path}: no such file or folder")
    read = registered.reader(path)
    if isinstance(read, RubricBatch):
        return read
    specs = list(read)
    if not all(isinstance(spec, RubricSpec) for spec in specs):
        raise ValidationFailed(
            f"rubric format {format_name!r} read something other than rubric specs from {path}"
        )
    return RubricBatch(format_name, str(path), specs)


def import_rubrics(session: Session, format_name: str, path: Path) -> ImportReport:
    """Read ``path`` and save its rubrics as drafts; the caller owns the transaction."""
    return save_rubric_batch(session, read_rubrics(format_name, path))
