"""The garbage collector's settings for a long-running process (a server, a worker).

CPython's cycle collector runs its youngest generation every 700 allocations, and now and
then a full collection that walks every object the process holds. A server holds hundreds of
thousands of objects that live as long as it does (modules, the app, settings, a judge's
model), so a full collection costs tens of milliseconds, and a burst of reward requests
allocates enough to start several. ``settle`` is called once start-up is done: what exists
then is moved out of the collector's sight (``gc.freeze``) and the youngest generation is
collected every ``YOUNG_THRESHOLD`` allocations. Reference counting still frees most garbage
at once; cycles are still collected, a little later.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000


def settle() -> None:
    """Freeze what start-up made and collect the young less often (once per process)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
