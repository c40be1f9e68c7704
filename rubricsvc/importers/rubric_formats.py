"""Rubric-only imports: public rubric formats read into ``RubricSpec`` lists, then saved.

Every reader validates its whole source before anything is stored, and maps onto the same
internal model as the judged-data importers (the same rubric names and content for HealthBench
and DeepResearch Bench, so the two kinds of import recognise each other's rubrics).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy.orm import Session

from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.importers.autoj import read_autoj_rubrics
from rubricsvc.importers.common import ImportReport, RubricBatch, save_rubric_batch
from rubricsvc.importers.deepresearch_bench import read_deepresearch_bench_rubrics
from rubricsvc.importers.healthbench import read_healthbench_rubrics
from rubricsvc.importers.prometheus import read_prometheus_rubrics
from rubricsvc.rubrics.files import load_rubric_files

RUBRIC_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".jsonl")

RubricReader = Callable[[Path], RubricBatch]


def read_own_rubrics(path: Path) -> RubricBatch:
    """The project's own rubric files (as for ``rubrics add``): one file, or a folder of them."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in RUBRIC_FILE_SUFFIXES)
        if not files:
            raise ValidationFailed(f"{path}: no rubric files ({', '.join(RUBRIC_FILE_SUFFIXES)})")
    else:
        files = [path]
    return RubricBatch("rubricsvc", str(path), load_rubric_files(files))


RUBRIC_FORMATS: dict[str, RubricReader] = {
    "autoj": read_autoj_rubrics,
    "deepresearch-bench": read_deepresearch_bench_rubrics,
    "healthbench": read_healthbench_rubrics,
    "prometheus": read_prometheus_rubrics,
    "rubricsvc": read_own_rubrics,
}


def read_rubrics(format_name: str, path: Path) -> RubricBatch:
    """Every rubric of ``path`` in the format ``format_name``, validated."""
    try:
        reader = RUBRIC_FORMATS[format_name]
    except KeyError:
        known = ", ".join(sorted(RUBRIC_FORMATS))
        raise NotFoundError(f"no rubric format {format_name!r}; known: {known}") from None
    if not path.exists():
        raise ValidationFailed(f"{path}: no such file or folder")
    return reader(path)


def import_rubrics(session: Session, format_name: str, path: Path) -> ImportReport:
    """Read ``path`` and save its rubrics as drafts; the caller owns the transaction."""
    return save_rubric_batch(session, read_rubrics(format_name, path))
