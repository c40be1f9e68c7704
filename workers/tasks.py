"""The task (an id in, the chunk service, idempotent writes out) and the worker's lifecycle.

At start a worker process loads its judge's model once (``rubricsvc worker --judge NAME``
names it) and keeps it for every chunk; the main process runs the reaper every
``RUBRICSVC_BROKER_REAP_INTERVAL`` seconds, so chunks of lost workers come back even when
nobody follows the job.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from typing import Any

from celery.signals import (
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from sqlalchemy import Engine

from rubricsvc.config import get_settings
from rubricsvc.db import make_engine, session_scope
from rubricsvc.errors import first_line
from rubricsvc.scoring import jobs
from rubricsvc.scoring.judge_configs import find_judge
from workers.app import SCORE_CHUNK, app, send_chunks
from workers.backends import backend_for, close_all
from workers.chunks import is_transient, run_chunk

log = logging.getLogger(__name__)

_engines: dict[int, Engine] = {}  # by process id: a forked child must not reuse its parent's


def engine() -> Engine:
    pid = os.getpid()
    if pid not in _engines:
        _engines[pid] = make_engine()
    return _engines[pid]


def backoff(retries: int) -> float:
    """Seconds before retry number ``retries + 1``: doubling from 1 s up to a minute, jittered."""
    delay = min(60.0, 2.0**retries)
    return delay + random.uniform(0, delay / 2)


@app.task(name=SCORE_CHUNK, bind=True, max_retries=12)  # type: ignore[untyped-decorator]
def score_chunk(self: Any, chunk_id: int, **_extra: Any) -> str:
    """Score one chunk; the database or a backend being away is retried with backoff."""
    try:
        run = run_chunk(engine(), int(chunk_id), backend_for, get_settings().broker)
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


class Reaper:
    """A thread that runs ``jobs.reap`` periodically and sends what it gives back."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rubricsvc-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        broker = get_settings().broker
        while not self._stop.wait(self.interval):
            try:
                with session_scope(engine()) as session:
                    outbox = jobs.reap(session, broker.heartbeat_timeout, broker.requeue_after)
                    jobs.send_after_commit(session, send_chunks, outbox)
            except Exception as err:  # the database or broker is away: try again next time
                log.warning("reaper: %s", first_line(err))


_reaper: list[Reaper] = []


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _load_judge(**_: Any) -> None:
    judge = app.conf.get("rubricsvc_judge")
    if not judge:
        return  # started by plain `celery worker`: the backend is built on first use
    try:
        with session_scope(engine()) as session:
            spec = find_judge(session, judge)
        backend_for(spec)
    except Exception as err:  # e.g. the database is away: load on the first chunk instead
        log.warning("could not load judge %s at start: %s", judge, err)


@worker_ready.connect  # type: ignore[untyped-decorator]
def _start_reaper(**_: Any) -> None:
    interval = get_settings().broker.reap_interval
    if interval > 0:
        reaper = Reaper(interval)
        reaper.start()
        _reaper.append(reaper)


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
@worker_shutdown.connect  # type: ignore[untyped-decorator]
def _shut_down(**_: Any) -> None:
    while _reaper:
        _reaper.pop().stop()
    close_all()
