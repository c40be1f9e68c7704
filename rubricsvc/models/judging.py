"""Judge configurations and the judgments they produce."""

from __future__ import annotations

import enum
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from rubricsvc.models.base import HASH_LENGTH, Base, CreatedAtMixin, JSONType, str_enum


class JudgmentStatus(enum.StrEnum):
    OK = "ok"
    FAILED = "failed"


class JudgeConfig(CreatedAtMixin, Base):
    """Everything that determines a verdict: backend, model, template, sampling, mode.

    Identified by the hash of those settings, never edited: a change is a new config.
    """

    __tablename__ = "judge_configs"

    id: Mapped[int] = mapped_column(primary_key=True)
    # The newest config of a name answers to it; older ones stay for the verdicts they made.
    name: Mapped[str] = mapped_column(String(200), index=True)
    config_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), unique=True)
    backend: Mapped[str] = mapped_column(String(50))
    model: Mapped[str] = mapped_column(String(300))
    revision: Mapped[str | None] = mapped_column(String(100))
    template_hash: Mapped[str | None] = mapped_column(String(HASH_LENGTH))
    verdict_mode: Mapped[str] = mapped_column(String(50))
    sampling: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    settings: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)


class Judgment(CreatedAtMixin, Base):
    """One verdict of one judge config on one criterion for one response.

    ``cache_key`` hashes the content the verdict depends on (judge config, criterion,
    prompt, response), so identical content is judged once, whatever rows refer to it.
    """

    __tablename__ = "judgments"

    id: Mapped[int] = mapped_column(primary_key=True)
    cache_key: Mapped[str] = mapped_column(String(HASH_LENGTH), unique=True)
    judge_config_id: Mapped[int] = mapped_column(ForeignKey("judge_configs.id"), index=True)
    # The first completion and criterion this verdict was computed for (traceability).
    completion_id: Mapped[int | None] = mapped_column(ForeignKey("completions.id"), index=True)
    criterion_id: Mapped[int | None] = mapped_column(ForeignKey("criteria.id"), index=True)
    # A comparison's second completion (pairwise: the one shown second), for traceability.
    other_completion_id: Mapped[int | None] = mapped_column(ForeignKey("completions.id"))
    status: Mapped[JudgmentStatus] = mapped_column(str_enum(JudgmentStatus, "judgment_status"))
    value: Mapped[float | None] = mapped_column(Float)  # in [0, 1]; None when failed
    verdict: Mapped[str | None] = mapped_column(String(100))
    reasoning: Mapped[str | None] = mapped_column(Text)
    raw_output: Mapped[str | None] = mapped_column(Text)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    error: Mapped[str | None] = mapped_column(Text)
    # Who caused a failure: infrastructure, judge or response (judging/failures.py).
    failure: Mapped[str | None] = mapped_column(String(20))
    # Mode-specific extras: choice probabilities, ordinal level, reference-relative scores.
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSONType)

    judge_config: Mapped[JudgeConfig] = relationship()


class JudgeAudit(CreatedAtMixin, Base):
    """An attack audit of one judge config on one set of items (``rubricsvc judges audit``):
    part of the judge's lineage, so how far it can be gamed is on record beside it."""

    __tablename__ = "judge_audits"

    id: Mapped[int] = mapped_column(primary_key=True)
    judge_config_id: Mapped[int] = mapped_column(ForeignKey("judge_configs.id"), index=True)
    set_name: Mapped[str] = mapped_column(String(200))
    # The hash of the items attacked (prompts, rubrics, honest answers) and of the options.
    set_hash: Mapped[str] = mapped_column(String(HASH_LENGTH))
    # The largest mean inflation of any attack, and of the attacks the platform neutralizes.
    max_inflation: Mapped[float] = mapped_column(Float)
    report: Mapped[dict[str, Any]] = mapped_column(JSONType)

    judge_config: Mapped[JudgeConfig] = relationship()


class JudgeGateStatus(enum.StrEnum):
    CANDIDATE = "candidate"  # trained, not yet shown to be good enough to be a reward
    APPROVED = "approved"  # passed its promotion gate: usable as a reward
    REJECTED = "rejected"  # failed its gate: evaluation only


class JudgeGate(CreatedAtMixin, Base):
    """A promotion decision on a judge config that must earn its use as a reward (a distilled
    judge): the newest row of a config is its status, with the figures it was decided on.
    A config with no row was never gated and is usable as configured."""

    __tablename__ = "judge_gates"

    id: Mapped[int] = mapped_column(primary_key=True)
    judge_config_id: Mapped[int] = mapped_column(ForeignKey("judge_configs.id"), index=True)
    status: Mapped[JudgeGateStatus] = mapped_column(str_enum(JudgeGateStatus, "judge_gate_status"))
    report: Mapped[dict[str, Any]] = mapped_column(JSONType)

    judge_config: Mapped[JudgeConfig] = relationship()
