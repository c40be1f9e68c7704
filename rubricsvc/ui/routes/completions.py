"""A completion: its response, its score under each judge and rubric version, and each
criterion's verdict with the judge's reasoning and probabilities; or two side by side."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, Query
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload
from starlette.responses import Response

from rubricsvc.models import Completion, Judgment, RubricVersion, Score
from rubricsvc.ui.deps import (
    PageRefused,
)
from rubricsvc.ui.routes.common import PageContext, page_context, page_router

router = page_router("/ui/completions")


@dataclass
class ScoredView:
    """One score of a completion and the verdicts behind it."""

    score: Score
    version: RubricVersion
    verdicts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CompletionView:
    completion: Completion
    scores: list[ScoredView]


def _completion_view(session: Session, completion_id: int) -> CompletionView:
    completion = session.scalar(
        select(Completion)
        .where(Completion.id == completion_id)
        .options(selectinload(Completion.prompt))
    )
    if completion is None:
        raise PageRefused(404, f"No completion with id {completion_id}.")
    rows = session.execute(
        select(Score, RubricVersion)
        .join(RubricVersion, Score.rubric_version_id == RubricVersion.id)
        .where(Score.completion_id == completion.id)
        .options(selectinload(Score.judge_config), selectinload(RubricVersion.rubric))
        .order_by(Score.judge_config_id, RubricVersion.id, Score.aggregation)
    ).all()
    scores = [ScoredView(score, version) for score, version in rows]
    judgment_ids = {
        int(entry["judgment_id"])
        for view in scores
        for entry in view.score.details.get("criteria", [])
        if entry.get("judgment_id") is not None
    }
    judgments = (
        {j.id: j for j in session.scalars(select(Judgment).where(Judgment.id.in_(judgment_ids)))}
        if judgment_ids
        else {}
    )
    for view in scores:
        view.verdicts = [
            _verdict(entry, judgments.get(int(entry.get("judgment_id") or 0)))
            for entry in view.score.details.get("criteria", [])
        ]
    return CompletionView(completion, scores)


def _verdict(entry: dict[str, Any], judgment: Judgment | None) -> dict[str, Any]:
    """What the page shows of one criterion's verdict."""
    detail = (judgment.detail if judgment else None) or {}
    # A one-token judge's verdict is P(yes) among the two answers it may give; the raw
    # probabilities are shown beside it with the mass they hold of the whole distribution.
    p_yes, p_no = detail.get("p_yes"), detail.get("p_no")
    probability = (
        p_yes / (p_yes + p_no)
        if isinstance(p_yes, float) and isinstance(p_no, float) and p_yes + p_no > 0
        else detail.get("expected")
    )
    reasoning = judgment.reasoning if judgment else None
    if not reasoning and judgment is not None and judgment.error:
        reasoning = judgment.error
    return {
        "text": entry.get("text", ""),
        "weight": entry.get("weight"),
        "status": entry.get("status", ""),
        "verdict": entry.get("verdict") or (judgment.verdict if judgment else None),
        "value": entry.get("value"),
        "probability": probability,
        "mass": detail.get("mass"),
        "reasoning": reasoning,
        "failure": entry.get("failure") or (judgment.failure if judgment else None),
        "one_token": judgment is not None and "p_yes" in detail and not judgment.reasoning,
    }


@router.get("/{completion_id}")
def completion_page(completion_id: int, context: PageContext = Depends(page_context)) -> Response:
    view = _completion_view(context.session, completion_id)
    peers = list(
        context.session.scalars(
            select(Completion.id)
            .where(
                Completion.prompt_id == view.completion.prompt_id,
                Completion.id != view.completion.id,
            )
            .order_by(Completion.id)
            .limit(50)
        )
    )
    return context.render("completion.html", view=view, peers=peers)


@router.get("/{completion_id}/compare")
def compare_page(
    completion_id: int,
    with_: int = Query(..., alias="with", description="The other completion's id."),
    context: PageContext = Depends(page_context),
) -> Response:
    left = _completion_view(context.session, completion_id)
    right = _completion_view(context.session, with_)
    return context.render("compare.html", views=[left, right])
