"""A server process's heap after start-up: frozen, the young generation collected less often."""

from __future__ import annotations

import gc

from rubricsvc import heap


def test_settle_freezes_start_up_objects_and_raises_the_young_threshold():
    before = gc.get_threshold()
    gc.unfreeze()  # the test harness settles its own heap between modules (tests/conftest.py)
    gc.set_threshold(700, before[1], before[2])
    try:
        assert gc.get_freeze_count() == 0
        heap.settle()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, before[1], before[2])
        # Cycles made after start-up are still collected.
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
