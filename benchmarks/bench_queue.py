"""B5 (and B2 through Celery): what the queue adds per judgment, with 1 and 2 workers.

Run: ``python -m benchmarks.bench_queue [--prompts 20] [--completions 10] [--criteria 8]
[--latency 0.002]``.

The judge is a scripted backend behind the fault injector set to a fixed latency per request
(no failures): the model's time is known, so what remains is the platform's. The same work
(prompts x completions x criteria judgments) is scored three ways, each on a fresh PostgreSQL
database: in-process (``score()``, the baseline), and as a score job through Redis and Celery
workers (``rubricsvc worker``, prefork, one process each) with 1 and then 2 workers, timed from
submission to the job's end. Overhead per judgment = (queue time - in-process time / workers)
/ judgments: the wall time beyond a perfect split of the in-process run over the workers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from benchmarks.results import RESULTS, save
from rubricsvc.db import make_engine, session_scope, upgrade
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import Completion
from rubricsvc.prompts import find_prompt
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.service import approve, save_rubric
from rubricsvc.scoring import jobs
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.scoring.selection import Selection
from rubricsvc.scoring.service import ScoreOptions, score

POSTGRES = os.environ.get(
    "RUBRICSVC_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS = os.environ.get("RUBRICSVC_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")


def judge(latency: float) -> JudgeSpec:
    return JudgeSpec(
        name="bench-fixed-latency",
        backend="faulty",
        backend_options={"inner": "scripted", "failure_rate": 0.0, "latency": latency},
        retry_backoff=0,
    )


def create_database(admin: Any) -> str:
    """A new, migrated PostgreSQL database; its URL."""
    name = f"rubricsvc_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    return url


def drop_databases(admin: Any, urls: list[str]) -> None:
    with admin.connect() as conn:
        for url in urls:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))


def fresh_database(admin: Any, args: argparse.Namespace, spec: JudgeSpec) -> str:
    url = create_database(admin)
    engine = make_engine(url)
    with session_scope(engine) as session:
        ensure_judge_config(session, spec)
        for p in range(args.prompts):
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
            for i in range(args.completions):
                answer = f"Answer {i} to question {p}."
                session.add(
                    Completion(
                        prompt_id=prompt.id, text=answer, content_hash=content_hash(answer),
                        source="bench", meta={},
                    )
                )  # fmt: skip
    engine.dispose()
    return url


def in_process(url: str, spec: JudgeSpec) -> tuple[float, int]:
    from rubricsvc.judging.backends import backend_from_spec

    engine = make_engine(url)
    started = time.perf_counter()
    with session_scope(engine) as session:
        report = score(
            session, spec, Selection(sources=("bench",)), ScoreOptions(),
            lambda: backend_from_spec(spec), checkpoint=session.commit,
        )  # fmt: skip
    seconds = time.perf_counter() - started
    engine.dispose()
    assert report.failed == 0 and report.computed == report.judgments
    return seconds, report.judgments


def through_celery(
    url: str,
    spec: JudgeSpec,
    workers: int,
    chunk: int,
    settle: float = 8.0,
    warm_up: Selection | None = None,
) -> float:
    """Seconds from submitting a score job of the "bench" completions to its end.

    ``workers`` worker processes start ``settle`` seconds before (to connect and load their
    judge); a ``warm_up`` selection is scored first, not timed, to pay one-time costs.
    """
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
        if warm_up is not None:
            run_job(engine, spec, warm_up, chunk)
        seconds = run_job(engine, spec, Selection(sources=("bench",)), chunk)
        engine.dispose()
        return seconds
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
    args = parser.parse_args()

    spec = judge(args.latency)
    admin = create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    created: list[str] = []
    try:
        runs: dict[str, float] = {}
        url = fresh_database(admin, args, spec)
        created.append(url)
        runs["in-process"], judgments = in_process(url, spec)
        print(f"in-process: {judgments} judgments in {runs['in-process']:.2f} s", flush=True)
        for workers in (1, 2):
            url = fresh_database(admin, args, spec)
            created.append(url)
            runs[f"celery, {workers} worker(s)"] = through_celery(url, spec, workers, args.chunk)
            print(f"celery, {workers} worker(s): {runs[f'celery, {workers} worker(s)']:.2f} s",
                  flush=True)  # fmt: skip
    finally:
        drop_databases(admin, created)
        admin.dispose()

    base = runs["in-process"]
    overhead = {
        f"{w} worker(s)": round(1000 * (runs[f"celery, {w} worker(s)"] - base / w) / judgments, 3)
        for w in (1, 2)
    }
    result = {
        "judgments": judgments,
        "latency_per_request_s": args.latency,
        "chunk_judgments": args.chunk,
        "seconds": {k: round(v, 3) for k, v in runs.items()},
        "ratios": {k: round(v / base, 3) for k, v in runs.items() if k != "in-process"},
        "queue_overhead_ms_per_judgment": overhead,
    }
    print(json.dumps(result, indent=2))
    save("queue", result)


if __name__ == "__main__":
    main()
