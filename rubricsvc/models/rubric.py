"""Rubrics, their immutable versions, and the criteria inside a version."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from rubricsvc.models.base import HASH_LENGTH, Base, CreatedAtMixin, JSONType, str_enum
from rubricsvc.models.prompt import Prompt


class VersionStatus(enum.StrEnum):
    DRAFT = "draft"
    APPROVED = "approved"
    RETIRED = "retired"


class Origin(enum.StrEnum):
    HUMAN = "human"
    LLM = "llm"
    IMPORTED = "imported"
    # Grown during training by an evolution run (rubricsvc/evolution/): never approved by it.
    EVOLVED = "evolved"


class Category(enum.StrEnum):
    ESSENTIAL = "essential"
    IMPORTANT = "important"
    OPTIONAL = "optional"
    PITFALL = "pitfall"


class CriterionKind(enum.StrEnum):
    JUDGE = "judge"  # judged by an LLM
    CHECK = "check"  # a deterministic check, no model
    CITATIONS = "citations"  # the response's cited claims, each judged against its document


class CriterionTarget(enum.StrEnum):
    """What a criterion is judged on."""

    RESPONSE = "response"  # the final answer
    TRAJECTORY = "trajectory"  # the agent's messages, tool calls and results that led to it


class Rubric(CreatedAtMixin, Base):
    """A named rubric; its content lives in versions."""

    __tablename__ = "rubrics"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    # None for a rubric shared by many prompts (a scenario rubric).
    prompt_id: Mapped[int | None] = mapped_column(ForeignKey("prompts.id"), index=True)
    description: Mapped[str | None] = mapped_column(Text)

    prompt: Mapped[Prompt | None] = relationship()
    versions: Mapped[list[RubricVersion]] = relationship(
        back_populates="rubric",
        order_by="RubricVersion.number",
        foreign_keys="RubricVersion.rubric_id",
    )


class RubricVersion(CreatedAtMixin, Base):
    """One immutable snapshot of a rubric's criteria.

    Only ``status`` and the review fields may change after saving: they describe the
    lifecycle of the version, not its content. Everything else is frozen by ``rubrics.versions``
    (no update), an ORM flush guard and database triggers.
    """

    __tablename__ = "rubric_versions"
    __table_args__ = (
        UniqueConstraint("rubric_id", "number"),
        # The review queue: drafts, newest or oldest first.
        Index("ix_rubric_versions_status_created_at", "status", "created_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    rubric_id: Mapped[int] = mapped_column(ForeignKey("rubrics.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("rubric_versions.id"))
    # sha256 of the canonical criteria list: equal content, equal hash.
    content_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), index=True)
    title: Mapped[str | None] = mapped_column(Text)
    # Weight of each theme (dimension) for dimension-weighted aggregation (RACE); None = equal.
    dimension_weights: Mapped[dict[str, float] | None] = mapped_column(JSONType)
    origin: Mapped[Origin] = mapped_column(str_enum(Origin, "origin"))
    # generator model, template hash and sampling (llm); source and path (imported); author (human)
    origin_detail: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    note: Mapped[str | None] = mapped_column(Text)

    # Lifecycle (mutable).
    status: Mapped[VersionStatus] = mapped_column(
        str_enum(VersionStatus, "version_status"), default=VersionStatus.DRAFT
    )
    reviewed_by: Mapped[str | None] = mapped_column(String(200))
    reviewed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    review_note: Mapped[str | None] = mapped_column(Text)

    rubric: Mapped[Rubric] = relationship(back_populates="versions", foreign_keys=[rubric_id])
    parent: Mapped[RubricVersion | None] = relationship(remote_side=[id])
    criteria: Mapped[list[Criterion]] = relationship(
        back_populates="version", order_by="Criterion.position"
    )

    @property
    def ref(self) -> str:
        """Human reference ``name@number``."""
        return f"{self.rubric.name}@{self.number}"


# The columns of rubric_versions that the lifecycle may change; all others are content.
MUTABLE_VERSION_COLUMNS = frozenset({"status", "reviewed_by", "reviewed_at", "review_note"})


class Criterion(Base):
    """One weighted item of a rubric version (negative weight = a pitfall)."""

    __tablename__ = "criteria"
    __table_args__ = (UniqueConstraint("version_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("rubric_versions.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    explanation: Mapped[str | None] = mapped_column(Text)
    weight: Mapped[float] = mapped_column(Float)
    category: Mapped[Category] = mapped_column(str_enum(Category, "category"))
    theme: Mapped[str | None] = mapped_column(String(100))
    kind: Mapped[CriterionKind] = mapped_column(str_enum(CriterionKind, "criterion_kind"))
    # {"type": "binary"} or {"type": "ordinal", "levels": [{"score": 1, "description": ...}]}
    scale: Mapped[dict[str, Any]] = mapped_column(JSONType)
    # The spec of a deterministic check (kind == "check"), else None.
    check: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    required: Mapped[bool] = mapped_column(Boolean, default=False)
    tags: Mapped[list[str]] = mapped_column(JSONType, default=list)
    # Content hashes of the documents a drafted criterion came from (None: none).
    evidence: Mapped[list[str] | None] = mapped_column(JSONType)
    target: Mapped[str] = mapped_column(
        String(16), default=CriterionTarget.RESPONSE.value, server_default="response"
    )
    # sha256 of what a judge sees of this criterion (text, explanation, scale, check):
    # part of the judgment cache key.
    content_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), index=True)

    version: Mapped[RubricVersion] = relationship(back_populates="criteria")
