"""Whether a request may be scored with unreviewed drafts.

A draft version is a rubric no person has approved yet (most are written by an LLM, and an
evolved or imported one may hold any text). The review workbench promises that a person approves
each one before it becomes a reward, so a key asks for drafts with ``include_drafts: true``
only where its holder could approve them (the ``review`` scope, or ``admin``), or where the
server's operator chose to score drafts for everyone (``RUBRICSVC_SCORING_USE_DRAFTS=true``,
which is also what a request that does not say gets).
"""

from __future__ import annotations

from rubricsvc.api.auth import scope_error
from rubricsvc.api.errors import ApiError
from rubricsvc.apikeys import Scope
from rubricsvc.config import ScoringSettings
from rubricsvc.models import ApiKey


def drafts_allowed(
    settings: ScoringSettings, key: ApiKey | None, asked: bool | None, field: str
) -> bool:
    """Whether drafts are scored for a request that asked ``asked`` (None: it did not say),
    sent with ``key``; 403 naming ``field`` where the key may not ask for them. ``key`` is
    None only for callers that checked no key (an app assembled without keys)."""
    if asked is None:
        return settings.use_drafts
    if not asked or settings.use_drafts or key is None:
        return asked
    refused = scope_error(key, Scope.REVIEW)
    if refused is not None:
        raise ApiError(
            403,
            f"include_drafts: scoring with unreviewed drafts needs a key with the review scope "
            f"({refused}), or a server that scores drafts for every key "
            "(RUBRICSVC_SCORING_USE_DRAFTS=true)",
            field,
            code="forbidden",
        )
    return True
