"""Rubric assignments: the shared rubrics a prompt's or one completion's scoring also uses."""

from __future__ import annotations

from sqlalchemy import ForeignKey, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from rubricsvc.models.base import Base, CreatedAtMixin
from rubricsvc.models.rubric import Rubric


class RubricAssignment(CreatedAtMixin, Base):
    """A rubric (by name: scoring uses its newest usable version) that every completion of a
    prompt, or one completion, is scored against besides its prompt's own rubrics. Exactly
    one of ``prompt_id`` and ``completion_id`` is set (``rubricsvc.assignments`` keeps it so)."""

    __tablename__ = "rubric_assignments"
    __table_args__ = (
        UniqueConstraint("rubric_id", "prompt_id"),
        UniqueConstraint("rubric_id", "completion_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    rubric_id: Mapped[int] = mapped_column(ForeignKey("rubrics.id"), index=True)
    prompt_id: Mapped[int | None] = mapped_column(ForeignKey("prompts.id"), index=True)
    completion_id: Mapped[int | None] = mapped_column(ForeignKey("completions.id"), index=True)

    rubric: Mapped[Rubric] = relationship()
