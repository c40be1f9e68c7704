"""Another commit's code beside this checkout, for a benchmark that compares against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def run_driver(driver: Path, code: Path, args: list[str], timeout: float) -> dict[str, float]:
    """Run the script ``driver`` in a fresh interpreter with the checkout ``code`` first on the
    path, and read the figures it prints as JSON on its last line."""
    done = subprocess.run(
        [sys.executable, str(driver), *args],
        cwd=code, env={**os.environ, "PYTHONPATH": str(code)},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the driver failed:\n{done.stderr[-4000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures
