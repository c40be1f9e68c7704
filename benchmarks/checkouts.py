"""Another commit's code beside this checkout, for a benchmark that compares against it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def checkout(commit: str, workdir: Path) -> Iterator[Path]:
    """``commit`` checked out in a worktree under ``workdir``, removed afterwards."""
    path = workdir / "baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
            check=False, capture_output=True,
        )  # fmt: skip
