"""B8 (b): the platform's own time per judgment, with a backend that answers at once.

Run: ``python -m benchmarks.bench_platform_time [--rollouts 256] [--runs 3]`` (``make bench``).

With an instant backend (every call answered at once with a fixed verdict) all of a run's time
is the platform's own: selecting the work, the cache lookup, building prompts, parsing,
storing judgments and scores, aggregating. Its inverse is the ceiling of judgments per second
one process can reach whatever the judge: on a GPU whose engine answers one-token verdicts
faster than that, the platform is the bottleneck.

Two paths, each on ``--rollouts`` new completions of one prompt against a four-criterion
rubric (criterion-prob, one judgment per criterion), on a fresh SQLite database per process:

- ``score()``: the completions stored beforehand, then scored (the batch path: CLI, jobs);
- the reward path: ``compute_rewards`` with the rollouts as (prompt id, text) pairs, storing
  them on the way (what both reward routes run per gathered batch, without HTTP).

"Before" is the code of ``BASELINE_COMMIT`` (the start of the reward-serving work, checked
out with ``git worktree add``), "now" this checkout; each runs in a process of its own with
the same driver, the same warm-up (one run of each path) and the same items, and the two
take turns for ``--runs`` rounds, the order swapped every other round. Each process reports
the median of three measured runs of each path. Scaling with processes: two "now" processes
at once, each on its own SQLite file, against one alone in the same round (the machine has
two cores).
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

# Run in a fresh interpreter with the checkout under test first on the path; uses only what
# both checkouts have (score, compute_rewards, add_completions, the rubric service).
DRIVER = r"""
import json, statistics, sys, time
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.db import make_engine, session_scope, upgrade
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.judging.types import ChoiceResult
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.service import approve, save_rubric
from rubricsvc.scoring.rewards import RewardRequest, compute_rewards
from rubricsvc.scoring.selection import Selection
from rubricsvc.scoring.service import ScoreOptions, score

database, rollouts, criteria, measured = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


class Instant:
    name = "instant"
    model = "instant"

    def __init__(self):
        self.seconds = 0.0

    def choice_probs(self, requests):
        started = time.perf_counter()
        answers = [ChoiceResult({"Yes": 0.9, "No": 0.1}, 10) for _ in requests]
        self.seconds += time.perf_counter() - started
        return answers

    def generate(self, requests):
        raise NotImplementedError

    def close(self):
        pass


url = f"sqlite:///{database}"
upgrade(url)
engine = make_engine(url)
with session_scope(engine) as session:
    spec = RubricSpec.model_validate({
        "name": "bench/platform",
        "prompt": {"external_id": "p-platform", "text": "How can I sleep better?"},
        "criteria": [{"text": f"Recommends habit number {i} for better sleep", "weight": 1}
                     for i in range(criteria)],
    })
    approve(session, save_rubric(session, spec).version)
judge = JudgeSpec(name="instant", backend="scripted", mode=VerdictMode.CRITERION_PROB)
backend = Instant()
texts = lambda tag: [f"{tag}: keep a regular schedule, rollout {i}." for i in range(rollouts)]


def score_path(tag):
    with session_scope(engine) as session:
        records = [("bench", CompletionRecord(prompt_external_id="p-platform", text=t,
                                              external_id=f"{tag}-{i}"))
                   for i, t in enumerate(texts(tag))]
        add_completions(session, records)
    with session_scope(engine) as session:
        from rubricsvc.models import Completion
        from sqlalchemy import select
        ids = tuple(session.scalars(select(Completion.id).where(
            Completion.external_id.like(f"{tag}-%"))))
    backend.seconds = 0.0
    started = time.perf_counter()
    with session_scope(engine) as session:
        report = score(session, judge, Selection(completion_ids=ids), ScoreOptions(),
                       lambda: backend)
    elapsed = time.perf_counter() - started
    assert report.computed == rollouts * criteria, report
    return elapsed - backend.seconds


def reward_path(tag):
    backend.seconds = 0.0
    requests = [RewardRequest(completion=t, prompt_id="p-platform") for t in texts(tag)]
    started = time.perf_counter()
    with session_scope(engine) as session:
        batch = compute_rewards(session, judge, requests, ScoreOptions(), lambda _: lambda: backend)
    elapsed = time.perf_counter() - started
    assert batch.computed == rollouts * criteria and None not in batch.rewards
    return elapsed - backend.seconds


score_path("warm-score")
reward_path("warm-reward")
judgments = rollouts * criteria
result = {
    "score_ms": statistics.median(1000 * score_path(f"s{k}") / judgments for k in range(measured)),
    "rewards_ms": statistics.median(1000 * reward_path(f"r{k}") / judgments for k in range(measured)),
}
print(json.dumps(result))
"""


def start(code: Path, database: Path, rollouts: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    args = [str(database), str(rollouts), str(CRITERIA), str(MEASURED_RUNS)]
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, *args],
        cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen[str]) -> dict[str, float]:
    out, err = process.communicate(timeout=1800)
    if process.returncode != 0:
        raise SystemExit(f"the driver failed:\n{err[-4000:]}")
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def measure(code: Path, workdir: Path, rollouts: int, processes: int = 1) -> list[dict[str, float]]:
    """The driver's figures from ``processes`` processes of ``code`` run at once."""
    running = []
    for n in range(processes):
        database = workdir / f"{code.name}-{n}-{os.urandom(4).hex()}.sqlite"
        running.append(start(code, database, rollouts))
    return [finish(process) for process in running]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    paths = ("score", "rewards")
    before: dict[str, list[float]] = {p: [] for p in paths}
    now: dict[str, list[float]] = {p: [] for p in paths}
    ceiling_ratio: dict[str, list[float]] = {p: [] for p in paths}
    scaling: dict[str, list[float]] = {p: [] for p in paths}
    with tempfile.TemporaryDirectory() as tmp, checkout(BASELINE_COMMIT, Path(tmp)) as baseline:
        workdir = Path(tmp)
        for round_ in range(args.runs):
            order = [("before", baseline), ("now", ROOT)]
            if round_ % 2:
                order.reverse()
            figures = {name: measure(code, workdir, args.rollouts)[0] for name, code in order}
            pair = measure(ROOT, workdir, args.rollouts, processes=2)
            for path in paths:
                key = f"{path}_ms"
                before[path].append(figures["before"][key])
                now[path].append(figures["now"][key])
                ceiling_ratio[path].append(figures["before"][key] / figures["now"][key])
                # Judgments/s of two processes at once over one alone (this round's "now").
                together = sum(1000 / f[key] for f in pair)
                scaling[path].append(together / (1000 / figures["now"][key]))
            print(f"round {round_ + 1}: before {figures['before']}, now {figures['now']}, "
                  f"two at once {pair}", flush=True)  # fmt: skip

    judgments = args.rollouts * CRITERIA
    labels = {"score": "score()", "rewards": "the reward path (compute_rewards)"}
    result: dict[str, Any] = {
        "baseline_commit": BASELINE_COMMIT,
        "rollouts": args.rollouts,
        "criteria": CRITERIA,
        "judgments": judgments,
        "runs": args.runs,
        "measured_runs_per_process": MEASURED_RUNS,
        "paths": {
            path: {
                "before_ms": spread(before[path], 4),
                "now_ms": spread(now[path], 4),
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
