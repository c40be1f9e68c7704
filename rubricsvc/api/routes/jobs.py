"""/v1/score-jobs: submit a selection for scoring, follow it, page through its scores.

With a broker configured, a job's chunks go to the Celery workers of its judge, exactly as
from ``rubricsvc score --via celery``. Without one, the server runs the chunks itself on a
background thread (``RUBRICSVC_API_LOCAL_JOB_THREADS``), with the same claims and records:
both are dispatchers of ``rubricsvc.scoring.dispatch``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace

from fastapi import APIRouter, Depends, Path, Response
from sqlalchemy.orm import Session

from rubricsvc.api.boundary import CheckedRoute
from rubricsvc.api.deps import DB_SESSION, app_state, require
from rubricsvc.api.drafts import drafts_allowed
from rubricsvc.api.errors import ApiError
from rubricsvc.api.routes.common import Paging
from rubricsvc.api.schemas import JobIn, Page
from rubricsvc.api.state import AppState
from rubricsvc.api.work import check_job_work
from rubricsvc.apikeys import Scope
from rubricsvc.models import ApiKey
from rubricsvc.scoring import jobs, lifecycle
from rubricsvc.scoring.dispatch import CeleryDispatcher, Dispatcher, LocalDispatcher
from rubricsvc.scoring.judge_configs import find_reward_judge
from rubricsvc.scoring.lifecycle import Delivery
from rubricsvc.scoring.options import score_options
from rubricsvc.scoring.scorer import ScoreReport
from rubricsvc.scoring.selection import Selection

# A job as the API shows it: the library's own progress record.
JobOut = jobs.JobProgress

router = APIRouter(prefix="/v1/score-jobs", tags=["score jobs"], route_class=CheckedRoute)
JOB_ID = Path(ge=1, le=2**31 - 1)


def _job_out(state: AppState, session: Session, job_id: int, created: bool | None = None) -> JobOut:
    progress = jobs.progress(session, job_id, state.settings.jobs.heartbeat_timeout)
    return replace(progress, created=created)


@router.post(
    "",
    response_model=JobOut,
    status_code=202,
    responses={200: {"model": JobOut, "description": "The same work was submitted before."}},
)
def submit_job(
    body: JobIn,
    response: Response,
    session: Session = DB_SESSION,
    state: AppState = Depends(app_state),
    key: ApiKey = Depends(require(Scope.SCORE)),
) -> JobOut:
    """Submit the selected completions for scoring; the same work again returns its job.
    ``include_drafts: true`` needs the review scope unless the server scores drafts anyway."""
    include_drafts = drafts_allowed(
        state.settings.scoring, key, body.include_drafts, "body.include_drafts"
    )
    selection = Selection(
        completion_ids=tuple(body.completion_ids),
        prompt_external_ids=tuple(body.prompt_ids),
        sources=tuple(body.sources),
        rubric_ref=body.rubric,
        include_drafts=include_drafts,
    )
    spec = find_reward_judge(session, body.judge, body.mode)
    if state.local_jobs() is not None:
        state.judges.check(spec)  # this server runs the job: its model must fit the kept set
    plan = check_job_work(state, session, spec, selection)
    options = score_options(
        state.settings.scoring, aggregation=body.aggregation, min_coverage=body.min_coverage
    )
    send = Delivery(_dispatcher(state))
    submission = lifecycle.submit(
        session, send, spec, selection, options, state.settings.jobs.chunk_judgments, plan
    )
    session.commit()  # the chunks are sent (or started) once this commit is done
    if send.error is not None:
        raise send.error
    if not submission.created:
        response.status_code = 200
    return _job_out(state, session, submission.job.id, submission.created)


def _dispatcher(state: AppState) -> Dispatcher:
    runner = state.local_jobs()
    if runner is not None:
        return LocalDispatcher(
            runner, state.engine, state.judges.get, state.settings.jobs, _counter(state)
        )
    if not state.settings.broker.url:
        raise ApiError(503, "no broker is configured and local jobs are off", code="unavailable")
    return CeleryDispatcher(state.settings.broker)


def _counter(state: AppState) -> Callable[[ScoreReport], None]:
    """Counts a locally run chunk's judgments and failures in the server's metrics."""

    def count(report: ScoreReport) -> None:
        state.metrics.count_judgments(report.judge, report.computed, report.cached, report.failed)
        state.metrics.count_failures(report.judge, report.failures)

    return count


@router.get("", response_model=Page, dependencies=[Depends(require(Scope.READ))])
def list_jobs(
    paging: Paging = Depends(),
    session: Session = DB_SESSION,
    state: AppState = Depends(app_state),
) -> Page:
    found = jobs.list_jobs(session, limit=paging.offset + paging.limit)[paging.offset :]
    total = jobs.count_jobs(session)
    return paging.page([_job_out(state, session, job.id) for job in found], total)


@router.get("/{job_id}", response_model=JobOut, dependencies=[Depends(require(Scope.READ))])
def get_job(
    job_id: int = JOB_ID, session: Session = DB_SESSION, state: AppState = Depends(app_state)
) -> JobOut:
    return _job_out(state, session, job_id)


@router.get("/{job_id}/results", response_model=Page, dependencies=[Depends(require(Scope.READ))])
def job_results(
    job_id: int = JOB_ID, paging: Paging = Depends(), session: Session = DB_SESSION
) -> Page:
    """The job's scores so far, each with its per-criterion breakdown. Pages count the
    job's completions (``total``): a page holds the scores of ``limit`` completions, in id
    order, those scored so far (one per rubric version a completion is scored against)."""
    job = jobs.get_job(session, job_id)
    completion_ids = jobs.job_completion_ids(session, job_id)
    window = completion_ids[paging.offset : paging.offset + paging.limit]
    scores = jobs.job_scores(session, job, window) if window else []
    return paging.page([asdict(s) for s in scores], len(completion_ids))


@router.post(
    "/{job_id}/cancel", response_model=JobOut, dependencies=[Depends(require(Scope.SCORE))]
)
def cancel_job(
    job_id: int = JOB_ID, session: Session = DB_SESSION, state: AppState = Depends(app_state)
) -> JobOut:
    """Stop a job: chunks not yet started are cancelled; running ones finish."""
    jobs.cancel(session, job_id)
    session.flush()
    return _job_out(state, session, job_id)
