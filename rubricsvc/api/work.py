"""What a request would cost, checked before anything is stored or judged.

Work is counted in judgments: completions x criteria of the rubric version(s) each is scored
against (criteria as written, the cache not counted: a bound a client can compute). A reward
request past ``RUBRICSVC_API_MAX_REWARD_JUDGMENTS`` or a score job past
``RUBRICSVC_API_MAX_JOB_JUDGMENTS`` is refused with 413; a judge the server could not keep
loaded (``RUBRICSVC_API_MAX_JUDGES``) with 422. Both before the request stores anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.api.errors import ApiError
from rubricsvc.api.state import AppState
from rubricsvc.db import session_scope
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import Criterion, Rubric, RubricVersion, VersionStatus
from rubricsvc.rubrics.repository import resolve_version
from rubricsvc.scoring.judge_configs import find_reward_judge
from rubricsvc.scoring.rewards import RewardRequest, find_prompts
from rubricsvc.scoring.selection import Selection, select_work


def _criteria_per_prompt(
    session: Session, prompt_ids: set[int], include_drafts: bool
) -> dict[int, int]:
    """Per prompt, the criteria of the newest usable version of each of its rubrics (the
    versions a reward without ``rubric`` is scored against): one query."""
    allowed = {VersionStatus.APPROVED} | ({VersionStatus.DRAFT} if include_drafts else set())
    rows = session.execute(
        select(Rubric.prompt_id, RubricVersion.rubric_id, func.count(Criterion.id))
        .join(Rubric, RubricVersion.rubric_id == Rubric.id)
        .join(Criterion, Criterion.version_id == RubricVersion.id)
        .where(Rubric.prompt_id.in_(prompt_ids), RubricVersion.status.in_(allowed))
        .group_by(Rubric.prompt_id, RubricVersion.rubric_id, RubricVersion.id)
        .order_by(RubricVersion.rubric_id, RubricVersion.number.desc())
    )
    seen: set[int] = set()
    counts: dict[int, int] = {}
    for prompt_id, rubric_id, criteria in rows:
        if rubric_id in seen or prompt_id is None:
            continue  # an older version of a rubric already counted
        seen.add(rubric_id)
        counts[prompt_id] = counts.get(prompt_id, 0) + int(criteria)
    return counts


def reward_judgments(
    session: Session, requests: Sequence[RewardRequest], include_drafts: bool
) -> int:
    """Judgments a reward batch asks for (before the cache): NotFoundError for an unknown
    prompt or rubric, as scoring it would raise."""
    prompts = find_prompts(session, requests)
    per_prompt = _criteria_per_prompt(session, {p.id for p in prompts}, include_drafts)
    named: dict[str, tuple[int | None, int]] = {}
    total = 0
    for request, prompt in zip(requests, prompts, strict=True):
        if request.rubric is None:
            total += per_prompt.get(prompt.id, 0)
            continue
        if request.rubric not in named:
            version = resolve_version(session, request.rubric)
            named[request.rubric] = (version.rubric.prompt_id, len(version.criteria))
        owner, criteria = named[request.rubric]
        if owner is None or owner == prompt.id:
            total += criteria
    return total


def job_judgments(session: Session, selection: Selection) -> int:
    """Judgments a score job of ``selection`` asks for (completions x criteria)."""
    work, _ = select_work(session, selection)
    return sum(len(version.criteria) for _, version in work)


def check_reward_work(
    state: AppState,
    requests: Sequence[RewardRequest],
    *,
    judge: str,
    mode: str | None,
    include_drafts: bool,
) -> JudgeSpec:
    """The judge of a reward request, once its model can be kept and its work is in bounds."""
    with session_scope(state.engine) as session:
        spec = find_reward_judge(session, judge, mode)
        judges = spec.jury_members() or [spec]  # a jury is judged by each of its members
        for one in judges:
            state.judges.check(one)
        count = reward_judgments(session, requests, include_drafts) * len(judges)
    _refuse_past(
        count,
        state.settings.api.max_reward_judgments,
        f"({len(requests)} completions x the criteria of their rubrics)",
        "per reward request; send smaller batches",
        "body.items",
    )
    return spec


def check_job_work(state: AppState, session: Session, selection: Selection) -> None:
    _refuse_past(
        job_judgments(session, selection),
        state.settings.api.max_job_judgments,
        "(the selected completions x the criteria of their rubrics)",
        "per score job; select less (by prompt, source or completion ids)",
        "body",
    )


def _refuse_past(count: int, limit: int, what: str, advice: str, field: str) -> None:
    """413 naming the work asked for and the bound, before anything is stored or judged."""
    if count > limit:
        raise ApiError(413, f"{count} judgments {what}: at most {limit} {advice}", field)
