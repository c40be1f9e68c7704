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

from rubricsvc.config import get_settings
from rubricsvc.judging.embedded import embedded_model_dir, is_prepared

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


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
    target = embedded_model_dir(get_settings().judge.model_dir)
    if not is_prepared(target):
        unavailable(f"embedded model not prepared at {target}: run `rubricsvc models prepare`")
    return target
