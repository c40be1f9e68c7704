"""What a score job would cost, checked before anything is stored or judged.

Work is counted in judgments, as the judge's verdict mode plans them (``scoring.workload``),
and bounded by the rule reward batches are bounded by (``scoring.admission``): a score job
past ``RUBRICSVC_API_MAX_JOB_JUDGMENTS``, or whose citation checks cost more than
``RUBRICSVC_API_MAX_JOB_EVIDENCE``, is refused with 413 naming the figure, its parts and the
bound, before the request stores anything. (A reward request's bounds are the reward
pipeline's, ``scoring.pipeline``.)
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from rubricsvc.api.errors import ApiError
from rubricsvc.api.state import AppState
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.scoring.admission import TooMuchWork, bound_work
from rubricsvc.scoring.jobs import JobPlan, plan_job
from rubricsvc.scoring.scorer import Workload
from rubricsvc.scoring.selection import Selection


def check_job_work(
    state: AppState, session: Session, spec: JudgeSpec, selection: Selection
) -> JobPlan:
    """The plan of a score job, once its work is in bounds (the job is submitted with it)."""
    plan = plan_job(session, spec, selection, state.settings.jobs.chunk_judgments)
    work = Workload(plan.judgments, plan.checks, plan.evidence)
    completions = len({completion.id for completion, _ in plan.work})
    try:
        bound_work(
            work,
            max_judgments=state.settings.api.max_job_judgments,
            max_evidence=state.settings.api.max_job_evidence,
            what=f"completions: {completions}",
            advice="per score job; select less (by prompt, source or completion ids)",
            field=None,  # the selection as a whole
        )
    except TooMuchWork as err:
        raise ApiError(413, str(err), "body") from None
    return plan
