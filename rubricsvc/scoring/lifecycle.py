"""A score job from submission to its end, through a dispatcher: submit, reap, resume, follow.

Each step that makes chunks pending hands them to the dispatcher only after the caller's
transaction commits (``jobs.send_after_commit``); the caller (a CLI command, a request, a
worker's reaper thread, the trainer) owns the transaction, as everywhere in ``scoring``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from rubricsvc.db import session_scope
from rubricsvc.errors import NotFoundError
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.scoring import jobs
from rubricsvc.scoring.dispatch import Dispatcher
from rubricsvc.scoring.scorer import ScoreOptions
from rubricsvc.scoring.selection import Selection


class Delivery:
    """A dispatcher that counts what it sent and keeps a failure instead of raising it.

    Sending happens after the commit, so raising there would hide that the job is stored;
    the caller reads ``error`` and says how to send again (``jobs resume``).
    """

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.keeps_messages = dispatcher.keeps_messages
        self.sent = 0
        self.error: Exception | None = None

    def send(self, judge: str, chunk_ids: Sequence[int]) -> None:
        try:
            self.dispatcher.send(judge, chunk_ids)
            self.sent += len(chunk_ids)
        except Exception as err:
            self.error = err


def submit(
    session: Session,
    dispatcher: Dispatcher,
    spec: JudgeSpec,
    selection: Selection,
    options: ScoreOptions,
    chunk_judgments: int,
    plan: jobs.JobPlan | None = None,
) -> jobs.Submission:
    """Store (or find) the job for this work; its chunks go to ``dispatcher`` after the commit.
    ``plan``: the work's ``jobs.plan_job``, when the caller has planned it (to bound it)."""
    submission = jobs.submit(session, spec, selection, options, chunk_judgments, plan)
    if dispatcher.keeps_messages:
        jobs.mark_dispatched_to_workers(session, submission.job)
    outbox = submission.outbox
    if not submission.created and not dispatcher.keeps_messages:
        # The chunks sent before died with the process that ran them: submitting again
        # runs what is left (a claim is atomic, so a chunk still held elsewhere is skipped).
        outbox = {spec.name: jobs.pending_chunks(session, submission.job.id)}
    jobs.send_after_commit(session, dispatcher.send, outbox)
    return submission


def resume(session: Session, dispatcher: Dispatcher, job_id: int) -> jobs.Outbox:
    """Put the job's failed, cancelled and lost chunks back; sent after the commit."""
    outbox = jobs.resume(session, job_id)
    jobs.send_after_commit(session, dispatcher.send, outbox)
    return outbox


@dataclass
class Reaper:
    """Gives back the chunks of lost workers and sends them, with those whose message may be
    lost, again (``jobs.reap``); sending a chunk twice is harmless."""

    dispatcher: Dispatcher
    heartbeat_timeout: float
    requeue_after: float

    def __call__(self, session: Session) -> jobs.Outbox:
        outbox = jobs.reap(session, self.heartbeat_timeout, self.requeue_after)
        jobs.send_after_commit(session, self.dispatcher.send, outbox)
        return outbox


def follow(
    engine: Engine,
    job_id: int,
    poll_seconds: float,
    reaper: Reaper | None = None,
    reap_interval: float = 0.0,
    on_outage: Callable[[Exception], None] | None = None,
    worker_timeout: float | None = None,
) -> Iterator[jobs.JobProgress]:
    """The job's progress at every poll, ending with the first finished one (with
    ``worker_timeout``, saying when no live worker serves its judge: ``jobs.progress``).

    With ``reaper``, reaps every ``reap_interval`` seconds on the way. A database error is
    raised, or, with ``on_outage``, reported to it and polled again (e.g. a restart);
    an unknown job is always raised.
    """
    next_reap = time.monotonic() + reap_interval
    while True:
        reap_now = reaper is not None and time.monotonic() >= next_reap
        if reap_now:
            next_reap = time.monotonic() + reap_interval
        try:
            with session_scope(engine) as session:
                if reap_now and reaper is not None:
                    reaper(session)
                state = jobs.progress(session, job_id, worker_timeout)
        except NotFoundError:
            raise
        except Exception as err:
            if on_outage is None:
                raise
            on_outage(err)
            time.sleep(poll_seconds)
            continue
        yield state
        if state.finished:
            return
        time.sleep(poll_seconds)
