"""/v1/rubrics: create (new content becomes a new version), read, diff, review, generate.

Rubric names may hold slashes (``demo/sleep-advice``), so the name is the rest of the path
and the routes with a suffix (``/versions``, ``/diff``) are declared before the bare one.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Response
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.api.boundary import CheckedRoute
from rubricsvc.api.deps import DB_SESSION, app_state, require
from rubricsvc.api.errors import ApiError, backend_unavailable
from rubricsvc.api.routes.common import Paging, paged_rows, version_out
from rubricsvc.api.schemas import (
    DraftOut,
    GenerateIn,
    GenerateOut,
    Page,
    ReviewIn,
    SavedRubric,
    VersionOut,
)
from rubricsvc.api.state import AppState
from rubricsvc.apikeys import Scope
from rubricsvc.errors import NotFoundError
from rubricsvc.models import ApiKey, RubricVersion, VersionStatus
from rubricsvc.rubrics import versions as rubric_versions
from rubricsvc.rubrics.diff import diff_versions
from rubricsvc.rubrics.draft_inputs import requests_from_database
from rubricsvc.rubrics.generation import GenerationOptions, generate_rubrics
from rubricsvc.rubrics.generator import GeneratorSpec, with_overrides
from rubricsvc.rubrics.repository import get_rubric, latest_version, versions_query
from rubricsvc.rubrics.review import check_not_own, with_saved_by
from rubricsvc.rubrics.schemas import RubricSpec

router = APIRouter(prefix="/v1/rubrics", tags=["rubrics"], route_class=CheckedRoute)

NAME = Path(description="The rubric's name (may contain slashes).", max_length=200)
NUMBER = Path(ge=1, le=2**31 - 1, description="The version number (N in NAME@N).")


def _version(session: Session, name: str, number: int | None = None) -> RubricVersion:
    rubric = get_rubric(session, name)
    if rubric is None:
        raise NotFoundError(f"no rubric named {name!r}")
    if number is None:
        found = latest_version(session, rubric)
    else:
        found = session.scalar(
            select(RubricVersion).where(
                RubricVersion.rubric_id == rubric.id, RubricVersion.number == number
            )
        )
    if found is None:
        raise NotFoundError(f"rubric {name!r} has no version {number}")
    return found


@router.get("", response_model=Page, dependencies=[Depends(require(Scope.READ))])
def list_rubrics(
    status: VersionStatus | None = Query(None, description="Only versions in this status."),
    all_versions: bool = Query(False, description="Every version, not only each latest."),
    paging: Paging = Depends(),
    session: Session = DB_SESSION,
) -> Page:
    query = versions_query(status=status, all_versions=all_versions)
    rows, total = paged_rows(session, query, paging)
    return paging.page([version_out(v) for v in rows], total)


@router.post(
    "",
    response_model=SavedRubric,
    status_code=201,
    responses={200: {"model": SavedRubric, "description": "Same content as the latest version."}},
)
def create_rubric(
    response: Response,
    spec: RubricSpec = Body(description="A rubric in the rubric file format (one rubric)."),
    key: ApiKey = Depends(require(Scope.AUTHOR)),
    session: Session = DB_SESSION,
) -> SavedRubric:
    """Save a rubric: a new rubric, a new version of it, or (same content) the latest one.
    The version records the saving key's name (``origin_detail.saved_by``)."""
    result = rubric_versions.save_rubric(session, with_saved_by(spec, key.name))
    if result.outcome == "unchanged":
        response.status_code = 200
    return SavedRubric(outcome=result.outcome, version=version_out(result.version))


@router.post("/generate", response_model=GenerateOut, dependencies=[Depends(require(Scope.AUTHOR))])
def generate(
    body: GenerateIn, session: Session = DB_SESSION, state: AppState = Depends(app_state)
) -> GenerateOut:
    """Draft a rubric for each prompt with the server's generator; drafts await review."""
    limit = state.settings.api.max_generate_prompts
    if len(body.prompt_ids) > limit:
        raise ApiError(
            413, f"{len(body.prompt_ids)} prompts: at most {limit} per request", "body.prompt_ids"
        )
    try:
        spec = with_overrides(
            GeneratorSpec(),
            min_criteria=body.min_criteria,
            max_criteria=body.max_criteria,
            temperature=body.temperature,
            seed=body.seed,
            retries=body.retries,
        )
    except ValidationError as err:  # pragma: no cover - with_overrides raises ValidationFailed
        raise ApiError(422, str(err), "body") from None
    state.judges.check(spec)  # the generator's model must fit the kept set (422 if not)
    requests = requests_from_database(session, body.prompt_ids)
    options = GenerationOptions(name_prefix=body.name_prefix, with_generic=body.with_generic)
    # Loaded once and kept (shared with a judge of the same model).
    backend = state.judges.factory(spec)
    report = generate_rubrics(session, requests, spec, backend, options, checkpoint=session.commit)
    failure = report.backend_failure()
    if failure is not None:  # nothing drafted, and the generator is to blame: 502, or 503
        raise backend_unavailable(failure)
    return GenerateOut(
        generator_hash=report.generator_hash,
        drafts=[
            DraftOut(
                prompt=o.prompt, status=o.status, ref=o.ref, attempts=o.attempts, error=o.error
            )
            for o in report.outcomes
        ],
        backend_requests=report.backend_requests,
    )


@router.get(
    "/{name:path}/versions", response_model=Page, dependencies=[Depends(require(Scope.READ))]
)
def list_rubric_versions(
    name: str = NAME, paging: Paging = Depends(), session: Session = DB_SESSION
) -> Page:
    if get_rubric(session, name) is None:
        raise NotFoundError(f"no rubric named {name!r}")
    rows, total = paged_rows(session, versions_query(rubric=name, all_versions=True), paging)
    return paging.page([version_out(v) for v in rows], total)


@router.get(
    "/{name:path}/versions/{number}",
    response_model=VersionOut,
    dependencies=[Depends(require(Scope.READ))],
)
def get_rubric_version(
    name: str = NAME, number: int = NUMBER, session: Session = DB_SESSION
) -> VersionOut:
    return version_out(_version(session, name, number))


# The review actions and what each does to a version (both keep it stored).
REVIEW_ACTIONS = {"approve": rubric_versions.approve, "retire": rubric_versions.retire}


@router.post(
    "/{name:path}/versions/{number}/{action}",
    response_model=VersionOut,
)
def review_version(
    action: Literal["approve", "retire"],
    name: str = NAME,
    number: int = NUMBER,
    body: ReviewIn | None = None,
    key: ApiKey = Depends(require(Scope.REVIEW)),
    session: Session = DB_SESSION,
    state: AppState = Depends(app_state),
) -> VersionOut:
    """Approve a draft (scoring and rewards use approved versions by default), or retire a
    version: it is taken out of use and stays stored, so past scores remain traceable.

    Needs the ``review`` scope; the reviewer on record is the key's name. Unless the server
    allows self-review, a key cannot approve a version it authored."""
    version = _version(session, name, number)
    if action == "approve":
        check_not_own(version, key.name, allowed=state.settings.api.allow_self_review)
    review = REVIEW_ACTIONS[action]
    return version_out(review(session, version, key.name, body.note if body else None))


@router.get("/{name:path}/diff", dependencies=[Depends(require(Scope.READ))])
def diff(
    name: str = NAME,
    old: int = Query(ge=1, le=2**31 - 1, alias="from", description="The older version number."),
    new: int = Query(ge=1, le=2**31 - 1, alias="to", description="The newer version number."),
    session: Session = DB_SESSION,
) -> dict[str, object]:
    """How version ``to`` differs from version ``from``: criteria added, removed, changed."""
    return diff_versions(_version(session, name, old), _version(session, name, new)).to_dict()


@router.get("/{name:path}", response_model=VersionOut, dependencies=[Depends(require(Scope.READ))])
def get_rubric_latest(name: str = NAME, session: Session = DB_SESSION) -> VersionOut:
    """The rubric's latest version."""
    return version_out(_version(session, name))
