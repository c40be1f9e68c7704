"""A progress bar on stderr for long commands (scoring, following a job, drafting)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

from rubricsvc.cli.context import err_console


class BarUpdate(Protocol):
    def __call__(self, done: int, total: int, detail: str = "") -> None: ...


def _no_bar(done: int, total: int, detail: str = "") -> None:
    pass


@contextmanager
def progress_bar(label: str, enabled: bool, detail: bool = False) -> Iterator[BarUpdate]:
    """A progress bar on stderr, updated with ``(done, total[, detail])`` (a no-op when not
    ``enabled`` or without a terminal); ``detail`` adds a column for the detail text."""
    if not (enabled and sys.stderr.isatty()):
        yield _no_bar
        return
    columns: list[ProgressColumn] = [TextColumn(label), BarColumn(), MofNCompleteColumn()]
    if detail:
        columns.append(TextColumn("{task.fields[detail]}"))
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True) as progress:
        task = progress.add_task(label, total=None, detail="")

        def update(done: int, total: int, detail: str = "") -> None:
            progress.update(task, completed=done, total=total, detail=detail)

        yield update
