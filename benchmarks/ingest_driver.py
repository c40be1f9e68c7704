"""The ingestion benchmark's driver: one process adding completion records to a database.

Run by path by ``bench_ingest`` with the checkout under test first on ``PYTHONPATH`` (this
folder holds no ``rubricsvc``, so the checkout's is imported); it uses only what both the
baseline commit and this checkout have. On a fresh database it stores ``PROMPTS`` prompts
and warms up (``WARM_UP`` other records added, then again, untimed: imports, the engine's
connections, statement caches), then times ``add_completions`` over ``RECORDS`` new records
naming them by external id (one transaction, committed), then over the same records again
(all unchanged). Prints one JSON line: ``{"new_s": ..., "again_s": ..., "warm_up_records":
...}``.

Usage: ``python benchmarks/ingest_driver.py DATABASE_URL RECORDS``
"""

from __future__ import annotations

import json
import sys
import time

from sqlalchemy import Engine

from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.db import make_engine, session_scope, upgrade
from rubricsvc.prompts import store_prompt

PROMPTS = 100
WARM_UP = 500


def records(count: int, tag: str = "c") -> list[tuple[str, CompletionRecord]]:
    """``count`` records of ``PROMPTS`` prompts, each with its own external id (``tag`` and
    its number) and text, as a completions file gives them."""
    return [
        (
            f"line {n + 1}",
            CompletionRecord(
                prompt_external_id=f"p{n % PROMPTS}",
                external_id=f"{tag}{n}",
                text=f"Answer {tag}{n}: keep a regular schedule and a dark, cool bedroom. " * 4,
                source="bench",
            ),
        )
        for n in range(count)
    ]


def timed_add(engine: Engine, batch: list[tuple[str, CompletionRecord]]) -> tuple[float, int]:
    started = time.perf_counter()
    with session_scope(engine) as session:
        added = add_completions(session, batch).added
    return time.perf_counter() - started, added


def main() -> None:
    url, count = sys.argv[1], int(sys.argv[2])
    upgrade(url)
    engine = make_engine(url)
    with session_scope(engine) as session:
        for n in range(PROMPTS):
            store_prompt(
                session, [{"role": "user", "content": f"Question {n}?"}], external_id=f"p{n}"
            )
    warm_up = records(WARM_UP, tag="w")
    assert [timed_add(engine, warm_up)[1] for _ in range(2)] == [WARM_UP, 0]
    batch = records(count)
    new_s, added = timed_add(engine, batch)
    again_s, added_again = timed_add(engine, batch)
    assert (added, added_again) == (count, 0), (added, added_again)
    engine.dispose()
    print(json.dumps({"new_s": new_s, "again_s": again_s, "warm_up_records": WARM_UP}))


if __name__ == "__main__":
    main()
