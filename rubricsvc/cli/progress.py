"""Progress on stderr for long commands (scoring, following a job, drafting): a bar on a
terminal, else (with ``lines``) a line each time another ``every`` percent is done."""

from __future__ import annotations

import sys
import time
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
def progress_bar(
    label: str, enabled: bool, detail: bool = False, lines: bool = False, every: int = 10
) -> Iterator[BarUpdate]:
    """A progress bar on stderr, updated with ``(done, total[, detail])`` (a no-op when not
    ``enabled``); ``detail`` adds a column for the detail text. Without a terminal there is no
    bar: with ``lines``, a plain line each time another ``every`` percent is done (so a log or
    a ``--json`` run piped elsewhere still shows how far it is), else nothing."""
    if not enabled:
        yield _no_bar
        return
    if not sys.stderr.isatty():
        yield _progress_lines(label, every) if lines else _no_bar
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


def _progress_lines(label: str, every: int) -> BarUpdate:
    """An update that writes ``label: done/total (P%), Ns`` to stderr when the share done
    first reaches a multiple of ``every`` percent (and once at the start)."""
    started = time.monotonic()
    shown: set[int] = set()

    def update(done: int, total: int, detail: str = "") -> None:
        if total <= 0:
            return
        step = min(100, done * 100 // total) // every * every
        if step in shown:
            return
        shown.add(step)
        extra = f" {detail}" if detail else ""
        elapsed = time.monotonic() - started
        sys.stderr.write(
            f"{label}: {done}/{total} ({done * 100 // total}%), {elapsed:.0f}s{extra}\n"
        )
        sys.stderr.flush()

    return update
