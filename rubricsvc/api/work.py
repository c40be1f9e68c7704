"""What a request would cost, checked before anything is stored or judged.

Work is counted in judgments, as the judge's verdict mode plans them (``scoring.workload``):
a pairwise or group judge's comparisons, a citations criterion's (claim, document) checks,
each judgment once (the cache not subtracted), and each check criterion as one. A reward
request past ``RUBRICSVC_API_MAX_REWARD_JUDGMENTS`` or a score job past
``RUBRICSVC_API_MAX_JOB_JUDGMENTS`` is refused with 413; a judge the server could not keep
loaded (``RUBRICSVC_API_MAX_JUDGES``) with 422. What the citation checks among the judgments
cost besides (cited documents indexed, claims and passages sent, passages ranked:
``scorer.EvidenceCost``) is bounded the same way, past ``RUBRICSVC_API_MAX_REWARD_EVIDENCE``
or ``RUBRICSVC_API_MAX_JOB_EVIDENCE``: 413 naming the figure, its parts and the bound. All
before the request stores anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from rubricsvc.api.errors import ApiError
from rubricsvc.api.state import AppState
from rubricsvc.db import session_scope
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.scoring.jobs import JobPlan, plan_job
from rubricsvc.scoring.judge_configs import find_reward_judge
from rubricsvc.scoring.rewards import RewardRequest
from rubricsvc.scoring.scorer import Workload
from rubricsvc.scoring.selection import Selection
from rubricsvc.scoring.workload import evidence_refusal, reward_work


def reward_judge(state: AppState, judge: str, mode: str | None) -> JudgeSpec:
    """The judge of a reward request, once its model (every member's, for a jury) can be kept."""
    with session_scope(state.engine) as session:
        spec = find_reward_judge(session, judge, mode)
        for one in spec.jury_members() or [spec]:  # a jury is judged by each of its members
            state.judges.check(one)
    return spec


def refuse_reward_work(state: AppState, work: Workload, completions: int) -> None:
    """413 when a reward request's planned work passes a bound (``api.max_reward_judgments``,
    ``api.max_reward_evidence``)."""
    _refuse_past(
        work,
        state.settings.api.max_reward_judgments,
        f"completions: {completions}",
        "per reward request; send smaller batches",
        "body.items",
    )
    _refuse_evidence(
        work,
        state.settings.api.max_reward_evidence,
        "per reward request; send fewer or shorter documents, or fewer cited claims, per batch",
        "body.items",
    )


def check_reward_work(
    state: AppState,
    requests: Sequence[RewardRequest],
    *,
    judge: str,
    mode: str | None,
    include_drafts: bool,
    source: str,
) -> JudgeSpec:
    """The judge of a reward request, once its model can be kept and its work is in bounds;
    reads only. (Judging a batch bounds its work as it plans it: ``compute_rewards``'s
    ``admit`` with ``refuse_reward_work``; this is for a request checked on its own.)"""
    spec = reward_judge(state, judge, mode)
    with session_scope(state.engine) as session:
        work = reward_work(session, spec, requests, source=source, include_drafts=include_drafts)
    refuse_reward_work(state, work, len(requests))
    return spec


def check_job_work(
    state: AppState, session: Session, spec: JudgeSpec, selection: Selection
) -> JobPlan:
    """The plan of a score job, once its work is in bounds (the job is submitted with it)."""
    plan = plan_job(session, spec, selection, state.settings.jobs.chunk_judgments)
    work = Workload(plan.judgments, plan.checks, plan.evidence)
    advice = "per score job; select less (by prompt, source or completion ids)"
    completions = len({completion.id for completion, _ in plan.work})
    _refuse_past(
        work, state.settings.api.max_job_judgments, f"completions: {completions}", advice, "body"
    )
    _refuse_evidence(work, state.settings.api.max_job_evidence, advice, "body")
    return plan


def _refuse_past(work: Workload, limit: int, what: str, advice: str, field: str) -> None:
    """413 naming the work asked for and the bound, before anything is stored or judged."""
    if work.total > limit:
        raise ApiError(
            413,
            f"{work.total} judgments ({what}; planned by the judge's mode: {work.judgments}; "
            f"check criteria: {work.checks}): at most {limit} {advice}",
            field,
        )


def _refuse_evidence(work: Workload, limit: int, advice: str, field: str) -> None:
    """413 naming what the work's citation checks cost and the bound (``evidence_refusal``),
    before anything is stored or judged."""
    refusal = evidence_refusal(work.evidence, limit)
    if refusal is not None:
        raise ApiError(413, f"{refusal} {advice}", field)
