"""Run the real ``rubricsvc`` command in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEMO_RUBRICS = ("demo/sleep-advice", "demo/explain-recursion", "demo/haiku-autumn")


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(
    *args: str, database_url: str, env: dict[str, str] | None = None, timeout: float = 300
) -> CliResult:
    full_env = {
        **os.environ,
        "RUBRICSVC_DATABASE_URL": database_url,
        "COLUMNS": "200",
        **(env or {}),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "rubricsvc", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def cli_ok(
    *args: str, database_url: str, env: dict[str, str] | None = None, timeout: float = 300
) -> CliResult:
    """``run_cli``, asserting the command succeeded (its stderr is the failure's message)."""
    result = run_cli(*args, database_url=database_url, env=env, timeout=timeout)
    assert result.code == 0, result.stderr
    return result


def cli_error(*args: str, database_url: str, env: dict[str, str] | None = None) -> str:
    """``run_cli``, asserting the command failed; its stderr, stripped."""
    result = run_cli(*args, database_url=database_url, env=env)
    assert result.code != 0, result.stdout
    return result.stderr.strip()


def add_examples(database_url: str) -> None:
    """The demo's rubrics (approved) and completions, added with the command."""
    cli_ok("rubrics", "add", str(EXAMPLES / "rubrics.yaml"), database_url=database_url)
    cli_ok("completions", "add", str(EXAMPLES / "completions.jsonl"), database_url=database_url)
    cli_ok("rubrics", "approve", *DEMO_RUBRICS, database_url=database_url)
