"""B8 (b)'s driver (benchmarks/platform_time_driver.py) on a small workload: each path's
time per judgment, and SQLite's own share of it from the replayed statements, which must
redo the run's writes (the driver checks the judgments the replay added); and the same paths
on PostgreSQL, as B10 runs them. No figure is held to a speed here: benchmarks measure that."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "benchmarks" / "platform_time_driver.py"


@pytest.mark.slow  # 5-20 s here: left out of the inner loop (make test-fast), run by make test
def test_the_driver_reports_sqlites_share_of_each_path(tmp_path: Path) -> None:
    database = tmp_path / "platform.sqlite"
    done = subprocess.run(
        [sys.executable, str(DRIVER), str(database), "16", "2", "1", "--sqlite-floor"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    for path in ("score", "rewards", "route"):
        sqlite, writes = figures[f"{path}_sqlite_ms"], figures[f"{path}_sqlite_writes_ms"]
        assert figures[f"{path}_ms"] > 0 and 0 < writes <= sqlite, (path, figures)
    assert not list(tmp_path.glob("*.replay")), "the replayed copy is left behind"


def test_the_driver_runs_each_path_on_postgresql(make_postgres_database: Callable[[], str]) -> None:
    """B10 (``bench_postgres_time``) runs the same driver on an empty PostgreSQL database; the
    driver asserts each path judged every judgment it should."""
    url = make_postgres_database()
    done = subprocess.run(
        [sys.executable, str(DRIVER), url, "16", "2", "1"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(figures) == {"score_ms", "rewards_ms", "route_ms"}
    assert all(ms > 0 for ms in figures.values()), figures
