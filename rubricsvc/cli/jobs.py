"""``rubricsvc jobs ...`` and ``score --via celery``: scoring on workers."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer

from rubricsvc.cli.context import (
    CliExit,
    console,
    db_session,
    engine,
    err_console,
    require_broker,
)
from rubricsvc.cli.progress import progress_bar
from rubricsvc.cli.render import build_table
from rubricsvc.config import get_settings
from rubricsvc.db import display_url
from rubricsvc.errors import NotFoundError, first_line
from rubricsvc.scoring import jobs, lifecycle, presence
from rubricsvc.scoring.dispatch import CeleryDispatcher
from rubricsvc.scoring.judge_configs import find_reward_judge
from rubricsvc.scoring.lifecycle import Delivery
from rubricsvc.scoring.scorer import ScoreOptions, ScoreReport
from rubricsvc.scoring.selection import Selection

jobs_app = typer.Typer(
    help="Score jobs run by workers (see `score --via celery`).", no_args_is_help=True
)

POLL_SECONDS = 1.0


def _dispatcher() -> Delivery:
    """The broker's dispatcher, counting what it sends, once a broker is configured."""
    require_broker()
    return Delivery(CeleryDispatcher(get_settings().broker))


def _check_sent(send: Delivery, job_id: int) -> None:
    if send.error is not None:
        raise CliExit(
            f"could not send the chunks of job {job_id} to the broker at "
            f"{display_url(require_broker())} ({first_line(send.error)}); once it is back, "
            f"`rubricsvc jobs resume {job_id}` sends them"
        )


def score_via_celery(
    judge: str, mode: str | None, selection: Selection, options: ScoreOptions, show: bool
) -> tuple[ScoreReport, jobs.JobProgress]:
    """Submit the job, send its chunks after the commit, follow it, read the report back."""
    send = _dispatcher()
    with db_session() as session:
        spec = find_reward_judge(session, judge, mode)
        chunk_judgments = get_settings().jobs.chunk_judgments
        submission = lifecycle.submit(session, send, spec, selection, options, chunk_judgments)
        job_id = submission.job.id
    _check_sent(send, job_id)
    if submission.created:
        err_console.print(f"job {job_id}: {send.sent} chunk(s) sent to the workers of {spec.name}")
    else:
        again = f"; {send.sent} chunk(s) sent again" if send.sent else ""
        err_console.print(f"job {job_id}: this work was submitted before{again}; following it")
    state = follow(job_id, show)
    with db_session() as session:
        return jobs.job_report(session, job_id), state


def unfinished_exit(state: jobs.JobProgress) -> CliExit:
    """The exit for a job that ended other than done."""
    detail = state.error or f"see `rubricsvc jobs status {state.id}`"
    return CliExit(f"job {state.id} {state.status}: {detail}")


def _reaper() -> lifecycle.Reaper | None:
    """The reaper a follower runs, when a broker is configured and reaping is on."""
    settings = get_settings()
    if not settings.broker.url or settings.jobs.reap_interval <= 0:
        return None
    send = Delivery(CeleryDispatcher(settings.broker))  # a failed send is retried at the next reap
    return lifecycle.Reaper(send, settings.jobs.heartbeat_timeout, settings.jobs.requeue_after)


def follow(job_id: int, show: bool) -> jobs.JobProgress:
    """Poll the job until it finishes, reaping lost chunks on the way; Ctrl-C leaves it running."""
    waiting = ""  # the last outage message, printed once per outage rather than once per poll

    def on_outage(err: Exception) -> None:  # the database is away (a restart): poll again
        nonlocal waiting
        message = f"waiting for the database: {first_line(err)}"
        if message != waiting:
            err_console.print(message, soft_wrap=True)
            waiting = message

    said = ""  # the last waiting message, printed once
    polls = lifecycle.follow(
        engine(),
        job_id,
        POLL_SECONDS,
        _reaper(),
        get_settings().jobs.reap_interval,
        on_outage,
        get_settings().jobs.heartbeat_timeout,
    )
    try:
        with progress_bar(f"job {job_id}", enabled=show, detail=True) as update:
            for state in polls:
                waiting = ""
                chunks = ", ".join(f"{n} {status}" for status, n in state.chunks.items())
                detail = f"{state.cached} cached, {state.failed} failed; chunks: {chunks}"
                update(state.done, state.total, detail)
                if state.finished:
                    return state
                if state.waiting and state.waiting != said:
                    err_console.print(state.waiting, soft_wrap=True)
                said = state.waiting or ""
    except NotFoundError as err:
        raise CliExit(str(err), err.exit_code) from None
    except KeyboardInterrupt:
        raise CliExit(
            f"stopped following; job {job_id} goes on: `rubricsvc jobs status {job_id} --follow`",
            130,
        ) from None
    raise AssertionError("a followed job ends finished")


def _print_state(state: jobs.JobProgress) -> None:
    chunks = ", ".join(f"{n} {status}" for status, n in state.chunks.items()) or "none"
    console.print(f"job {state.id}: {state.status}, judge {state.judge}, {state.aggregation}")
    console.print(
        f"  {state.done}/{state.total} judgment(s) done: {state.cached} from the cache, "
        f"{state.failed} failed; {state.requests} backend request(s)"
    )
    console.print(f"  chunks: {chunks}")
    for worker in state.workers:
        console.print(f"  running on {worker}")
    if state.waiting:
        console.print(f"  waiting: {state.waiting}", soft_wrap=True)
    if state.error:
        console.print(f"  error: {state.error}", soft_wrap=True)


@jobs_app.command("list")
def jobs_list(
    limit: int = typer.Option(50, help="Show the latest N jobs."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The latest score jobs, newest first."""
    with db_session() as session:
        timeout = get_settings().jobs.heartbeat_timeout
        states = [jobs.progress(session, job.id, timeout) for job in jobs.list_jobs(session, limit)]
    if as_json:
        console.print_json(json.dumps([s.as_dict() for s in states]))
        return
    rows = [
        [
            str(s.id),
            s.status,
            s.judge,
            s.aggregation,
            f"{s.done}/{s.total}",
            str(s.cached),
            str(s.failed),
            (s.created_at or "")[:19],
        ]
        for s in states
    ]
    headers = ["id", "status", "judge", "aggregation", "done", "cached", "failed", "created"]
    console.print(
        build_table(f"{len(rows)} job(s)", headers, rows, flexible="judge", width=console.width)
    )


@jobs_app.command("status")
def jobs_status(
    job_id: int = typer.Argument(..., help="The job's id."),
    follow_: bool = typer.Option(False, "--follow", help="Show progress until the job finishes."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Where a job stands: counts, chunks, the workers running it."""
    if follow_:
        state = follow(job_id, show=not as_json)
    else:
        with db_session() as session:
            state = jobs.progress(session, job_id, get_settings().jobs.heartbeat_timeout)
    if as_json:
        console.print_json(json.dumps(state.as_dict()))
    else:
        _print_state(state)


@jobs_app.command("workers")
def jobs_workers(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The workers that announced themselves, the judges they serve, and whether they are live
    (a heartbeat within RUBRICSVC_JOBS_HEARTBEAT_TIMEOUT)."""
    with db_session() as session:
        found = presence.workers(session, get_settings().jobs.heartbeat_timeout)
    if as_json:
        console.print_json(json.dumps([asdict(w) for w in found]))
        return
    rows = [
        [w.name, w.host, ", ".join(w.judges), "live" if w.live else "lost", w.seen_at[:19]]
        for w in found
    ]
    headers = ["worker", "host", "judges", "state", "last seen"]
    console.print(
        build_table(f"{len(rows)} worker(s)", headers, rows, flexible="judges", width=console.width)
    )


@jobs_app.command("resume")
def jobs_resume(job_id: int = typer.Argument(..., help="The job's id.")) -> None:
    """Send a job's pending, failed and cancelled chunks to the workers again."""
    send = _dispatcher()
    with db_session() as session:
        lifecycle.resume(session, send, job_id)
    _check_sent(send, job_id)
    console.print(f"job {job_id}: {send.sent} chunk(s) sent")


@jobs_app.command("cancel")
def jobs_cancel(job_id: int = typer.Argument(..., help="The job's id.")) -> None:
    """Stop a job: waiting chunks are dropped, running ones stop at their next checkpoint."""
    with db_session() as session:
        job = jobs.cancel(session, job_id)
    console.print(f"job {job_id}: {job.status.value}")


@jobs_app.command("reap")
def jobs_reap(
    timeout: float | None = typer.Option(
        None, help="Heartbeat age (s) after which a running chunk is lost (default: settings)."
    ),
) -> None:
    """Send again the chunks of lost workers and chunks whose message may be lost."""
    policy = get_settings().jobs
    send = _dispatcher()
    reap = lifecycle.Reaper(send, timeout or policy.heartbeat_timeout, policy.requeue_after)
    with db_session() as session:
        reap(session)
    if send.error is not None:
        raise CliExit(f"could not reach the broker: {first_line(send.error)}")
    console.print(f"{send.sent} chunk(s) sent again")
