"""Where a score job's chunks run: one small protocol, a Celery and a local implementation.

A dispatcher is handed chunk ids (by judge) once the transaction that made them pending has
committed (``jobs.send_after_commit``). ``CeleryDispatcher`` puts one message per chunk on the
judge's queue, naming the task ``rubricsvc.score_chunk`` without importing it, so anything
that submits needs only the broker's address; ``LocalDispatcher`` runs the chunks on this
process's threads (the API without a broker). Both end in ``chunks.run_chunk``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Engine

from rubricsvc.config import BrokerSettings, JobSettings
from rubricsvc.errors import missing_extra
from rubricsvc.scoring.chunks import BackendFor, run_chunk
from rubricsvc.scoring.scorer import ScoreReport

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

# The task's name is the contract between senders and workers (``workers/tasks.py``).
SCORE_CHUNK = "rubricsvc.score_chunk"


class Dispatcher(Protocol):
    """Runs chunks somewhere once they are committed."""

    # Whether a sent chunk outlives this process (a broker keeps its message). If not,
    # submitting the same work again sends its pending chunks again.
    keeps_messages: bool

    def send(self, judge: str, chunk_ids: Sequence[int]) -> None:
        """Hand over chunks of judge ``judge``; each is run at least once."""
        ...


def queue_name(broker: BrokerSettings, judge: str) -> str:
    """The queue of judge ``judge``: its workers load that judge's model once and keep it."""
    return f"{broker.queue_prefix}{judge}"


# Redis connections give up on a broker that stopped answering (its host cut off, or gone
# without closing the connection) rather than waiting on TCP's own limits: redis-py sets no
# timeout, so a connect or a command waited until the host came back or TCP gave up
# (minutes for a connect, about 15 for a command). Both bounds are far above what a live
# broker takes (the consumer's BRPOP is read once its socket is readable, so it is not
# bounded). A worker cut off for 40 s still noticed only when the link came back
# (docs/deployment.md): what holds its event loop then is not found yet.
REDIS_CONNECT_TIMEOUT_SECONDS = 10.0
REDIS_SOCKET_TIMEOUT_SECONDS = 30.0


def celery_config(broker: BrokerSettings) -> dict[str, Any]:
    """What senders and workers agree on: the broker, JSON messages, the default queue."""
    transport_options: dict[str, Any] = {"visibility_timeout": broker.visibility_timeout}
    if (broker.url or "").startswith(("redis://", "rediss://")):
        transport_options |= {
            "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_SECONDS,
            "socket_timeout": REDIS_SOCKET_TIMEOUT_SECONDS,
            "socket_keepalive": True,
        }
    return {
        "broker_url": broker.url or "memory://",
        "broker_connection_retry_on_startup": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_ignore_result": True,
        "result_backend": None,
        "task_default_queue": f"{broker.queue_prefix}default",
        "task_create_missing_queues": True,
        "broker_transport_options": transport_options,
    }


class CeleryDispatcher:
    """Sends each chunk as a message to its judge's queue on the broker of ``broker``."""

    keeps_messages = True

    def __init__(self, broker: BrokerSettings) -> None:
        celery_class()  # a missing extra is said before anything is stored
        self.broker = broker

    def send(self, judge: str, chunk_ids: Sequence[int]) -> None:
        app = _sending_app(self.broker.model_dump_json())
        queue = queue_name(self.broker, judge)
        with app.producer_or_acquire() as producer:
            for chunk_id in chunk_ids:
                app.send_task(SCORE_CHUNK, args=[chunk_id], queue=queue, producer=producer)


def celery_class() -> type[Celery]:
    """Celery's app class, imported only when a job goes to workers (an optional extra)."""
    try:
        from celery import Celery
    except ImportError as err:
        raise missing_extra(err, "scoring on workers needs the workers extra", "workers") from None
    app_class: type[Celery] = Celery
    return app_class


@lru_cache(maxsize=8)
def _sending_app(broker_json: str) -> Celery:
    """One sending app (and its connection pool) per broker configuration, built on first use."""
    broker = BrokerSettings.model_validate_json(broker_json)
    # Not the current app: a worker process's own app stays the one its tasks see.
    app = celery_class()("rubricsvc-sender", set_as_current=False)
    app.conf.update(celery_config(broker))
    return app


class LocalDispatcher:
    """Runs chunks on ``executor``'s threads in this process, with the same claims and records."""

    keeps_messages = False  # a chunk waiting on a thread dies with the process

    def __init__(
        self,
        executor: Executor,
        engine: Engine,
        backend_for: BackendFor,
        policy: JobSettings,
        on_report: Callable[[ScoreReport], None] | None = None,
    ) -> None:
        self.executor = executor
        self.engine = engine
        self.backend_for = backend_for
        self.policy = policy
        self.on_report = on_report

    def send(self, judge: str, chunk_ids: Sequence[int]) -> None:
        for chunk_id in chunk_ids:
            self.executor.submit(self.run, chunk_id)

    def run(self, chunk_id: int) -> None:
        """Run one chunk; a transient error leaves it pending for ``jobs resume`` or a resubmit."""
        try:
            run = run_chunk(self.engine, chunk_id, self.backend_for, self.policy)
        except Exception:
            log.exception("chunk %d stopped", chunk_id)
            return
        if run.report is not None and self.on_report is not None:
            self.on_report(run.report)
