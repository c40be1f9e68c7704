"""What a test needs from the machine: skip with a reason that says how to provide it, except
with ``CI=true``, where every part is installed or started by the project and a missing one fails.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

from rubricsvc.backends.embedded import embedded_model_dir, is_prepared
from rubricsvc.config import get_settings

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# What a test may need beyond this process and a SQLite file, by the marker that says so.
# `make test-fast` deselects tests carrying any of them; a test that uses one of these without
# its marker fails (``uses``), so the markers cannot drift from what the tests do.
RESOURCE_MARKERS = {
    "model": "the embedded judge model",
    "postgres": "the PostgreSQL server",
    "broker": "a Redis or RabbitMQ broker",
    "browser": "Chromium",
    "netns": "network namespaces (ip netns, veth, a bridge: root on Linux)",
}
# Fixtures that need a resource: a test using one (directly or through another fixture) gets
# the marker at collection (tests/conftest.py), so only direct uses need a hand-written mark.
FIXTURE_MARKERS = {
    "postgres_server": ("postgres",),
    "make_cluster": ("postgres", "broker"),
    "redis_client": ("broker",),
    "browser": ("browser",),
    "network": ("netns",),
}

# Every test collected in this run, before any is deselected (tests/conftest.py).
COLLECTED: list[pytest.Item] = []
# The test being run (set by tests/conftest.py around each test's setup, call and teardown).
CURRENT_TEST: list[pytest.Item] = []


def uses(marker: str) -> None:
    """Fail the running test if it lacks ``marker``: what it is about to use needs it."""
    if not CURRENT_TEST:
        return
    item = CURRENT_TEST[-1]
    if item.get_closest_marker(marker) is None:
        pytest.fail(
            f"{item.nodeid} uses {RESOURCE_MARKERS[marker]} but is not marked `{marker}`: "
            f"add @pytest.mark.{marker} (`make test-fast` leaves marked tests out)",
            pytrace=False,
        )


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``; with CI=true, fail instead."""
    if IN_CI:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_module(module: str, extra: str) -> ModuleType:
    """``module`` imported, or unavailable with the extra that installs it."""
    if importlib.util.find_spec(module) is None:
        unavailable(f"{module} is not installed (`make test` installs the {extra} extra)")
    return importlib.import_module(module)


def prepared_model_dir() -> Path:
    """The embedded model folder `make test` prepares, or unavailable saying how to prepare it."""
    uses("model")
    target = embedded_model_dir(get_settings().judge.model_dir)
    if not is_prepared(target):
        unavailable(f"embedded model not prepared at {target}: run `rubricsvc models prepare`")
    return target
