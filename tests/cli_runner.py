"""Run the real ``rubricsvc`` command as a user would: its entry point, arguments, environment,
exit code and both output streams.

By default a command runs in this test process (its entry point ``main`` with ``sys.argv`` and
the environment set, stdin empty, stdout and stderr captured, process-wide caches cleared before
and after): a subprocess would pay a full import, about 2 s, on each of hundreds of calls.
``serve`` and ``worker`` always run in a subprocess (they serve until stopped), and so does
every command when ``RUBRICSVC_TEST_CLI=subprocess`` (the whole suite can run that way) or
``subprocess=True`` (the smoke tests that check the installed command itself).
"""

from __future__ import annotations

import json
import os
import subprocess as subprocesses
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DEMO_RUBRICS = ("demo/sleep-advice", "demo/explain-recursion", "demo/haiku-autumn")
# Commands that run until stopped: only ever in a process of their own.
SUBPROCESS_COMMANDS = frozenset({"serve", "worker"})
ALWAYS_SUBPROCESS = os.environ.get("RUBRICSVC_TEST_CLI", "").lower() == "subprocess"


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(
    *args: str,
    database_url: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    subprocess: bool = False,
) -> CliResult:
    full_env = {
        **os.environ,
        "RUBRICSVC_DATABASE_URL": database_url,
        "COLUMNS": "200",
        **(env or {}),
    }
    if subprocess or ALWAYS_SUBPROCESS or (args and args[0] in SUBPROCESS_COMMANDS):
        proc = subprocesses.run(
            [sys.executable, "-m", "rubricsvc", *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)
    return _run_in_process(args, full_env)


# One command at a time: the environment and the standard streams are the process's.
_IN_PROCESS = threading.Lock()


def _run_in_process(args: tuple[str, ...], env: dict[str, str]) -> CliResult:
    from click.testing import CliRunner

    from rubricsvc.cli import main

    # The environment exactly as given: variables it leaves out are unset while it runs.
    changes: dict[str, str | None] = {key: None for key in os.environ if key not in env}
    changes.update(env)
    argv = sys.argv
    with _IN_PROCESS, CliRunner().isolation(env=changes) as (stdout, stderr, _):
        _reset_process_state()
        sys.argv = ["rubricsvc", *args]
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if isinstance(exit_.code, str):
                print(exit_.code, file=sys.stderr)
        except BaseException:  # what the interpreter would print, and its exit code
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.argv = argv
            _reset_process_state()
        out, err = stdout.getvalue(), stderr.getvalue()
    return CliResult(code, out.decode(errors="replace"), err.decode(errors="replace"))


def _reset_process_state() -> None:
    """Forget what a command cached from its environment (settings, its database engine, the
    consoles' width: rich reads COLUMNS once, when the console is made at import, and this
    process may have imported the CLI under another environment)."""
    from rubricsvc.cli import context
    from rubricsvc.config import get_settings

    columns = os.environ.get("COLUMNS", "")
    for console in (context.console, context.err_console):
        console.width = int(columns) if columns.isdigit() else 80  # rich's own fallback

    if context.engine.cache_info().currsize:
        context.engine().dispose()
    context.engine.cache_clear()
    get_settings.cache_clear()


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
