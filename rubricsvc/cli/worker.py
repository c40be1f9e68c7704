"""``rubricsvc worker``: a Celery worker that scores the chunks of jobs."""

from __future__ import annotations

import os

import typer

from rubricsvc.cli.context import db_session, require_broker
from rubricsvc.config import get_settings
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import mode_names
from rubricsvc.scoring.dispatch import celery_class, queue_name
from rubricsvc.scoring.judge_configs import ensure_judge_config, find_judge

WORKER_APP = "workers.app"  # the Celery app's module, found by Celery as for `celery -A`


def worker_command(
    judge: list[str] = typer.Option(
        ...,
        help="Serve this judge's queue (its model is loaded once); repeat it to serve several "
        "judges (each is then loaded on its first chunk).",
    ),
    mode: str | None = typer.Option(
        None, help=f"The judge in another verdict mode: {', '.join(mode_names())} or a plugin's."
    ),
    concurrency: int = typer.Option(1, help="Worker processes (each loads the model)."),
    pool: str = typer.Option("prefork", help="Celery pool: prefork, solo or threads."),
    loglevel: str = typer.Option("INFO", help="Celery's log level."),
) -> None:
    """Run a Celery worker for one judge's queue."""
    require_broker()
    celery_class()  # says which extra is missing
    from celery.bin.celery import celery

    with db_session() as session:
        specs: list[JudgeSpec] = [find_judge(session, name, mode) for name in judge]
        for spec in specs:
            ensure_judge_config(session, spec)  # so the worker processes find it by name
    queues = ",".join(dict.fromkeys(queue_name(get_settings().broker, s.name) for s in specs))
    # Celery's own command line, as `celery -A workers.app worker ...`: the worker package
    # builds its app from the environment, and its processes load the judge of their queue.
    code = celery.main(
        [
            "--app", WORKER_APP,
            "worker",
            "--queues", queues,
            "--concurrency", str(concurrency),
            "--pool", pool,
            "--hostname", f"rubricsvc-{os.getpid()}@%h",
            "--loglevel", loglevel,
            # No gossip or mingle: workers coordinate through the database, not each other.
            "--without-gossip",
            "--without-mingle",
        ],
        prog_name="celery",
        standalone_mode=False,
    )  # fmt: skip
    if code:
        raise typer.Exit(code)
