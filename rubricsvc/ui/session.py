"""Review sessions: an API key exchanged for a signed cookie, and the CSRF tokens of forms.

The cookie holds the key's id, the head of its hash and a random nonce, signed and
timestamped (itsdangerous); it is HttpOnly (scripts cannot read it) and SameSite=Lax (other
sites' forms do not carry it). The secret itself never reaches the browser again after
sign-in. Every request looks the key up, so revoking it ends its sessions at once.

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

from itsdangerous import BadSignature, URLSafeTimedSerializer

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
    nonce: str


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
    def session_cookie(self, key_id: int, key_hash: str) -> str:
        return self._sessions.dumps([key_id, key_hash[:16], secrets.token_urlsafe(16)])

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
