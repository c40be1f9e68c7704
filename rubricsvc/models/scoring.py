"""Scores (a rubric version's aggregate for one completion) and score jobs."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from rubricsvc.models.base import Base, CreatedAtMixin, JSONType, str_enum, utcnow
from rubricsvc.models.judging import JudgeConfig


class ScoreStatus(enum.StrEnum):
    OK = "ok"  # every criterion judged
    PARTIAL = "partial"  # some judgments failed; renormalized over the rest, coverage < 1
    MASKED = "masked"  # coverage below the threshold: no value, never a zero


class JobStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Score(CreatedAtMixin, Base):
    """The aggregate of one completion under one rubric version, judge config and aggregation."""

    __tablename__ = "scores"
    __table_args__ = (
        UniqueConstraint("completion_id", "rubric_version_id", "judge_config_id", "aggregation"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    completion_id: Mapped[int] = mapped_column(ForeignKey("completions.id"), index=True)
    rubric_version_id: Mapped[int] = mapped_column(ForeignKey("rubric_versions.id"), index=True)
    judge_config_id: Mapped[int] = mapped_column(ForeignKey("judge_configs.id"), index=True)
    aggregation: Mapped[str] = mapped_column(String(50))
    value: Mapped[float | None] = mapped_column(Float)  # None when masked
    coverage: Mapped[float] = mapped_column(Float)  # share of |weight| judged ok
    status: Mapped[ScoreStatus] = mapped_column(str_enum(ScoreStatus, "score_status"))
    # {"criteria": [{criterion_id, weight, value, status}], "reason": why masked or capped}
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)

    judge_config: Mapped[JudgeConfig] = relationship()


class ScoreJob(CreatedAtMixin, Base):
    """A batch scoring request: what to score, how far it got, for progress and resumption."""

    __tablename__ = "score_jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    status: Mapped[JobStatus] = mapped_column(
        str_enum(JobStatus, "job_status"), default=JobStatus.PENDING
    )
    judge_config_id: Mapped[int] = mapped_column(ForeignKey("judge_configs.id"), index=True)
    aggregation: Mapped[str] = mapped_column(String(50))
    # The selection of completions and rubric versions, as given.
    params: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    total: Mapped[int] = mapped_column(Integer, default=0)
    done: Mapped[int] = mapped_column(Integer, default=0)
    cached: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )
