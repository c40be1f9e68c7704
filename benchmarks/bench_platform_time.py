"""B8 (b): the platform's own time per judgment, with a backend that answers at once.

Run: ``python -m benchmarks.bench_platform_time [--rollouts 256] [--runs 3] [--baseline COMMIT]``
(``make bench``).

With an instant backend (every call answered at once with a fixed verdict) all of a run's time
is the platform's own: selecting the work, the cache lookup, building prompts, parsing,
storing judgments and scores, aggregating. Its inverse is the ceiling of judgments per second
one process can reach whatever the judge: on a GPU whose engine answers one-token verdicts
faster than that, the platform is the bottleneck.

Three paths, each on ``--rollouts`` new completions of one prompt against a four-criterion
rubric (criterion-prob, one judgment per criterion), on a fresh SQLite database per process:

- ``score()``: the completions stored beforehand, then scored (the batch path: CLI, jobs);
- the reward path: ``compute_rewards`` with the rollouts as (prompt id, text) pairs, storing
  them on the way;
- a reward route's batch: what both reward routes run per gathered batch, without HTTP: the
  batch's work bounded (``api.max_reward_judgments``), then ``compute_rewards``. The baseline's
  routes planned the batch for the bound, then again to judge it; this checkout's bound the
  plan they judge (``compute_rewards``'s ``admit``).

"Before" is the code of ``BASELINE_COMMIT`` (the start of the reward-serving work; another
commit with ``--baseline``, to measure a change against the commit it starts from), checked
out with ``git worktree add``, "now" this checkout; each runs in a process of its own with
the same driver, the same warm-up (one run of each path) and the same items, and they
take turns for ``--runs`` rounds, the order swapped every other round. "Now" settles its heap
after warm-up as its server does (``rubricsvc.heap``); a third process of this checkout leaves
it to the interpreter's default collector, as the baseline does, so the code's own gain is
seen apart from the collector's. Each process reports
the median of three measured runs of each path. Scaling with processes: two "now" processes
at once, each on its own SQLite file, against one alone in the same round (the machine has
two cores).

SQLite's own share: after its measured runs, the "now" process runs each path again with
every statement it sends SQLite captured (its parameters as the driver got them) and replays
them on a raw connection to a copy of the database as it was when that run began, then
commits: SQLite's time for the path's statements, all of them and the writes alone
(``now_sqlite_ms``, ``now_sqlite_writes_ms``). Beside it, the time per judgment a ceiling 5x
the baseline's allows (``five_x_budget_ms``, the baseline's time over 5, round by round).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.checkouts import checkout
from benchmarks.results import headline, save, spread

ROOT = Path(__file__).resolve().parents[1]
BASELINE_COMMIT = "b42cf52e65bf8a38769d18907134d9a15634c24b"
CRITERIA = 4
MEASURED_RUNS = 3

# Run by path in a fresh interpreter, the checkout under test first on the path.
DRIVER = Path(__file__).with_name("platform_time_driver.py")


def start(
    code: Path, database: Path, rollouts: int, settle: bool = True, sqlite_floor: bool = False
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    args = [str(database), str(rollouts), str(CRITERIA), str(MEASURED_RUNS)]
    if not settle:
        args.append("--default-collector")
    if sqlite_floor:
        args.append("--sqlite-floor")
    return subprocess.Popen(
        [sys.executable, str(DRIVER), *args],
        cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen[str]) -> dict[str, float]:
    out, err = process.communicate(timeout=1800)
    if process.returncode != 0:
        raise SystemExit(f"the driver failed:\n{err[-4000:]}")
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def measure(
    code: Path,
    workdir: Path,
    rollouts: int,
    processes: int = 1,
    settle: bool = True,
    sqlite_floor: bool = False,
) -> list[dict[str, float]]:
    """The driver's figures from ``processes`` processes of ``code`` run at once; ``settle``:
    the process settles its heap after warm-up as its server does (else the interpreter's
    default collector throughout); ``sqlite_floor``: it also replays what each path sent
    SQLite (the driver's ``--sqlite-floor``), after its measured runs."""
    running = []
    for n in range(processes):
        database = workdir / f"{code.name}-{n}-{os.urandom(4).hex()}.sqlite"
        running.append(start(code, database, rollouts, settle, sqlite_floor))
    return [finish(process) for process in running]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--baseline", default=BASELINE_COMMIT, help="the commit 'before' runs (a hash or name)"
    )
    args = parser.parse_args()

    paths = ("score", "rewards", "route")
    before: dict[str, list[float]] = {p: [] for p in paths}
    now: dict[str, list[float]] = {p: [] for p in paths}
    # This checkout with the interpreter's default collector, as the baseline runs: the code's
    # own gain apart from the settled heap's.
    now_default: dict[str, list[float]] = {p: [] for p in paths}
    # SQLite's own time for what "now" sent it (all statements, and the writes alone), and
    # the time per judgment 5x the baseline's ceiling allows.
    sqlite_all: dict[str, list[float]] = {p: [] for p in paths}
    sqlite_writes: dict[str, list[float]] = {p: [] for p in paths}
    five_x_budget: dict[str, list[float]] = {p: [] for p in paths}
    ceiling_ratio: dict[str, list[float]] = {p: [] for p in paths}
    scaling: dict[str, list[float]] = {p: [] for p in paths}
    with tempfile.TemporaryDirectory() as tmp, checkout(args.baseline, Path(tmp)) as baseline:
        workdir = Path(tmp)
        for round_ in range(args.runs):
            order = [("before", baseline, True), ("now", ROOT, True), ("default", ROOT, False)]
            if round_ % 2:
                order.reverse()
            figures = {
                name: measure(
                    code, workdir, args.rollouts, settle=settle, sqlite_floor=name == "now"
                )[0]
                for name, code, settle in order
            }
            pair = measure(ROOT, workdir, args.rollouts, processes=2)
            for path in paths:
                key = f"{path}_ms"
                before[path].append(figures["before"][key])
                now[path].append(figures["now"][key])
                now_default[path].append(figures["default"][key])
                ceiling_ratio[path].append(figures["before"][key] / figures["now"][key])
                sqlite_all[path].append(figures["now"][f"{path}_sqlite_ms"])
                sqlite_writes[path].append(figures["now"][f"{path}_sqlite_writes_ms"])
                five_x_budget[path].append(figures["before"][key] / 5)
                # Judgments/s of two processes at once over one alone (this round's "now").
                together = sum(1000 / f[key] for f in pair)
                scaling[path].append(together / (1000 / figures["now"][key]))
            print(f"round {round_ + 1}: before {figures['before']}, now {figures['now']}, "
                  f"now with the default collector {figures['default']}, two at once {pair}",
                  flush=True)  # fmt: skip

    judgments = args.rollouts * CRITERIA
    labels = {
        "score": "score()",
        "rewards": "the reward path (compute_rewards)",
        "route": "a reward route's batch (its work bounded, then judged)",
    }
    result: dict[str, Any] = {
        "baseline_commit": args.baseline,
        "rollouts": args.rollouts,
        "criteria": CRITERIA,
        "judgments": judgments,
        "runs": args.runs,
        "measured_runs_per_process": MEASURED_RUNS,
        "paths": {
            path: {
                "before_ms": spread(before[path], 4),
                "now_ms": spread(now[path], 4),
                "now_default_collector_ms": spread(now_default[path], 4),
                "now_sqlite_ms": spread(sqlite_all[path], 4),
                "now_sqlite_writes_ms": spread(sqlite_writes[path], 4),
                "five_x_budget_ms": spread(five_x_budget[path], 4),
                "now_ceiling_per_s": spread([1000 / ms for ms in now[path]], 0),
                "ceiling_ratio": spread(ceiling_ratio[path]),
                "two_processes_scaling": spread(scaling[path]),
            }
            for path in paths
        },
        "headlines": {},
    }
    for path in paths:
        result["headlines"][f"{path}_ms"] = headline(
            now[path],
            f"the platform's own time per judgment in {labels[path]}, instant backend, "
            f"{judgments} criterion-prob judgments, SQLite",
            unit="ms",
            at_most=0.1,
            digits=4,
        )
        result["headlines"][f"{path}_ceiling"] = headline(
            ceiling_ratio[path],
            f"judgments/s ceiling of one process in {labels[path]}, this checkout over the "
            "baseline commit",
            at_least=5.0,
        )
    print(json.dumps(result["paths"], indent=2))
    print(f"saved {save('platform_time', result)}")


if __name__ == "__main__":
    main()
