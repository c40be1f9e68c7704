"""The Celery app, configured from rubricsvc's settings: ``celery -A workers.app worker``.

Delivery settings make a lost worker lose nothing: a message is acknowledged only after its
task ran (``acks_late``), a worker holds one message at a time (prefetch 1), and the message
of a worker process that died goes back to the queue (``reject_on_worker_lost``). A chunk
delivered twice is harmless: only one delivery can claim it (``workers/chunks.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery

from rubricsvc.config import get_settings

SCORE_CHUNK = "rubricsvc.score_chunk"


def make_app() -> Celery:
    """A Celery app for the configured broker; results are stored in the database, not Celery."""
    broker = get_settings().broker
    app = Celery("rubricsvc", broker=broker.url or "memory://", include=["workers.tasks"])
    app.conf.update(
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_reject_on_worker_lost=True,
        broker_connection_retry_on_startup=True,
        # Keep retrying a lost broker connection (a broker restart) instead of exiting.
        broker_connection_max_retries=None,
        # A task still running when the broker connection drops finishes and writes its
        # results; its message comes back and is skipped, since the chunk is then done.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        task_default_queue=f"{broker.queue_prefix}default",
        task_create_missing_queues=True,
        broker_transport_options={"visibility_timeout": broker.visibility_timeout},
        worker_hijack_root_logger=False,
    )
    return app


def queue_name(judge: str) -> str:
    """The queue of judge ``judge``: its workers load that judge's model once and keep it."""
    return f"{get_settings().broker.queue_prefix}{judge}"


app = make_app()


def send_chunks(judge: str, chunk_ids: Sequence[int]) -> None:
    """Put chunks of judge ``judge`` on its queue (one message per chunk, ids only)."""
    queue = queue_name(judge)
    with app.producer_or_acquire() as producer:
        for chunk_id in chunk_ids:
            app.send_task(SCORE_CHUNK, args=[chunk_id], queue=queue, producer=producer)
