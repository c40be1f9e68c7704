"""B8 (b)'s driver: one process's own time per judgment, with a backend that answers at once.

Run by path by ``bench_platform_time`` with the checkout under test first on ``PYTHONPATH``
(this folder holds no ``rubricsvc``, so the checkout's is the one imported); it uses only
what both the baseline commit and this checkout have. Prints one JSON line:
``{"score_ms": ..., "rewards_ms": ..., "route_ms": ...}``, each the median of ``MEASURED`` runs after one
warm-up run of each path, the process's heap then settled as the checkout's server settles
its own (``settle_heap``).

With ``--default-collector`` the heap is left to the interpreter's default collector, as the
baseline's server leaves it: the code's own gain, apart from the settled heap's.

With ``--sqlite-floor`` it also reports SQLite's own share of each path (``{path}_sqlite_ms``,
``{path}_sqlite_writes_ms``): the statements a run of the path sent the database, captured
with their parameters as the driver received them, replayed on the raw connection against a
copy of the database as it was when the run began, then committed (``SqliteReplay``). No
Python of the platform runs in the replay; what is left of a path's time is the platform's.

Usage: ``python benchmarks/platform_time_driver.py DATABASE ROLLOUTS CRITERIA MEASURED
[--default-collector] [--sqlite-floor]``; DATABASE is a SQLite file's path or the URL of an
empty PostgreSQL database (``--sqlite-floor`` needs SQLite).
"""

from __future__ import annotations

import inspect
import json
import sqlite3
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, select

from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.db import make_engine, session_scope, upgrade
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.models import Completion
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.scoring.rewards import RewardRequest, compute_rewards
from rubricsvc.scoring.selection import Selection
from rubricsvc.scoring.workload import reward_work

try:  # where the backend seam's data lives now
    from rubricsvc.backends.types import (
        ChoiceRequest,
        ChoiceResult,
        Generation,
        GenerationRequest,
    )
except ImportError:  # before it moved below judging (4092fd0 and earlier)
    from rubricsvc.judging.types import (  # type: ignore[import-not-found,no-redef]
        ChoiceRequest,
        ChoiceResult,
        Generation,
        GenerationRequest,
    )
try:  # this checkout's module names
    from rubricsvc.backends.base import BackendError
    from rubricsvc.rubrics.versions import approve, save_rubric
    from rubricsvc.scoring.scorer import ScoreOptions, score
except ImportError:  # the baseline commit's, from before they were renamed
    from rubricsvc.judging.backends.base import BackendError  # type: ignore[import-not-found,no-redef]
    from rubricsvc.rubrics.service import approve, save_rubric  # type: ignore[import-not-found,no-redef]
    from rubricsvc.scoring.service import ScoreOptions, score  # type: ignore[import-not-found,no-redef]

PROMPT = "p-platform"
WORK_BOUND = 65_536  # ``api.max_reward_judgments``'s default, as the routes bound a batch


class Instant:
    """Every verdict at once, the time spent answering kept (to leave out of the figure)."""

    name = "instant"
    model = "instant"

    def __init__(self) -> None:
        self.seconds = 0.0

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        started = time.perf_counter()
        answers: list[ChoiceResult | BackendError] = [
            ChoiceResult({"Yes": 0.9, "No": 0.1}, 10) for _ in requests
        ]
        self.seconds += time.perf_counter() - started
        return answers

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        raise NotImplementedError("criterion-prob only")

    def close(self) -> None:
        pass


class SqliteReplay:
    """SQLite's own time for what a run sent it. ``start`` copies the database (SQLite's backup
    API: the file and its write-ahead log as one) and starts capturing every statement the
    engine sends, with its parameters as handed to the driver (each page of a multi-row insert
    as sent) and each commit; ``stop`` ends the capture; ``replay`` runs them in order on a raw
    connection to the copy, with the engine's own connection set-up, and returns the seconds
    of all of them and of the writes alone (inserts, updates, deletes and commits), and the
    judgments it added."""

    def __init__(self, engine: Engine, database: str) -> None:
        self.engine = engine
        self.database = database
        self.copy = f"{database}.replay"
        self.sent: list[tuple[str, Any, bool]] = []

    def _statement(
        self, _conn: Any, _cursor: Any, sql: str, params: Any, _ctx: Any, many: bool
    ) -> None:
        # A page of a multi-row insert (SQLAlchemy's "insertmanyvalues") is flagged as many
        # but executed once, with one flat list of parameters.
        rows = many and bool(params) and isinstance(params[0], tuple | list | dict)
        self.sent.append((sql, params, rows))

    def _commit(self, _conn: Any) -> None:
        self.sent.append(("COMMIT", None, False))

    def start(self) -> None:
        Path(self.copy).unlink(missing_ok=True)
        with sqlite3.connect(self.database) as source, sqlite3.connect(self.copy) as target:
            source.backup(target)
        source.close()
        target.close()
        self.sent = []
        event.listen(self.engine, "before_cursor_execute", self._statement)
        event.listen(self.engine, "commit", self._commit)

    def stop(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._statement)
        event.remove(self.engine, "commit", self._commit)

    def replay(self) -> tuple[float, float, int]:
        """The seconds of all the statements and of the writes alone, and the judgments the
        replay added (a run's worth: the replay did the run's writes)."""
        engine = make_engine(f"sqlite:///{self.copy}")
        connection = engine.raw_connection()
        total = writes = 0.0
        try:
            cursor = connection.cursor()
            (before,) = cursor.execute("SELECT count(*) FROM judgments").fetchone()
            for sql, params, many in self.sent:
                started = time.perf_counter()
                if sql == "COMMIT":
                    connection.commit()
                elif many:
                    cursor.executemany(sql, params)
                else:
                    cursor.execute(sql, params)
                    cursor.fetchall()
                elapsed = time.perf_counter() - started
                total += elapsed
                if not sql.lstrip().upper().startswith("SELECT"):
                    writes += elapsed
            connection.commit()
            (after,) = cursor.execute("SELECT count(*) FROM judgments").fetchone()
        finally:
            connection.close()
            engine.dispose()
            Path(self.copy).unlink(missing_ok=True)
        return total, writes, after - before


def route_options() -> ScoreOptions:
    """The options a reward route of the checkout judges a batch with, as far as they shape its
    work: its judgments per judge call where it has that setting
    (``api.reward_chunk_judgments``), else ``ScoreOptions``' default chunk."""
    from rubricsvc.config import ApiSettings

    chunk = getattr(ApiSettings(), "reward_chunk_judgments", None)
    return ScoreOptions(chunk_judgments=chunk) if chunk else ScoreOptions()


def settle_heap() -> None:
    """The heap as a server process of this checkout has it once started: ``rubricsvc serve``
    settles it (``rubricsvc.heap``) where the checkout has that module; a checkout without
    it ran with the interpreter's default collector, and so does its driver."""
    try:
        from rubricsvc import heap
    except ImportError:
        return
    heap.settle()


def main() -> None:
    database, rollouts, criteria, measured = sys.argv[1], *map(int, sys.argv[2:5])
    # A SQLite file's path, or the URL of an empty PostgreSQL database (``bench_postgres_time``).
    url = database if "://" in database else f"sqlite:///{database}"
    upgrade(url)
    engine = make_engine(url)
    with session_scope(engine) as session:
        rubric = {
            "name": "bench/platform",
            "prompt": {"external_id": PROMPT, "text": "How can I sleep better?"},
            "criteria": [
                {"text": f"Recommends habit number {i} for better sleep", "weight": 1}
                for i in range(criteria)
            ],
        }
        approve(session, save_rubric(session, RubricSpec.model_validate(rubric)).version)
    judge = JudgeSpec(name="instant", backend="scripted", mode=VerdictMode.CRITERION_PROB)
    backend = Instant()
    judgments = rollouts * criteria

    def texts(tag: str) -> list[str]:
        return [f"{tag}: keep a regular schedule, rollout {i}." for i in range(rollouts)]

    def score_path(tag: str, replay: SqliteReplay | None = None) -> float:
        """``score()`` over completions stored beforehand (storing them is not timed)."""
        with session_scope(engine) as session:
            add_completions(
                session,
                [
                    (
                        "bench",
                        CompletionRecord(
                            prompt_external_id=PROMPT, text=t, external_id=f"{tag}-{i}"
                        ),
                    )
                    for i, t in enumerate(texts(tag))
                ],
            )
        with session_scope(engine) as session:
            query = select(Completion.id).where(Completion.external_id.like(f"{tag}-%"))
            ids = tuple(session.scalars(query))
        backend.seconds = 0.0
        if replay:
            replay.start()
        started = time.perf_counter()
        with session_scope(engine) as session:
            report = score(
                session, judge, Selection(completion_ids=ids), ScoreOptions(), lambda: backend
            )
        elapsed = time.perf_counter() - started
        if replay:
            replay.stop()
        assert report.computed == judgments, report
        return elapsed - backend.seconds

    def reward_path(tag: str, replay: SqliteReplay | None = None) -> float:
        """``compute_rewards`` over new rollouts, storing them on the way (timed)."""
        backend.seconds = 0.0
        requests = [RewardRequest(completion=t, prompt_id=PROMPT) for t in texts(tag)]
        if replay:
            replay.start()
        started = time.perf_counter()
        with session_scope(engine) as session:
            batch = compute_rewards(
                session, judge, requests, ScoreOptions(), lambda _: lambda: backend
            )
        elapsed = time.perf_counter() - started
        if replay:
            replay.stop()
        assert batch.computed == judgments and None not in batch.rewards
        return elapsed - backend.seconds

    def route_path(tag: str, replay: SqliteReplay | None = None) -> float:
        """What a reward route runs per batch, without HTTP: the batch's work bounded
        (``api.max_reward_judgments``), then judged, as the checkout's route does it. A
        checkout whose ``compute_rewards`` takes ``admit`` bounds the work it plans for
        judging; one before it planned the batch for the bound first (``reward_work``)."""
        backend.seconds = 0.0
        requests = [RewardRequest(completion=t, prompt_id=PROMPT) for t in texts(tag)]
        bounded: list[int] = []

        def bound(work: Any) -> None:
            assert work.total <= WORK_BOUND, work
            bounded.append(work.total)

        options = route_options()
        if replay:
            replay.start()
        started = time.perf_counter()
        if "admit" in inspect.signature(compute_rewards).parameters:
            with session_scope(engine) as session:
                batch = compute_rewards(
                    session, judge, requests, options, lambda _: lambda: backend, admit=bound
                )
        else:
            with session_scope(engine) as session:
                bound(reward_work(session, judge, requests, source="rewards", include_drafts=False))
            with session_scope(engine) as session:
                batch = compute_rewards(
                    session, judge, requests, options, lambda _: lambda: backend
                )
        elapsed = time.perf_counter() - started
        if replay:
            replay.stop()
        assert batch.computed == judgments and None not in batch.rewards
        assert bounded == [judgments], bounded
        return elapsed - backend.seconds

    score_path("warm-score")
    reward_path("warm-reward")
    route_path("warm-route")
    if "--default-collector" not in sys.argv[5:]:
        settle_heap()
    result = {
        "score_ms": statistics.median(
            1000 * score_path(f"s{k}") / judgments for k in range(measured)
        ),
        "rewards_ms": statistics.median(
            1000 * reward_path(f"r{k}") / judgments for k in range(measured)
        ),
        "route_ms": statistics.median(
            1000 * route_path(f"b{k}") / judgments for k in range(measured)
        ),
    }
    if "--sqlite-floor" in sys.argv[5:]:
        replay = SqliteReplay(engine, database)
        paths = {"score": score_path, "rewards": reward_path, "route": route_path}
        for name, path in paths.items():
            totals, writes = [], []
            for k in range(measured):
                path(f"{name}-replayed-{k}", replay)
                total, written, added = replay.replay()
                assert added == judgments, f"the replay added {added} judgments, not {judgments}"
                totals.append(1000 * total / judgments)
                writes.append(1000 * written / judgments)
            result[f"{name}_sqlite_ms"] = statistics.median(totals)
            result[f"{name}_sqlite_writes_ms"] = statistics.median(writes)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
