"""Evidence documents (search results, cited pages) and which completions used them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from rubricsvc.models.base import HASH_LENGTH, Base, CreatedAtMixin


class Document(CreatedAtMixin, Base):
    """A document a completion drew on, stored once by the hash of its url, title and text and
    shared by every completion that used it."""

    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), unique=True)
    url: Mapped[str | None] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    retrieved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class CompletionDocument(Base):
    """A document as one completion lists it: its position (from 1) and the label the
    completion cites it by (``"3"`` for ``[3]``), when it has one."""

    __tablename__ = "completion_documents"
    __table_args__ = (UniqueConstraint("completion_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    completion_id: Mapped[int] = mapped_column(ForeignKey("completions.id"))
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    label: Mapped[str | None] = mapped_column(String(200))

    document: Mapped[Document] = relationship()
