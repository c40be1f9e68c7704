"""Run the real ``rubricsvc`` command in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any


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
