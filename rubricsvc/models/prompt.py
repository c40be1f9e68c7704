"""Prompts: the task a completion answers and a rubric judges against."""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, Text
from sqlalchemy.orm import Mapped, mapped_column

from rubricsvc.models.base import HASH_LENGTH, Base, CreatedAtMixin, JSONType


class Prompt(CreatedAtMixin, Base):
    """A task as chat messages; identified by the hash of its messages."""

    __tablename__ = "prompts"

    id: Mapped[int] = mapped_column(primary_key=True)
    # Same messages, same prompt: ingesting a data set twice does not duplicate prompts.
    content_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), unique=True)
    external_id: Mapped[str | None] = mapped_column(String(200), unique=True)
    messages: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    reference_answer: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)

    @property
    def text(self) -> str:
        """The last user message: the usual one-line view of a prompt."""
        users = [m["content"] for m in self.messages if m.get("role") == "user"]
        return str(users[-1] if users else self.messages[-1]["content"])
