"""B2 and B4: the platform's scoring, in-process and through Celery, against the raw backend floor.

Run: ``python -m benchmarks.bench_overhead [--tasks 1] [--report-tokens 1000] [--runs 3]
[--skip-celery]`` (``make bench``).

- The floor: the exact judge requests the platform sends (recorded from its own run) sent
  straight to the backend in one batch.
- End to end: ``score()`` on a fresh SQLite database holding the same reports and criteria
  (selection, cache lookup, prompt building, backend, parsing, storing judgments and scores).
  Within each ``score()`` run, the time spent outside the backend's calls is the platform's
  own, free of the backend's run-to-run variation.
- Re-scoring the scored selection: every judgment comes from the cache, no backend call.
- Through Celery: the same scoring as a score job on one ``rubricsvc worker`` (Redis, a
  PostgreSQL database whose judgments, scores and jobs are emptied before each job), timed from
  submission to the job's end (``--skip-celery`` leaves it out).

After a warm-up (``score()`` once, and a score job on another report), ``--runs`` rounds
follow, each on a fresh copy of the database: ``score()`` with re-scoring, and the floor,
in an order swapped every other round (so that neither always follows the previous round's
job), then the job. Every ratio is taken within a round, and each figure is the median of the
rounds with the smallest and largest. One backend instance serves every in-process run:
model loading is outside every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from benchmarks.results import headline, save, spread
from benchmarks.workload import Task, load_tasks
from rubricsvc.backends.base import BackendError, JudgeBackend
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.db import make_engine, session_scope, upgrade
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import BUILTIN_JUDGES
from rubricsvc.models import Completion
from rubricsvc.prompts import find_prompt
from rubricsvc.rubrics.schemas import RubricSpec, normalized_text
from rubricsvc.rubrics.versions import approve, save_rubric
from rubricsvc.scoring.scorer import ScoreOptions, ScoreReport, score
from rubricsvc.scoring.selection import Selection


class Recorder:
    """The backend as the platform sees it, keeping every request and the time spent in it
    (and never closing it)."""

    def __init__(self, inner: JudgeBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.choice_requests: list[ChoiceRequest] = []
        self.seconds = 0.0

    @contextmanager
    def _timed(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        with self._timed():
            return self.inner.generate(requests)

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        self.choice_requests.extend(requests)
        with self._timed():
            return self.inner.choice_probs(requests)

    def close(self) -> None:
        pass


def store_workload(url: str, tasks: Sequence[Task], source: str = "bench") -> int:
    """Each task as a prompt, an approved rubric of its criteria and its report (as a
    completion from ``source``); the number of judgments that makes."""
    upgrade(url)
    engine = make_engine(url)
    judgments = 0
    with session_scope(engine) as session:
        for task in tasks:
            seen: set[str] = set()
            criteria = []
            for c in task.criteria:  # the rubric schema refuses repeated texts
                if normalized_text(c.text) not in seen and c.weight > 0:
                    seen.add(normalized_text(c.text))
                    criteria.append({"text": c.text, "weight": c.weight, "theme": c.theme})
            judgments += len(criteria)
            spec = RubricSpec.model_validate(
                {
                    "name": f"drb/{task.id}",
                    "prompt": {"text": task.prompt, "external_id": f"drb-{task.id}"},
                    "criteria": criteria,
                }
            )
            approve(session, save_rubric(session, spec).version)
            prompt = find_prompt(session, external_id=f"drb-{task.id}")
            session.add(
                Completion(
                    prompt_id=prompt.id,
                    text=task.report,
                    content_hash=content_hash(task.report),
                    source=source,
                    meta={},
                )
            )
    engine.dispose()
    return judgments


def score_once(url: str, backend: JudgeBackend) -> tuple[float, ScoreReport]:
    engine = make_engine(url)
    started = time.perf_counter()
    with session_scope(engine) as session:
        report = score(
            session,
            BUILTIN_JUDGES["embedded"],
            Selection(sources=("bench",)),
            ScoreOptions(),
            backend_factory=lambda: backend,
            checkpoint=session.commit,
        )
    seconds = time.perf_counter() - started
    engine.dispose()
    return seconds, report


@contextmanager
def one_worker(tasks: Sequence[Task], warm_up: Task) -> Iterator[Callable[[Selection], float]]:
    """One Celery worker with the embedded judge, on a fresh PostgreSQL database holding the
    reports (source "bench") and the warm-up report (source "warm-up"). Yields a function that
    empties the judgments, scores and jobs, then scores a selection as a score job (one chunk:
    the worker sends the backend one batch, as ``score()`` does) and returns the seconds from
    its submission to its end. The worker loads its model while the caller goes on."""
    from sqlalchemy import create_engine

    from benchmarks.bench_queue import POSTGRES, celery_workers, clear_scoring
    from benchmarks.databases import create_database, drop_databases

    admin = create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    url = create_database(admin)
    try:
        store_workload(url, tasks)
        store_workload(url, [warm_up], source="warm-up")
        with celery_workers(url, BUILTIN_JUDGES["embedded"], 1, chunk=1024, settle=0) as job:

            def afresh(selection: Selection) -> float:
                clear_scoring(url)
                return job(selection)

            yield afresh
    finally:
        drop_databases(admin, [url])
        admin.dispose()


def floor_seconds(backend: JudgeBackend, requests: Sequence[ChoiceRequest]) -> float:
    """The recorded requests sent straight to the backend in one batch: the floor."""
    started = time.perf_counter()
    answers = backend.choice_probs(requests)
    seconds = time.perf_counter() - started
    assert not any(isinstance(a, BackendError) for a in answers)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1, help="DeepResearch Bench reports")
    parser.add_argument("--report-tokens", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3, help="measured rounds")
    parser.add_argument("--skip-celery", action="store_true", help="no run through Celery")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from rubricsvc.backends.embedded import prepare_embedded_model
    from rubricsvc.backends.transformers import TransformersBackend
    from rubricsvc.config import get_settings

    model_dir = prepare_embedded_model(get_settings().judge.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    *tasks, warm_up = load_tasks(args.tasks + 1, args.report_tokens, tokenizer)
    bench, warm_up_job = Selection(sources=("bench",)), Selection(sources=("warm-up",))
    backend = TransformersBackend(batch_size=16)
    recorder = Recorder(backend)
    platform_runs: list[float] = []
    outside_backend: list[float] = []  # the platform's own time within each run
    rescore_runs: list[float] = []
    floor_runs: list[float] = []
    celery_runs: list[float] = []
    with ExitStack() as stack:
        job = None if args.skip_celery else stack.enter_context(one_worker(tasks, warm_up))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        template = tmp / "template.sqlite"
        judgments = store_workload(f"sqlite:///{template}", tasks)
        print(f"workload: {len(tasks)} reports cut to {args.report_tokens} tokens, "
              f"{judgments} criterion judgments (criterion-prob, prefix reuse)", flush=True)  # fmt: skip
        copies = []
        for name in ["warm-up", *(f"run-{n}" for n in range(args.runs))]:
            shutil.copy(template, tmp / f"{name}.sqlite")
            copies.append(f"sqlite:///{tmp / name}.sqlite")

        # Warm-up (not measured): the first passes over new shapes pay one-time costs.
        score_once(copies[0], recorder)
        requests = list(recorder.choice_requests)
        if job is not None:
            job(warm_up_job)
        for index, copy in enumerate(copies[1:]):
            if index % 2:  # every other round the floor goes first: no path is favoured
                floor_runs.append(floor_seconds(backend, requests))
            recorder.seconds = 0.0
            seconds, report = score_once(copy, recorder)
            assert report.judgments == judgments and report.failed == 0, report
            platform_runs.append(seconds)
            outside_backend.append(seconds - recorder.seconds)
            rescore, cached = score_once(copy, recorder)
            rescore_runs.append(rescore)
            if not index % 2:
                floor_runs.append(floor_seconds(backend, requests))
            if job is not None:
                celery_runs.append(job(bench))
            through_celery = f", through Celery {celery_runs[-1]:.2f} s" if celery_runs else ""
            print(
                f"round {len(floor_runs)}: score() {seconds:.2f} s, re-scoring {rescore:.4f} s, "
                f"floor {floor_runs[-1]:.2f} s{through_celery}",
                flush=True,
            )
    backend.close()

    floor = "the same backend requests sent straight to the backend (the floor)"
    reports = f"{len(tasks)} report{'s' if len(tasks) > 1 else ''}"
    headlines = {
        "in_process": headline(
            [p / f for p, f in zip(platform_runs, floor_runs, strict=True)],
            compares=f"wall time of `score()` / {floor}, {judgments} criterion-prob judgments "
            f"of {reports} cut to {args.report_tokens:,} tokens, transformers",
            at_most=1.10,
        ),
    }
    if celery_runs:
        headlines["celery"] = headline(
            [c / f for c, f in zip(celery_runs, floor_runs, strict=True)],
            compares="wall time of the same scoring as a score job on 1 Celery worker, "
            "submission to end / the floor",
            at_most=1.25,
        )
    headlines["rescoring"] = headline(
        [p / r for p, r in zip(platform_runs, rescore_runs, strict=True)],
        compares="wall time of scoring / re-scoring the scored selection from the cache",
        at_least=100,
        digits=1,
    )
    headlines["own_share"] = headline(
        [100 * o / p for o, p in zip(outside_backend, platform_runs, strict=True)],
        compares="the platform's own time in a `score()` run (outside the backend's calls), "
        "share of the run",
        unit="%",
        digits=2,
    )
    headlines["own_ms_per_judgment"] = headline(
        [1000 * o / judgments for o in outside_backend],
        compares="the platform's own time per judgment in `score()` (outside the backend's calls)",
        unit="ms",
        digits=2,
    )
    result = {
        "workload": {
            "tasks": [t.id for t in tasks],
            "report_tokens": args.report_tokens,
        },
        "runs": args.runs,
        "judgments": judgments,
        "backend_requests": len(requests),
        "floor_seconds": spread(floor_runs),
        "in_process_seconds": spread(platform_runs),
        "in_process_outside_backend_seconds": spread(outside_backend),
        "rescore_seconds": spread(rescore_runs, digits=4),
        "rescore_cached": cached.cached,
        "rescore_backend_requests": cached.backend_requests,
        "celery_seconds": spread(celery_runs) if celery_runs else None,
        "headlines": headlines,
    }
    print(json.dumps(result, indent=2))
    save("overhead", result)


if __name__ == "__main__":
    main()
