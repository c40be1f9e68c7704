"""The Celery app factory; ``celery -A workers.app worker`` builds it from the environment.

Delivery settings make a lost worker lose nothing: a message is acknowledged only after its
task ran (``acks_late``), a worker holds one message at a time (prefetch 1), and the message
of a worker process that died goes back to the queue (``reject_on_worker_lost``). A chunk
delivered twice is harmless: only one delivery can claim it (``rubricsvc/scoring/chunks.py``).
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from rubricsvc.config import Settings, get_settings
from rubricsvc.plugins import load_plugins
from rubricsvc.scoring.dispatch import celery_config

_made: list[tuple[Celery, Settings]] = []


def make_app(settings: Settings) -> Celery:
    """A worker's Celery app for the broker of ``settings``; results are stored in the
    database, not Celery. The process's tasks and signal handlers read ``settings``."""
    load_plugins(settings.plugins)  # before the task reads a judge config that names a mode
    app = Celery("rubricsvc", include=["workers.tasks"])
    app.conf.update(
        celery_config(settings.broker),
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        task_reject_on_worker_lost=True,
        # Keep retrying a lost broker connection (a broker restart) instead of exiting.
        broker_connection_max_retries=None,
        # A task still running when the broker connection drops finishes and writes its
        # results; its message comes back and is skipped, since the chunk is then done.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_hijack_root_logger=False,
    )
    _made.append((app, settings))
    return app


def settings() -> Settings:
    """The settings of this process's worker app (the latest one made)."""
    if not _made:
        make_app(get_settings())
    return _made[-1][1]


def __getattr__(name: str) -> Any:
    # ``celery -A workers.app`` looks up ``app``: this is the worker's entry point, so it
    # builds the app from the environment then, not when the module is imported.
    if name == "app":
        if not _made:
            make_app(get_settings())
        return _made[-1][0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
