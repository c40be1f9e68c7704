"""Scores (a rubric version's aggregate for one completion), score jobs and their chunks."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from rubricsvc.models.base import (
    HASH_LENGTH,
    Base,
    CreatedAtMixin,
    JSONType,
    str_enum,
    utcnow,
)
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


class ChunkStatus(enum.StrEnum):
    PENDING = "pending"  # waiting in a queue (or its message was lost: the reaper re-sends it)
    RUNNING = "running"  # claimed by a worker that keeps its heartbeat fresh
    DONE = "done"
    FAILED = "failed"  # could not be scored (configuration error, or gave up after attempts)
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
    # Hash of the judge config, aggregation, options and the (completion, rubric version)
    # pairs: the same work submitted twice finds this job instead of creating another.
    job_key: Mapped[str | None] = mapped_column(String(HASH_LENGTH), unique=True)
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

    judge_config: Mapped[JudgeConfig] = relationship()


class ScoreChunk(CreatedAtMixin, Base):
    """The completions of a job that one worker task scores together (one backend batch).

    Counts are set, never incremented, so a chunk run twice (a lost worker, a redelivered
    message) reports the same numbers.
    """

    __tablename__ = "score_chunks"
    __table_args__ = (UniqueConstraint("job_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("score_jobs.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)  # 0, 1, ... within the job
    completion_ids: Mapped[list[int]] = mapped_column(JSONType)
    judgments: Mapped[int] = mapped_column(Integer, default=0)  # planned, checks excluded
    status: Mapped[ChunkStatus] = mapped_column(
        str_enum(ChunkStatus, "chunk_status"), default=ChunkStatus.PENDING, index=True
    )
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # claims; also the claim's token
    worker: Mapped[str | None] = mapped_column(String(200))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    done: Mapped[int] = mapped_column(Integer, default=0)  # judgments finished so far
    cached: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    requests: Mapped[int] = mapped_column(Integer, default=0)  # backend requests, retries too
    error: Mapped[str | None] = mapped_column(Text)


class WorkerPresence(Base):
    """A running worker and the judges whose queues it consumes, refreshed by its heartbeat.

    A job whose judge no live worker serves waits and says so (``jobs.progress``) instead
    of looking merely pending; a worker that stops refreshing its row is no longer counted
    once its ``seen_at`` is older than the jobs' heartbeat timeout.
    """

    __tablename__ = "worker_presence"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)  # host:pid:nonce
    host: Mapped[str] = mapped_column(String(255))
    judges: Mapped[list[str]] = mapped_column(JSONType)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)


class RewardGroupMember(Base):
    """One rollout waiting in a reward group (``scoring.groups``): a framework that sends one
    rollout per request cannot send its prompt's group together, so the server holds each
    until the group is complete (or its time is up), then judges the group as one batch.

    Rows, not a process's memory: every ``serve`` worker sees the same groups, and a group
    outlives a server restart. ``batch`` (the judged batch's token), ``claimed_at`` (when)
    and ``answer`` (this member's part of the batch, read by whoever waits) are written in
    the transaction that judged the group: no row is ever claimed without its answer.
    """

    __tablename__ = "reward_group_members"

    id: Mapped[int] = mapped_column(primary_key=True)
    # sha256 of what makes rollouts one group: the call (judge, options, source, run) and the
    # group id (an explicit id, else the prompt's).
    group_key: Mapped[str] = mapped_column(String(HASH_LENGTH), index=True)
    group_size: Mapped[int] = mapped_column(Integer)
    request: Mapped[dict[str, Any]] = mapped_column(JSONType)
    # Indexed for the sweep that deletes spent rows by these times (migration 0017).
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, index=True
    )
    batch: Mapped[str | None] = mapped_column(String(36), index=True)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    answer: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # The process whose caller waits on this row (``scoring.group_callers``; migration 0019),
    # and when that caller read its answer: an equal request that comes while the row is
    # uncollected and its process gone is the row's retry, not a rollout of its own.
    caller: Mapped[int | None] = mapped_column(Integer)
    collected_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
