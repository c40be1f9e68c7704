"""A rubric version: read it, compare it, edit it into a new version, approve or retire it,
and see how its criteria behave under the judges that scored it."""

from __future__ import annotations

from fastapi import Depends, Query
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload
from starlette.datastructures import FormData
from starlette.responses import Response

from rubricsvc.apikeys import Scope
from rubricsvc.errors import ForbiddenError, RubricsvcError
from rubricsvc.evolution.history import track_history
from rubricsvc.models import (
    Document,
    EvolutionStep,
    JudgeConfig,
    Origin,
    Rubric,
    RubricVersion,
    Score,
)
from rubricsvc.rubrics import versions as rubric_versions
from rubricsvc.rubrics.analytics import chart_bars, rubric_analytics
from rubricsvc.rubrics.diff import diff_versions
from rubricsvc.rubrics.review import authors_of, check_not_own
from rubricsvc.scoring.judge_configs import find_judge
from rubricsvc.ui.deps import (
    PageRefused,
    Reviewer,
    UiState,
    checked_form,
    require_scope,
    ui_state,
)
from rubricsvc.ui.editing import CATEGORIES, edited_spec, form_of, posted_form
from rubricsvc.ui.routes.common import PageContext, page_context, page_router
from rubricsvc.validation.validity import DEFAULT_BELOW, criterion_validity, validity_judges

router = page_router("/ui/versions")


def _version(session: Session, version_id: int) -> RubricVersion:
    version = session.scalar(
        select(RubricVersion)
        .where(RubricVersion.id == version_id)
        .options(
            selectinload(RubricVersion.criteria),
            selectinload(RubricVersion.rubric).selectinload(Rubric.prompt),
        )
    )
    if version is None:
        raise PageRefused(404, f"No rubric version with id {version_id}.")
    return version


def _siblings(session: Session, version: RubricVersion) -> list[RubricVersion]:
    return list(
        session.scalars(
            select(RubricVersion)
            .where(RubricVersion.rubric_id == version.rubric_id)
            .order_by(RubricVersion.number)
        )
    )


def _review_state(
    version: RubricVersion, reviewer: Reviewer, state: UiState
) -> tuple[bool, str | None]:
    """Whether this reviewer may approve the version, and if not, why (shown by the button)."""
    if not reviewer.may(Scope.REVIEW):
        return False, f"Your key {reviewer.name!r} lacks the review scope: it cannot approve."
    if not state.settings.api.allow_self_review and reviewer.name in authors_of(version):
        return False, "You saved this version: another reviewer must approve it."
    return True, None


@router.get("/{version_id}")
def version_page(
    version_id: int,
    context: PageContext = Depends(page_context),
    state: UiState = Depends(ui_state),
) -> Response:
    session, reviewer = context.session, context.reviewer
    version = _version(session, version_id)
    siblings = _siblings(session, version)
    may_approve, refusal = _review_state(version, reviewer, state)
    return context.render(
        "version.html",
        version=version,
        siblings=siblings,
        children=[v for v in siblings if v.parent_id == version.id],
        # An evolved set's first version grows from another rubric's version.
        parent=next((v for v in siblings if v.id == version.parent_id), None)
        or (session.get(RubricVersion, version.parent_id) if version.parent_id else None),
        may_approve=may_approve,
        review_refused=refusal,
        may_edit=reviewer.may(Scope.AUTHOR),
        may_retire=reviewer.may(Scope.REVIEW),
        scored=session.scalar(
            select(Score.id).where(Score.rubric_version_id == version.id).limit(1)
        )
        is not None,
        evidence=_evidence_documents(session, version),
    )


def _evidence_documents(session: Session, version: RubricVersion) -> dict[str, Document]:
    """The documents the version's drafted criteria came from, by content hash (one query)."""
    hashes = {h for c in version.criteria for h in c.evidence or ()}
    if not hashes:
        return {}
    rows = session.scalars(select(Document).where(Document.content_hash.in_(hashes)))
    return {d.content_hash: d for d in rows}


@router.get("/{version_id}/evolution")
def evolution_page(version_id: int, context: PageContext = Depends(page_context)) -> Response:
    """An evolved version's history: the run's steps for its prompt (what each added, what
    went inactive, what it refused, the rollouts it read) and each evolved criterion's life."""
    version = _version(context.session, version_id)
    made = context.session.scalars(
        select(EvolutionStep)
        .where(EvolutionStep.version_after_id == version.id)
        .order_by(EvolutionStep.step)
        .limit(1)
    ).first()
    if version.origin != Origin.EVOLVED or made is None:
        raise PageRefused(404, f"{version.ref} was not grown by an evolution run.")
    history = track_history(made.track)
    return context.render(
        "evolution.html",
        version=version,
        run=made.track.run.name,
        history=history,
        made_at=made.step,
    )


@router.get("/{version_id}/diff")
def diff_page(
    version_id: int,
    against: int = Query(..., description="The version id to compare with."),
    context: PageContext = Depends(page_context),
) -> Response:
    version = _version(context.session, version_id)
    other = _version(context.session, against)
    if other.rubric_id != version.rubric_id:
        raise PageRefused(404, f"{other.ref} is not a version of {version.rubric.name}.")
    old, new = sorted((version, other), key=lambda v: v.number)
    diff = diff_versions(old, new)
    changed = {c.text for c in diff.changed}
    return context.render(
        "diff.html",
        version=version,
        old=old,
        new=new,
        diff=diff,
        removed={c.id for c in diff.removed},
        added={c.id for c in diff.added},
        changed=changed,
        siblings=_siblings(context.session, version),
    )


@router.get("/{version_id}/edit")
def edit_page(version_id: int, context: PageContext = Depends(page_context)) -> Response:
    require_scope(context.reviewer, Scope.AUTHOR, "editing saves a new version")
    version = _version(context.session, version_id)
    return context.render(
        "edit.html", version=version, form=form_of(version), categories=CATEGORIES
    )


@router.post("/{version_id}/edit")
def save_edit(
    version_id: int,
    form: FormData = Depends(checked_form),
    context: PageContext = Depends(page_context),
) -> Response:
    require_scope(context.reviewer, Scope.AUTHOR, "editing saves a new version")
    version = _version(context.session, version_id)
    edit = posted_form(form, version)
    spec = edited_spec(version, edit, context.reviewer.name)
    if spec is None:
        return context.render(
            "edit.html", status_code=422, version=version, form=edit, categories=CATEGORIES
        )
    saved = rubric_versions.save_rubric(context.session, spec, edited=version)
    if saved.outcome == "unchanged":
        return context.redirect(f"/ui/versions/{saved.version.id}", "No change: nothing saved.")
    return context.redirect(
        f"/ui/versions/{saved.version.id}",
        f"Saved {saved.version.ref} (a draft; its parent is {version.ref}).",
    )


@router.post("/{version_id}/approve")
def approve(
    version_id: int,
    form: FormData = Depends(checked_form),
    context: PageContext = Depends(page_context),
    state: UiState = Depends(ui_state),
) -> Response:
    require_scope(context.reviewer, Scope.REVIEW, "approving needs it")
    version = _version(context.session, version_id)
    name, note = context.reviewer.name, str(form.get("note") or "")
    try:
        check_not_own(version, name, allowed=state.settings.api.allow_self_review)
        rubric_versions.approve(context.session, version, name, note)
    except ForbiddenError as err:
        raise PageRefused(403, str(err)) from None
    except RubricsvcError as err:
        raise PageRefused(409, str(err)) from None
    return context.redirect(f"/ui/versions/{version.id}", f"Approved {version.ref}.")


@router.post("/{version_id}/retire")
def retire(
    version_id: int,
    form: FormData = Depends(checked_form),
    context: PageContext = Depends(page_context),
) -> Response:
    require_scope(context.reviewer, Scope.REVIEW, "retiring needs it")
    version = _version(context.session, version_id)
    try:
        rubric_versions.retire(
            context.session, version, context.reviewer.name, str(form.get("note") or "")
        )
    except RubricsvcError as err:
        raise PageRefused(409, str(err)) from None
    return context.redirect(f"/ui/versions/{version.id}", f"Retired {version.ref}.")


@router.get("/{version_id}/analytics")
def analytics_page(
    version_id: int,
    judge: int | None = Query(None, description="Only this judge config's scores."),
    validity: str | None = Query(
        None, max_length=200, description="Criterion validity under this judge (a name)."
    ),
    context: PageContext = Depends(page_context),
) -> Response:
    session = context.session
    version = _version(session, version_id)
    analytics = rubric_analytics(session, version, judge)
    validity_names = validity_judges(session, version)
    validity = validity.strip() if validity and validity.strip() in validity_names else None
    valid = (
        {
            row.criterion_id: row
            for row in criterion_validity(session, version, find_judge(session, validity))
        }
        if validity
        else {}
    )
    judges = list(
        session.scalars(
            select(JudgeConfig)
            .where(
                JudgeConfig.id.in_(
                    select(Score.judge_config_id)
                    .where(Score.rubric_version_id == version.id)
                    .distinct()
                )
            )
            .order_by(JudgeConfig.name)
        )
    )
    return context.render(
        "analytics.html",
        version=version,
        analytics=analytics,
        bars=chart_bars(analytics),
        judges=judges,
        judge=judge,
        validity=validity,
        validity_judges=validity_names,
        valid=valid,
        below=DEFAULT_BELOW,
    )
