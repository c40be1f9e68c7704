"""Who may review a version: the four-eyes rule between the author of a version and its
reviewer.

A version's author is the API key (or the person) that saved it: ``origin_detail.saved_by``
is written by the server from the key, never taken from the client, and ``author`` is what a
human-authored file says. Unless a server allows self-review, nobody approves their own
version, so every approved rubric was read by a second person.
"""

from __future__ import annotations

from rubricsvc.errors import ForbiddenError
from rubricsvc.models import RubricVersion
from rubricsvc.rubrics.schemas import RubricSpec


def with_saved_by(spec: RubricSpec, saver: str) -> RubricSpec:
    """``spec`` recording who saves it; whatever the client wrote there is replaced."""
    detail = {**spec.origin_detail, "saved_by": saver}
    return spec.model_copy(update={"origin_detail": detail})


def authors_of(version: RubricVersion) -> set[str]:
    detail = version.origin_detail or {}
    return {str(detail[k]) for k in ("saved_by", "author") if detail.get(k)}


def check_not_own(version: RubricVersion, reviewer: str, *, allowed: bool) -> None:
    """Refuse ``reviewer`` approving a version they saved, unless self-review is ``allowed``."""
    if not allowed and reviewer in authors_of(version):
        raise ForbiddenError(
            f"{version.ref} was saved by {reviewer!r}: another reviewer must approve it "
            "(or the server must allow self-review: RUBRICSVC_API_ALLOW_SELF_REVIEW=true)"
        )
