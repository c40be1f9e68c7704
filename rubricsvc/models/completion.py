"""Completions: responses (rollouts) to a prompt, the things that get scored."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from rubricsvc.models.base import HASH_LENGTH, Base, CreatedAtMixin, JSONType
from rubricsvc.models.prompt import Prompt

if TYPE_CHECKING:
    from rubricsvc.models.document import CompletionDocument


class Completion(CreatedAtMixin, Base):
    """One response to a prompt, with where it came from (policy, checkpoint, run)."""

    __tablename__ = "completions"

    id: Mapped[int] = mapped_column(primary_key=True)
    prompt_id: Mapped[int] = mapped_column(ForeignKey("prompts.id"), index=True)
    # Set by the caller to make ingestion idempotent; None for anonymous rollouts.
    external_id: Mapped[str | None] = mapped_column(String(200), unique=True)
    text: Mapped[str] = mapped_column(Text)
    # An agent's trajectory: the messages (tool calls, tool results) that led to ``text``, the
    # final answer; what trajectory criteria and checks read. None for a plain response.
    messages: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONType)
    # sha256 of the text: with the prompt's hash, the content part of the judgment cache key.
    content_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), index=True)
    source: Mapped[str | None] = mapped_column(String(200), index=True)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)

    prompt: Mapped[Prompt] = relationship()
    # The evidence it used, in the order it lists it (``rubricsvc.documents``).
    documents: Mapped[list[CompletionDocument]] = relationship(
        order_by="CompletionDocument.position", cascade="all, delete-orphan"
    )
