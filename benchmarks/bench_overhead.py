"""B2 and B4: the platform's scoring, in-process and through Celery, against the raw backend floor.

Run: ``python -m benchmarks.bench_overhead [--tasks 2] [--report-tokens 1000] [--skip-celery]``
(``make bench``).

- The floor: the exact judge requests the platform sends (recorded from its own run) sent
  straight to the backend in one batch.
- End to end: ``score()`` on a fresh SQLite database holding the same reports and criteria
  (selection, cache lookup, prompt building, backend, parsing, storing judgments and scores).
  After a warm-up run, platform and floor are measured twice each, alternated, on fresh
  copies; the ratio takes the fastest of each. Within each ``score()`` run, the time spent
  outside the backend's calls is the platform's own, free of the backend's run-to-run
  variation.
- Re-scoring the scored job: every judgment comes from the cache, no backend call.
- Through Celery: the same scoring as a score job on one ``rubricsvc worker`` (Redis,
  PostgreSQL), timed from submission to the job's end, after a warm-up job (``--skip-celery``
  leaves it out).

One backend instance serves every run: model loading is outside every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from benchmarks.results import save
from benchmarks.workload import Task, load_tasks
from rubricsvc.db import make_engine, session_scope, upgrade
from rubricsvc.hashing import content_hash
from rubricsvc.judging.backends.base import BackendError, JudgeBackend
from rubricsvc.judging.config import BUILTIN_JUDGES
from rubricsvc.judging.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.models import Completion
from rubricsvc.prompts import find_prompt
from rubricsvc.rubrics.schemas import RubricSpec, normalized_text
from rubricsvc.rubrics.service import approve, save_rubric
from rubricsvc.scoring.selection import Selection
from rubricsvc.scoring.service import ScoreOptions, ScoreReport, score


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


def through_one_worker(tasks: Sequence[Task], warm_up: Task) -> float:
    """The same scoring as a score job on one Celery worker (Redis, a fresh PostgreSQL
    database), after a warm-up job on another report; seconds from submission to the end."""
    from sqlalchemy import create_engine

    from benchmarks.bench_queue import POSTGRES, create_database, drop_databases, through_celery

    admin = create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    url = create_database(admin)
    try:
        store_workload(url, tasks)
        store_workload(url, [warm_up], source="warm-up")
        print("through Celery: one worker, the embedded judge ...", flush=True)
        return through_celery(
            url,
            BUILTIN_JUDGES["embedded"],
            workers=1,
            chunk=1024,  # one chunk: the worker sends the backend one batch, as score() does
            settle=10,  # connecting; the warm-up job waits for the model to load
            warm_up=Selection(sources=("warm-up",)),
        )
    finally:
        drop_databases(admin, [url])
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--report-tokens", type=int, default=1000)
    parser.add_argument("--skip-celery", action="store_true", help="no run through Celery")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from rubricsvc.config import get_settings
    from rubricsvc.judging.backends.transformers import TransformersBackend
    from rubricsvc.judging.embedded import prepare_embedded_model

    model_dir = prepare_embedded_model(get_settings().judge.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    *tasks, warm_up = load_tasks(args.tasks + 1, args.report_tokens, tokenizer)
    backend = TransformersBackend(batch_size=16)
    recorder = Recorder(backend)
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template.sqlite"
        judgments = store_workload(f"sqlite:///{template}", tasks)
        print(f"workload: {len(tasks)} reports cut to {args.report_tokens} tokens, "
              f"{judgments} criterion judgments (criterion-prob, prefix reuse)", flush=True)  # fmt: skip
        copies = []
        for name in ("warm-up", "first", "second"):
            shutil.copy(template, Path(tmp) / f"{name}.sqlite")
            copies.append(f"sqlite:///{Path(tmp) / name}.sqlite")

        # Warm-up (not measured): the first passes over new shapes pay one-time costs.
        score_once(copies[0], recorder)
        requests = list(recorder.choice_requests)
        platform_runs: list[float] = []
        outside_backend: list[float] = []  # the platform's own time within each run
        floor_runs: list[float] = []
        for copy in copies[1:]:  # alternated, so neither side is favoured by the order
            recorder.seconds = 0.0
            seconds, report = score_once(copy, recorder)
            platform_runs.append(seconds)
            outside_backend.append(seconds - recorder.seconds)
            started = time.perf_counter()
            answers = backend.choice_probs(requests)
            floor_runs.append(time.perf_counter() - started)
            assert not any(isinstance(a, BackendError) for a in answers)
        rescore, cached = score_once(copies[-1], recorder)
    backend.close()
    celery = None if args.skip_celery else through_one_worker(tasks, warm_up)

    # The least disturbed run of each (other work on the machine only ever adds time).
    end_to_end, floor = min(platform_runs), min(floor_runs)
    result = {
        "workload": {
            "tasks": [t.id for t in tasks],
            "report_tokens": args.report_tokens,
        },
        "judgments": report.judgments,
        "backend_requests": len(requests),
        "floor_seconds": [round(f, 3) for f in floor_runs],
        "in_process_seconds": [round(p, 3) for p in platform_runs],
        "in_process_outside_backend_seconds": [round(o, 3) for o in outside_backend],
        "rescore_seconds": round(rescore, 4),
        "rescore_cached": cached.cached,
        "rescore_backend_requests": cached.backend_requests,
        "celery_seconds": None if celery is None else round(celery, 3),
        "ratios": {
            "in-process / floor": round(end_to_end / floor, 3),
            "scoring / re-scoring": round(end_to_end / rescore, 1),
        },
    }
    if celery is not None:
        result["ratios"]["celery / floor"] = round(celery / floor, 3)
    print(json.dumps(result, indent=2))
    save("overhead", result)


if __name__ == "__main__":
    main()
