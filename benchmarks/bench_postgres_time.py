"""B10: the platform's own time per judgment on PostgreSQL, with a backend that answers at once.

Run: ``python -m benchmarks.bench_postgres_time [--rollouts 256] [--runs 3] [--postgres URL]``
(``make bench``).

B8 (b)'s driver and paths (``platform_time_driver.py``: ``score()`` over stored completions,
the reward path ``compute_rewards`` storing its rollouts, and a reward route's batch), each on
``--rollouts`` new completions of one prompt against a four-criterion rubric, criterion-prob,
an instant backend: every second of a run is the platform's own. Each process has a fresh
PostgreSQL database of its own on the server of ``--postgres`` (migrated by the driver).

"Before" is the code of ``BASELINE_COMMIT``, the commit before statements were sent with
PostgreSQL's own ``$1`` placeholders (psycopg's ``RawCursor``: psycopg no longer rewrites
each statement in Python, which it could not cache for long batched statements) and before
every session planned its statements with their values; "now" is this checkout. Each runs
in a process of its own with the same driver, the same warm-up (one run of each path), the
same items and a settled heap, and they take turns for ``--runs`` rounds, the order swapped
every other round. Each process reports the median of three measured runs of each path; the
ratio is taken within a round.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.bench_api_load import DEFAULT_POSTGRES, make_database
from benchmarks.checkouts import checkout, run_driver
from benchmarks.results import headline, save, spread

ROOT = Path(__file__).resolve().parents[1]
BASELINE_COMMIT = "f6472ccd2f9faeb14b2ef0b565e2978500c0cc48"
CRITERIA = 4
MEASURED_RUNS = 3
PATHS = ("score", "rewards", "route")
LABELS = {
    "score": "score()",
    "rewards": "the reward path (compute_rewards)",
    "route": "a reward route's batch (its work bounded, then judged)",
}
# Run by path in a fresh interpreter, the checkout under test first on the path.
DRIVER = Path(__file__).with_name("platform_time_driver.py")


def driver_args(url: str, rollouts: int) -> list[str]:
    return [url, str(rollouts), str(CRITERIA), str(MEASURED_RUNS)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    args = parser.parse_args()

    ms: dict[str, dict[str, list[float]]] = {p: {"before": [], "now": []} for p in PATHS}
    with tempfile.TemporaryDirectory() as tmp, checkout(BASELINE_COMMIT, Path(tmp)) as baseline:
        for round_ in range(args.runs):
            order = [("before", baseline), ("now", ROOT)]
            if round_ % 2:
                order.reverse()
            for which, code in order:
                url, drop = make_database(args.postgres, Path(tmp), f"pgtime_{which}_{round_}")
                try:
                    figures = run_driver(
                        DRIVER, code, driver_args(url, args.rollouts), timeout=1800
                    )
                finally:
                    drop()
                for path in PATHS:
                    ms[path][which].append(figures[f"{path}_ms"])
                print(f"round {round_ + 1} {which}: {figures}", flush=True)

    judgments = args.rollouts * CRITERIA
    result: dict[str, Any] = {
        "baseline_commit": BASELINE_COMMIT,
        "rollouts": args.rollouts,
        "criteria": CRITERIA,
        "judgments": judgments,
        "runs": args.runs,
        "measured_runs_per_process": MEASURED_RUNS,
        "paths": {},
        "headlines": {},
    }
    for path in PATHS:
        times = ms[path]
        ratios = [b / n for b, n in zip(times["before"], times["now"], strict=True)]
        result["paths"][path] = {
            "before_ms": spread(times["before"], 4),
            "now_ms": spread(times["now"], 4),
            "speedup": spread(ratios),
        }
        result["headlines"][path] = headline(
            ratios,
            f"the platform's own time per judgment in {LABELS[path]}, instant backend, "
            f"{judgments} criterion-prob judgments, PostgreSQL: the baseline commit's over "
            "this checkout's",
        )
    print(json.dumps(result["paths"], indent=2))
    print(f"saved {save('postgres_time', result)}")


if __name__ == "__main__":
    main()
