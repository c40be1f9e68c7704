"""``bm25s`` imported without numba, for every ranking this package does (evidence passages,
the deep-research environment's search).

``bm25s`` imports numba at its own import when numba is installed (vLLM's CPU build brings
it), and numba loads llvmlite. vLLM's CPU platform, when an engine starts in the same process,
walks every loaded module's objects and fails on llvmlite's function wrappers
(``'_lib_fn_wrapper' object has no attribute 'get'``): a process that had ranked passages
could no longer load a vLLM judge. bm25s's numpy backend ranks the same way, and the corpora
here are small, so numba is kept out of bm25s's import unless something else already loaded it.
"""

from __future__ import annotations

import sys
from typing import Any


def import_bm25s() -> Any:
    """``bm25s``, on its numpy backend where numba is not already loaded. ImportError as
    ``import bm25s`` raises it."""
    if "bm25s" in sys.modules or "numba" in sys.modules:
        import bm25s

        return bm25s
    # A None entry makes ``from numba import ...`` raise ImportError, which bm25s takes as
    # "numba not installed"; the entry is removed again so that others may import numba.
    sys.modules["numba"] = None  # type: ignore[assignment]
    try:
        import bm25s
    finally:
        del sys.modules["numba"]
    return bm25s
