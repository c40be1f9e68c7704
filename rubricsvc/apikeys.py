"""API keys: created with scopes, stored as a hash, checked on every request but health.

Scopes: ``read`` (list and fetch), ``author`` (write prompts, rubrics, completions), ``review``
(approve and retire rubric versions), ``score`` (submit score jobs, get rewards) and ``admin``
(everything). Only ``admin`` implies the others, so a trainer's key can be ``score`` alone, a
dashboard's ``read`` alone, and an author need not be able to approve their own drafts. A secret is shown
once, when it is created: ``rsk_`` and 43 URL-safe characters (256 random bits).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
import weakref
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import event, select, update
from sqlalchemy.orm import Session

from rubricsvc.errors import ConflictError, NotFoundError, ValidationFailed
from rubricsvc.models import ApiKey
from rubricsvc.models.base import utcnow

SECRET_PREFIX = "rsk_"


class RevocationListener(Protocol):
    def key_revoked(self, key_id: int) -> None: ...


# Told of each key revoked in this process (the servers' key caches), held weakly.
_revocation_listeners: weakref.WeakSet[RevocationListener] = weakref.WeakSet()


def on_revocation(listener: RevocationListener) -> None:
    """Call ``listener.key_revoked(key_id)`` for every key this process revokes, once the
    revocation is committed (held weakly: it stops when the listener is gone)."""
    _revocation_listeners.add(listener)


class Scope(enum.StrEnum):
    READ = "read"
    AUTHOR = "author"
    REVIEW = "review"
    SCORE = "score"
    ADMIN = "admin"


def allows(scopes: list[str], needed: Scope) -> bool:
    return needed.value in scopes or Scope.ADMIN.value in scopes


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    secret: str  # shown once; only its hash is stored


def create_key(session: Session, name: str, scopes: list[str]) -> CreatedKey:
    if not scopes:
        raise ValidationFailed("give at least one scope: " + ", ".join(s.value for s in Scope))
    unknown = [s for s in scopes if s not in {m.value for m in Scope}]
    if unknown:
        raise ValidationFailed(
            f"unknown scope {unknown[0]!r}; choose from {', '.join(s.value for s in Scope)}"
        )
    if session.scalar(select(ApiKey.id).where(ApiKey.name == name)) is not None:
        raise ConflictError(f"an API key named {name!r} exists; revoke it or pick another name")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        name=name,
        prefix=secret[: len(SECRET_PREFIX) + 6],
        key_hash=hash_secret(secret),
        scopes=sorted(set(scopes)),
    )
    session.add(key)
    session.flush()
    return CreatedKey(key, secret)


def authenticate(session: Session, secret: str) -> ApiKey | None:
    """The live key with this secret, or None."""
    digest = hash_secret(secret)
    key = session.scalar(select(ApiKey).where(ApiKey.key_hash == digest))
    # The lookup is by hash; compare again in constant time so timing says nothing either way.
    if key is None or key.revoked_at is not None or not hmac.compare_digest(key.key_hash, digest):
        return None
    return key


def list_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.id)))


def revoke_key(session: Session, name: str) -> ApiKey:
    key = session.scalar(select(ApiKey).where(ApiKey.name == name))
    if key is None:
        raise NotFoundError(f"no API key named {name!r}")
    if key.revoked_at is None:
        session.execute(update(ApiKey).where(ApiKey.id == key.id).values(revoked_at=utcnow()))
        session.refresh(key)
        key_id = key.id
        # After the commit: told earlier, a server could read the key, still live, back in.
        event.listen(session, "after_commit", lambda _session: _announce_revoked(key_id), once=True)
    return key


def _announce_revoked(key_id: int) -> None:
    for listener in list(_revocation_listeners):
        listener.key_revoked(key_id)
