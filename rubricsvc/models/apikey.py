"""API keys of the HTTP service: only a hash of each secret is stored; and the review pages'
sessions signed in with them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from rubricsvc.models.base import HASH_LENGTH, Base, CreatedAtMixin, JSONType


class ApiKey(CreatedAtMixin, Base):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # The first characters of the secret, shown in listings so a leaked key can be recognized.
    prefix: Mapped[str] = mapped_column(String(16))
    # sha256 of the secret: keys are 256 random bits, so a fast hash is enough (no salt, no KDF).
    key_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), unique=True)
    scopes: Mapped[list[str]] = mapped_column(JSONType)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ReviewSession(CreatedAtMixin, Base):
    """A review session signed in on ``/ui/login`` (``rubricsvc.ui.session``): its cookie
    carries a random id, signed; the row is what makes the session live, in every server
    process. Signing out deletes it; rows past ``expires_at`` are deleted at a later sign-in."""

    __tablename__ = "review_sessions"

    # sha256 of the session's id: the database never holds what a cookie carries.
    id_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), primary_key=True)
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
