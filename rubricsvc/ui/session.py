"""Review sessions: an API key exchanged for a signed cookie, and the CSRF tokens of forms.

The cookie holds the key's id, the head of its hash and the session's id (256 random bits),
signed and timestamped (itsdangerous); it is HttpOnly (scripts cannot read it) and
SameSite=Lax (other sites' forms do not carry it). The secret itself never reaches the
browser again after sign-in. A session is live while its row is in ``review_sessions`` (only
the hash of its id is stored): signing out deletes the row, so the cookie is refused by every
server process from then on, as it is once its key is revoked. Every request looks the
session and its key up in one query.

A form's CSRF token is an HMAC of the session's nonce: a page of ours can put it in a form,
another site cannot know it. The sign-in form, before any session, uses the same token
bound to a short-lived signed cookie of its own (double submit).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session

from rubricsvc.models import ApiKey, ReviewSession
from rubricsvc.models.base import utcnow

SESSION_COOKIE = "rubricsvc_session"
SIGN_IN_COOKIE = "rubricsvc_sign_in"
FLASH_COOKIE = "rubricsvc_flash"
SIGN_IN_SECONDS = 30 * 60
FLASH_SECONDS = 60

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionData:
    key_id: int
    key_hash_head: str  # a key re-created under the same id cannot inherit the session
    nonce: str  # the session's id: its row in review_sessions, and its CSRF tokens' secret


class SessionSigner:
    """Signs and checks the review pages' cookies with one server secret."""

    def __init__(self, secret: str | None, max_age_seconds: float) -> None:
        if secret is None:
            log.warning(
                "review pages: no RUBRICSVC_API_SESSION_SECRET, sessions end when the server "
                "restarts (set it, the same in every server process)"
            )
            secret = secrets.token_urlsafe(32)
        self._secret = secret.encode()
        self.max_age = int(max_age_seconds)
        self._sessions = URLSafeTimedSerializer(secret, salt="rubricsvc.ui.session")
        self._sign_in = URLSafeTimedSerializer(secret, salt="rubricsvc.ui.sign-in")
        self._flash = URLSafeTimedSerializer(secret, salt="rubricsvc.ui.flash")

    # Sessions.
    def session_cookie(self, key_id: int, key_hash: str, session_id: str) -> str:
        """The cookie of session ``session_id`` (``start_session``) of key ``key_id``."""
        return self._sessions.dumps([key_id, key_hash[:16], session_id])

    def read_session(self, cookie: str | None) -> SessionData | None:
        """The session a cookie carries, or None if absent, forged, tampered with or expired."""
        if not cookie:
            return None
        try:
            key_id, head, nonce = self._sessions.loads(cookie, max_age=self.max_age)
        except (BadSignature, ValueError, TypeError):
            return None
        if not (isinstance(key_id, int) and isinstance(head, str) and isinstance(nonce, str)):
            return None
        return SessionData(key_id, head, nonce)

    # The sign-in form's own nonce.
    def sign_in_cookie(self) -> tuple[str, str]:
        """A new sign-in cookie and its nonce."""
        nonce = secrets.token_urlsafe(16)
        return self._sign_in.dumps(nonce), nonce

    def read_sign_in(self, cookie: str | None) -> str | None:
        return _signed_text(self._sign_in, cookie, SIGN_IN_SECONDS)

    # CSRF tokens.
    def csrf_token(self, nonce: str) -> str:
        return hmac.new(self._secret, b"csrf:" + nonce.encode(), hashlib.sha256).hexdigest()

    def csrf_valid(self, nonce: str | None, token: object) -> bool:
        if not nonce or not isinstance(token, str) or not token:
            return False
        return hmac.compare_digest(self.csrf_token(nonce), token)

    # Flash messages: one line shown on the page after a redirect.
    def flash_cookie(self, message: str) -> str:
        return self._flash.dumps(message)

    def read_flash(self, cookie: str | None) -> str | None:
        return _signed_text(self._flash, cookie, FLASH_SECONDS)


# Sessions in the database: what makes one live in every server process.


def _id_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def start_session(db: Session, key: ApiKey, seconds: float) -> str:
    """A new session of ``key`` for ``seconds``: its id (for ``session_cookie``). Sessions
    past their end are deleted here, so the table holds about the live ones."""
    now = utcnow()
    db.execute(delete(ReviewSession).where(ReviewSession.expires_at <= now))
    session_id = secrets.token_urlsafe(32)
    db.add(
        ReviewSession(
            id_hash=_id_hash(session_id),
            key_id=key.id,
            expires_at=now + timedelta(seconds=seconds),
        )
    )
    return session_id


# Built once: every page asks it, and building the statement cost more than running it
# (SQLite: 0.36 ms of CPU a check with it, 0.59 ms building it each time).
_SESSION_KEY = (
    select(ApiKey)
    .join(ReviewSession, ReviewSession.key_id == ApiKey.id)
    .where(
        ReviewSession.id_hash == bindparam("id_hash"),
        ReviewSession.expires_at > bindparam("now"),
        ApiKey.id == bindparam("key_id"),
    )
)


def session_key(db: Session, data: SessionData) -> ApiKey | None:
    """The key of a live session: None once it was ended or expired, or its key revoked or
    re-created (one query)."""
    key = db.scalar(
        _SESSION_KEY, {"id_hash": _id_hash(data.nonce), "now": utcnow(), "key_id": data.key_id}
    )
    if key is None or key.revoked_at is not None or key.key_hash[:16] != data.key_hash_head:
        return None
    return key


def end_session(db: Session, data: SessionData) -> None:
    """Sign out: the session is refused from now on, by every server process."""
    db.execute(delete(ReviewSession).where(ReviewSession.id_hash == _id_hash(data.nonce)))


def _signed_text(
    serializer: URLSafeTimedSerializer, cookie: str | None, max_age: int
) -> str | None:
    """The text a cookie carries, or None if absent, forged, tampered with, expired or not
    a text."""
    if not cookie:
        return None
    try:
        value = serializer.loads(cookie, max_age=max_age)
    except BadSignature:
        return None
    return value if isinstance(value, str) else None
