"""B5 (and B2 through Celery): what the queue adds per judgment, with 1 and 2 workers.

Run: ``python -m benchmarks.bench_queue [--prompts 20] [--completions 10] [--criteria 8]
[--latency 0.002] [--runs 3]``.

The judge is a scripted backend behind the fault injector set to a fixed latency per request
(no failures): the model's time is known, so what remains is the platform's. The same work
(prompts x completions x criteria judgments) is scored in-process (``score()``, the baseline)
and as a score job through Redis and Celery workers (``rubricsvc worker``, prefork, one
process each), timed from submission to the job's end, on one PostgreSQL database whose
judgments, scores and jobs are emptied before every run. After the same untimed warm-up for both
(one more prompt), in-process and one worker alternate ``--runs`` times; each pair of runs
gives a ratio and an overhead per judgment = (queue time - in-process time / workers) /
judgments: the wall time beyond a perfect split of the in-process run over the workers. Two
workers then score the work once, against the last in-process run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import create_engine, text

from benchmarks.databases import create_database, drop_databases
from benchmarks.results import RESULTS, headline, save, spread
from rubricsvc.db import make_engine, session_scope
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import Completion
from rubricsvc.prompts import find_prompt
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import approve, save_rubric
from rubricsvc.scoring import jobs
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.scoring.scorer import ScoreOptions, score
from rubricsvc.scoring.selection import Selection

POSTGRES = os.environ.get(
    "RUBRICSVC_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS = os.environ.get("RUBRICSVC_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
BENCH = Selection(sources=("bench",))  # the measured work
WARM_UP = Selection(sources=("warm-up",))  # one more prompt of the same shape, not measured


def judge(latency: float) -> JudgeSpec:
    return JudgeSpec(
        name="bench-fixed-latency",
        backend="faulty",
        backend_options={"inner": "scripted", "failure_rate": 0.0, "latency": latency},
        retry_backoff=0,
    )


def clear_scoring(url: str) -> None:
    """Empty the judgments, scores and score jobs, so that the next run (or job: the same
    work would find its finished job) judges everything again."""
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE judgments, scores, score_chunks, score_jobs"))
    engine.dispose()


def fresh_database(admin: Any, args: argparse.Namespace, spec: JudgeSpec) -> str:
    """A new database holding the measured work (source "bench") and the warm-up (one more
    prompt, source "warm-up")."""
    url = create_database(admin)
    engine = make_engine(url)
    with session_scope(engine) as session:
        ensure_judge_config(session, spec)
        for p in range(args.prompts + 1):
            rubric = RubricSpec.model_validate(
                {
                    "name": f"bench/{p}",
                    "prompt": {"text": f"Question {p}?", "external_id": f"q{p}"},
                    "criteria": [
                        {"text": f"Criterion {c} of question {p}", "weight": c + 1}
                        for c in range(args.criteria)
                    ],
                }
            )
            approve(session, save_rubric(session, rubric).version)
            prompt = find_prompt(session, external_id=f"q{p}")
            source = "bench" if p < args.prompts else "warm-up"
            for i in range(args.completions):
                answer = f"Answer {i} to question {p}."
                session.add(
                    Completion(
                        prompt_id=prompt.id, text=answer, content_hash=content_hash(answer),
                        source=source, meta={},
                    )
                )  # fmt: skip
    engine.dispose()
    return url


def in_process(url: str, spec: JudgeSpec, selection: Selection = BENCH) -> tuple[float, int]:
    from rubricsvc.backends import backend_from_spec

    engine = make_engine(url)
    started = time.perf_counter()
    with session_scope(engine) as session:
        report = score(
            session, spec, selection, ScoreOptions(),
            lambda: backend_from_spec(spec), checkpoint=session.commit,
        )  # fmt: skip
    seconds = time.perf_counter() - started
    engine.dispose()
    assert report.failed == 0 and report.computed == report.judgments
    return seconds, report.judgments


@contextmanager
def celery_workers(
    url: str, spec: JudgeSpec, workers: int, chunk: int, settle: float = 8.0
) -> Iterator[Callable[[Selection], float]]:
    """``workers`` worker processes on ``url``'s database, given ``settle`` seconds to connect
    and load their judge. Yields a function that scores a selection as a score job and returns
    the seconds from its submission to its end."""
    queue_prefix = f"bench-{uuid.uuid4().hex[:8]}."
    env = {
        **os.environ,
        "RUBRICSVC_DATABASE_URL": url,
        "RUBRICSVC_BROKER_URL": REDIS,
        "RUBRICSVC_BROKER_QUEUE_PREFIX": queue_prefix,
        "RUBRICSVC_JOBS_CHUNK_JUDGMENTS": str(chunk),
    }
    command = [sys.executable, "-m", "rubricsvc", "worker", "--judge", spec.name,
               "--loglevel", "WARNING"]  # fmt: skip
    log = RESULTS / "queue-workers.log"  # the workers' own output, kept out of the report
    RESULTS.mkdir(exist_ok=True)
    with log.open("a") as sink:
        procs = [
            subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
            for _ in range(workers)
        ]
    try:
        time.sleep(settle)
        os.environ.update({k: v for k, v in env.items() if k.startswith("RUBRICSVC_")})
        from rubricsvc.config import get_settings

        get_settings.cache_clear()
        engine = make_engine(url)
        try:
            yield lambda selection: run_job(engine, spec, selection, chunk)
        finally:
            engine.dispose()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def run_job(engine: Any, spec: JudgeSpec, selection: Selection, chunk: int) -> float:
    """Submit a score job, wait for its end; the seconds in between."""
    from rubricsvc.config import get_settings
    from rubricsvc.scoring import lifecycle
    from rubricsvc.scoring.dispatch import CeleryDispatcher

    dispatcher = CeleryDispatcher(get_settings().broker)
    started = time.perf_counter()
    with session_scope(engine) as session:
        submission = lifecycle.submit(session, dispatcher, spec, selection, ScoreOptions(), chunk)
        job_id = submission.job.id
    while True:
        with session_scope(engine) as session:
            state = jobs.progress(session, job_id)
        if state.finished:
            break
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    assert state.status == "done" and state.failed == 0, state
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--completions", type=int, default=10)
    parser.add_argument("--criteria", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.002, help="seconds per judge request")
    parser.add_argument("--chunk", type=int, default=256, help="judgments per chunk")
    parser.add_argument("--runs", type=int, default=3, help="in-process and 1-worker runs, each")
    args = parser.parse_args()

    spec = judge(args.latency)
    admin = create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    url = fresh_database(admin, args, spec)
    in_process_runs: list[float] = []
    one_worker_runs: list[float] = []
    try:
        with celery_workers(url, spec, 1, args.chunk) as job:
            in_process(url, spec, WARM_UP)  # the same warm-up for both paths
            clear_scoring(url)
            job(WARM_UP)
            for run in range(args.runs):  # alternated: neither path is favoured by the order
                clear_scoring(url)
                seconds, judgments = in_process(url, spec)
                in_process_runs.append(seconds)
                clear_scoring(url)
                one_worker_runs.append(job(BENCH))
                print(f"run {run + 1}: {judgments} judgments, in-process {seconds:.2f} s, "
                      f"1 worker {one_worker_runs[-1]:.2f} s", flush=True)  # fmt: skip
        clear_scoring(url)
        with celery_workers(url, spec, 2, args.chunk) as job:
            job(WARM_UP)
            clear_scoring(url)
            two_workers = job(BENCH)
        print(f"2 workers: {two_workers:.2f} s", flush=True)
    finally:
        drop_databases(admin, [url])
        admin.dispose()

    def overhead_ms(queued: float, base: float, workers: int) -> float:
        return 1000 * (queued - base / workers) / judgments

    pairs = list(zip(one_worker_runs, in_process_runs, strict=True))
    last = in_process_runs[-1]
    result = {
        "judgments": judgments,
        "latency_per_request_s": args.latency,
        "chunk_judgments": args.chunk,
        "runs": args.runs,
        "seconds": {
            "in-process": spread(in_process_runs),
            "celery, 1 worker": spread(one_worker_runs),
        },
        "two_workers": {  # one run, against the last in-process run
            "seconds": round(two_workers, 3),
            "ratio": round(two_workers / last, 3),
            "overhead_ms_per_judgment": round(overhead_ms(two_workers, last, 2), 3),
        },
        "headlines": {
            "queue_ratio": headline(
                [queued / base for queued, base in pairs],
                compares=f"wall time of {judgments} fixed-latency judgments as a score job on "
                "1 Celery worker / in-process",
                at_most=1.25,
            ),
            "overhead_ms": headline(
                [overhead_ms(queued, base, 1) for queued, base in pairs],
                compares="time the queue (Celery, Redis, PostgreSQL) adds per judgment, 1 worker",
                unit="ms",
                at_most=2,
            ),
        },
    }
    print(json.dumps(result, indent=2))
    save("queue", result)


if __name__ == "__main__":
    main()
