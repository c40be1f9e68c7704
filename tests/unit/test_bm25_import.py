"""bm25s is imported without numba: a process that ranked passages can still start vLLM's
CPU engine, which fails on llvmlite's objects when numba is loaded (rubricsvc/bm25.py)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from rubricsvc.bm25 import import_bm25s
bm25s = import_bm25s()
index = bm25s.BM25()
index.index(bm25s.tokenize(["the sea is blue", "the sky is grey"], show_progress=False), show_progress=False)
print(index.backend, "llvmlite" in sys.modules, "numba" in sys.modules)
import numba  # still importable by whoever wants it
"""


def test_bm25s_ranks_on_numpy_and_leaves_llvmlite_unloaded() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["numpy", "False", "False"]
