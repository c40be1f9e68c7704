"""The task (an id in, the chunk service, idempotent writes out) and the worker's lifecycle.

At start a worker process loads the judge of the queue it serves (``rubricsvc worker --judge
NAME`` serves ``judge.NAME``) once and keeps it for every chunk; the main process runs the
reaper every ``RUBRICSVC_JOBS_REAP_INTERVAL`` seconds, so chunks of lost workers come back
even when nobody follows the job.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
from typing import Any

from celery import current_app, shared_task
from celery.signals import (
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from sqlalchemy import Engine

from rubricsvc import heap
from rubricsvc.db import make_engine, session_scope
from rubricsvc.errors import first_line
from rubricsvc.scoring import presence
from rubricsvc.scoring.chunks import is_transient, run_chunk, worker_token
from rubricsvc.scoring.dispatch import SCORE_CHUNK, CeleryDispatcher
from rubricsvc.scoring.judge_configs import find_judge
from rubricsvc.scoring.lifecycle import Reaper
from workers.app import settings
from workers.backends import backend_for, close_all

log = logging.getLogger(__name__)

_engines: dict[int, Engine] = {}  # by process id: a forked child must not reuse its parent's


def engine() -> Engine:
    pid = os.getpid()
    if pid not in _engines:
        _engines[pid] = make_engine(settings().db.url)
    return _engines[pid]


def backoff(retries: int) -> float:
    """Seconds before retry number ``retries + 1``: doubling from 1 s up to a minute, jittered."""
    delay = min(60.0, 2.0**retries)
    return delay + random.uniform(0, delay / 2)


@shared_task(name=SCORE_CHUNK, bind=True, max_retries=12)  # type: ignore[untyped-decorator]
def score_chunk(self: Any, chunk_id: int, **_extra: Any) -> str:
    """Score one chunk; the database or a backend being away is retried with backoff."""
    try:
        run = run_chunk(engine(), int(chunk_id), backend_for, settings().jobs)
    except Exception as err:
        if not is_transient(err):
            raise
        log.warning("chunk %s: %s; retrying", chunk_id, first_line(err))
        raise self.retry(exc=err, countdown=backoff(self.request.retries)) from err
    if run.error:
        log.warning("chunk %s %s: %s", chunk_id, run.outcome, run.error)
    else:
        log.info("chunk %s %s", chunk_id, run.outcome)
    return run.outcome


class ReaperThread:
    """A thread that reaps periodically and sends what it gives back to the workers."""

    def __init__(self, interval: float) -> None:
        broker, policy = settings().broker, settings().jobs
        self.reap = Reaper(CeleryDispatcher(broker), policy.heartbeat_timeout, policy.requeue_after)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rubricsvc-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with session_scope(engine()) as session:
                    self.reap(session)
            except Exception as err:  # the database or broker is away: try again next time
                log.warning("reaper: %s", first_line(err))


class PresenceThread:
    """A thread that keeps this worker's row in ``worker_presence`` fresh (the judges it
    serves), so a job for a judge no live worker serves says that it waits for one."""

    def __init__(self, judges: list[str], interval: float) -> None:
        self.name = worker_token()
        self.host = socket.gethostname()
        self.judges = judges
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rubricsvc-presence", daemon=True)

    def start(self) -> None:
        self._announce()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        try:
            with session_scope(engine()) as session:
                presence.leave(session, self.name)
        except Exception as err:  # the database is away: the row goes stale by itself
            log.warning("presence: %s", first_line(err))

    def _announce(self) -> None:
        try:
            with session_scope(engine()) as session:
                presence.announce(session, self.name, self.host, self.judges)
        except Exception as err:  # the database is away: try again next time
            log.warning("presence: %s", first_line(err))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._announce()


_reaper: list[ReaperThread] = []
_presence: list[PresenceThread] = []


def served_judges() -> list[str]:
    """The judges whose queues this worker consumes (its queues besides the default)."""
    prefix = settings().broker.queue_prefix
    return [
        name[len(prefix) :]
        for name in current_app.amqp.queues.consume_from or {}
        if name.startswith(prefix) and name != f"{prefix}default"
    ]


def served_judge() -> str | None:
    """The judge whose queue this worker serves (one queue besides the default), if any."""
    judges = served_judges()
    return judges[0] if len(judges) == 1 else None


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _load_judge(**_: Any) -> None:
    judge = served_judge()
    if judge:  # else no single judge's queue: each backend is built on first use
        try:
            with session_scope(engine()) as session:
                spec = find_judge(session, judge)
            backend_for(spec)
        except Exception as err:  # e.g. the database is away: load on the first chunk instead
            log.warning("could not load judge %s at start: %s", judge, err)
    # Start-up (and the judge's model) stays for the process's life: out of the collector's
    # sight, as a server process's (``rubricsvc.heap``).
    heap.settle()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _start_reaper(**_: Any) -> None:
    judges = served_judges()
    if judges:
        beat = PresenceThread(judges, settings().jobs.heartbeat_interval)
        beat.start()
        _presence.append(beat)
    interval = settings().jobs.reap_interval
    if interval > 0:
        reaper = ReaperThread(interval)
        reaper.start()
        _reaper.append(reaper)


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
@worker_shutdown.connect  # type: ignore[untyped-decorator]
def _shut_down(**_: Any) -> None:
    while _reaper:
        _reaper.pop().stop()
    while _presence:
        _presence.pop().stop()
    close_all()
