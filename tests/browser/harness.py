"""`rubricsvc serve` as a subprocess on a loopback port, and what the browser tests need to
find and launch Debian's Chromium (Playwright never downloads a browser here)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

from tests.servers import ServerFailed, free_port

# Never send the loopback requests through a proxy from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps calling Google's services, which a
# closed network refuses (slowly); no sandbox because the tests may run as root in a container.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """Debian's Chromium, or one on PATH; None when there is none."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    return shutil.which("chromium")


def browser_missing_reason() -> str | None:
    """Why the browser tests cannot run here (saying how to fix it), or None."""
    if chromium_path() is None:
        return (
            "Chromium is not installed (no /usr/bin/chromium, none on PATH): `make test` "
            "installs it, or run `apt-get install chromium`"
        )
    if importlib.util.find_spec("playwright") is None:
        return (
            "Playwright for Python is not installed: `make test` installs it (the dev extra), "
            "or run `pip install playwright` (never `playwright install`: it uses the "
            "system's Chromium)"
        )
    return None


def rubricsvc_command() -> list[str]:
    """The `rubricsvc` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("rubricsvc")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "rubricsvc"]


class RubricsvcServer:
    """`rubricsvc serve --host 127.0.0.1 --port P` on one database, its log in a file."""

    def __init__(self, database_url: str, *, log_path: Path, env: dict[str, str]) -> None:
        self.database_url = database_url
        self.log_path = log_path
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def command(self) -> list[str]:
        return [*rubricsvc_command(), "serve", "--host", "127.0.0.1", "--port", str(self.port)]

    def start(self, timeout: float = 60) -> None:
        """Start the server and wait until /healthz answers, or raise ``ServerFailed``."""
        env = {
            key: value
            for key, value in os.environ.items()
            # Settings of the developer's shell that would change what the pages do.
            if not key.startswith(("RUBRICSVC_API_", "RUBRICSVC_BROKER_", "RUBRICSVC_SCORING_"))
        }
        env.update({"RUBRICSVC_DATABASE_URL": self.database_url, **self.extra_env})
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            # Not the checkout: a developer's .env there must not reach the server.
            cwd=self.log_path.parent,
            start_new_session=True,
        )
        try:
            self._wait_ready(timeout)
        except ServerFailed:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise ServerFailed(f"rubricsvc serve exited with code {code}:\n{self.log_tail()}")
            if self._healthy():
                return
            time.sleep(0.2)
        raise ServerFailed(f"rubricsvc serve not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            with _DIRECT.open(f"{self.base_url}/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server: politely first, then by force."""
        process = self.process
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=15)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None
