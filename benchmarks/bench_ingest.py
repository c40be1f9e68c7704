"""B9: adding completions in bulk (`rubricsvc completions add`, ``POST /v1/completions``).

Run: ``python -m benchmarks.bench_ingest [--records 10000] [--runs 3]
[--databases sqlite,postgres]`` (``make bench``).

The same driver (``benchmarks/ingest_driver.py``) runs in a process of its own on the
baseline commit (the last before completions were added in bulk, checked out with
``git worktree add``) and on this checkout, in turn, the order swapped every other round,
each on a fresh database and after the same warm-up (500 other records, added twice):
``--records`` new records naming 100 prompts by external id, then the same records again
(all unchanged). The ratio is the baseline's time over this checkout's, round by round.
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
BASELINE_COMMIT = "8261b5d8d4899e6f2be4da0a50f59fe703d3a3af"
DRIVER = Path(__file__).with_name("ingest_driver.py")
CASES = ("new", "again")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--databases", default=f"sqlite,{DEFAULT_POSTGRES}")
    args = parser.parse_args()

    kinds = args.databases.split(",")
    seconds: dict[str, dict[str, dict[str, list[float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp, checkout(BASELINE_COMMIT, Path(tmp)) as baseline:
        workdir = Path(tmp)
        for round_ in range(args.runs):
            for kind in kinds:
                name = "sqlite" if kind == "sqlite" else "postgresql"
                order = [("before", baseline), ("now", ROOT)]
                if round_ % 2:
                    order.reverse()
                for which, code in order:
                    url, drop = make_database(kind, workdir, f"ingest_{which}_{round_}")
                    try:
                        figures = run_driver(DRIVER, code, [url, str(args.records)], timeout=3600)
                    finally:
                        drop()
                    warm_up = figures.get("warm_up_records", 0)
                    for case in CASES:
                        seconds.setdefault(name, {}).setdefault(case, {}).setdefault(
                            which, []
                        ).append(figures[f"{case}_s"])
                    print(f"round {round_ + 1} {name} {which}: {figures}", flush=True)

    result: dict[str, Any] = {
        "baseline_commit": BASELINE_COMMIT,
        "records": args.records,
        "warm_up_records": warm_up,
        "runs": args.runs,
        "databases": {},
        "headlines": {},
    }
    labels = {"new": "new records", "again": "the same records again (unchanged)"}
    for name, cases in seconds.items():
        result["databases"][name] = {}
        for case, times in cases.items():
            ratios = [b / n for b, n in zip(times["before"], times["now"], strict=True)]
            result["databases"][name][case] = {
                "before_s": spread(times["before"]),
                "now_s": spread(times["now"]),
                "speedup": spread(ratios),
            }
            result["headlines"][f"{name}_{case}"] = headline(
                ratios,
                f"adding {args.records:,} completion records, {labels[case]}, {name}: the "
                "baseline commit's time over this checkout's",
            )
    print(json.dumps(result["databases"], indent=2))
    print(f"saved {save('ingest', result)}")


if __name__ == "__main__":
    main()
