"""Judge configs with what is on record about their quality: evaluations against labelled
data (``judges evaluate``) and attack audits (``judges audit``). Where nothing is stored, the
page says so and shows the command that would store it."""

from __future__ import annotations

from collections import defaultdict

from fastapi import Depends
from sqlalchemy import func, select
from sqlalchemy.orm import selectinload
from starlette.responses import Response

from rubricsvc.models import JudgeAudit, JudgeConfig, JudgeEvaluation, Judgment
from rubricsvc.ui.routes.common import PageContext, page_context, page_router

router = page_router("/ui")


@router.get("/judges")
def judges_page(context: PageContext = Depends(page_context)) -> Response:
    session = context.session
    configs = list(session.scalars(select(JudgeConfig).order_by(JudgeConfig.name, JudgeConfig.id)))
    evaluations: dict[int, list[JudgeEvaluation]] = defaultdict(list)
    for evaluation in session.scalars(
        select(JudgeEvaluation)
        .options(selectinload(JudgeEvaluation.label_set))
        .order_by(JudgeEvaluation.id.desc())
    ):
        evaluations[evaluation.judge_config_id].append(evaluation)
    audits: dict[int, list[JudgeAudit]] = defaultdict(list)
    for audit in session.scalars(select(JudgeAudit).order_by(JudgeAudit.id.desc())):
        audits[audit.judge_config_id].append(audit)
    # One grouped count, not a count per config.
    judged = {
        config_id: count
        for config_id, count in session.execute(
            select(Judgment.judge_config_id, func.count(Judgment.id)).group_by(
                Judgment.judge_config_id
            )
        )
    }
    return context.render(
        "judges.html",
        configs=configs,
        evaluations=evaluations,
        audits=audits,
        judged=judged,
    )
