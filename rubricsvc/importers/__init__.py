"""Importers of public benchmarks into prompts, rubrics, completions, judgments and scores."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy.orm import Session

from rubricsvc.errors import NotFoundError
from rubricsvc.importers.common import ImportReport
from rubricsvc.importers.deepresearch_bench import import_deepresearch_bench
from rubricsvc.importers.healthbench import import_healthbench

Importer = Callable[[Session, Path], ImportReport]

IMPORTERS: dict[str, Importer] = {
    "healthbench": import_healthbench,
    "deepresearch-bench": import_deepresearch_bench,
}


def get_importer(name: str) -> Importer:
    """The importer registered as ``name``."""
    try:
        return IMPORTERS[name]
    except KeyError:
        known = ", ".join(sorted(IMPORTERS))
        raise NotFoundError(f"no importer named {name!r}; known: {known}") from None


__all__ = ["IMPORTERS", "ImportReport", "Importer", "get_importer"]
