"""Evolving rubrics: per evolution run and prompt, the criteria a generator added during training.

A run (a training run's name, or a name an API caller gives) holds one track per prompt: the
persistent rubric version it started from (never pruned) and the evolved version now in use.
Each evolution step of a track is a row, with the rollouts it read and what it did; each
criterion it added is a row with its provenance (the step) and its state; each step records
every evolved criterion's spread over that step's group. The evolved sets themselves are
ordinary immutable rubric versions (origin ``evolved``), so every reward names the exact
version it was computed under; these tables say how each one came about.
"""

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
from rubricsvc.models.prompt import Prompt
from rubricsvc.models.rubric import Category, RubricVersion


class EvolvedState(enum.StrEnum):
    ACTIVE = "active"  # part of the track's current evolved version
    INACTIVE = "inactive"  # pruned (no spread, or past max_active); never active again


class StepOutcome(enum.StrEnum):
    EVOLVED = "evolved"  # the active set changed: a new evolved version
    UNCHANGED = "unchanged"  # the generator answered, nothing new survived, nothing pruned
    GENERATOR_FAILED = "generator_failed"  # no usable answer: the set is left as it was
    # Verdicts failed for reasons outside the responses (the judge's or the infrastructure's):
    # an outage says nothing of a criterion's spread, so nothing is pruned or added.
    JUDGE_FAILED = "judge_failed"


class RunDoor(enum.StrEnum):
    """Which door steps a run: one only, so that its steps are one numbering of one group
    stream (a name taken by both would mix two clients' rollouts in one history)."""

    SERVER = "server"  # the reward API's gathered groups
    TRAINER = "trainer"  # ``rubricsvc train``'s in-process reward


class EvolutionRun(CreatedAtMixin, Base):
    __tablename__ = "evolution_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    # The evolution settings the run was started with (the generator by its hash, too).
    settings: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # The door that steps it (None: a run stored before doors were recorded; the first door
    # that steps it again takes it).
    door: Mapped[RunDoor | None] = mapped_column(str_enum(RunDoor, "run_door"))
    # The API key that created a served run (its name), and the keys that may use it: be
    # rewarded under its evolved versions, which no person approved, and evolve it.
    created_by: Mapped[str | None] = mapped_column(String(200))
    key_names: Mapped[list[str]] = mapped_column(JSONType, default=list)

    tracks: Mapped[list[EvolutionTrack]] = relationship(
        back_populates="run", order_by="EvolutionTrack.id"
    )


class EvolutionTrack(CreatedAtMixin, Base):
    """One prompt's evolution within a run. ``current_version_id`` and the counters move as
    steps are taken (under the row's lock); everything a step decided is in its own rows."""

    __tablename__ = "evolution_tracks"
    __table_args__ = (UniqueConstraint("run_id", "prompt_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("evolution_runs.id"), index=True)
    prompt_id: Mapped[int] = mapped_column(ForeignKey("prompts.id"), index=True)
    persistent_version_id: Mapped[int] = mapped_column(ForeignKey("rubric_versions.id"))
    # The version rewards are computed under now: the persistent one until a step evolves it.
    current_version_id: Mapped[int] = mapped_column(ForeignKey("rubric_versions.id"))
    generator_calls: Mapped[int] = mapped_column(Integer, default=0)
    generator_failures: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    run: Mapped[EvolutionRun] = relationship(back_populates="tracks")
    prompt: Mapped[Prompt] = relationship()
    persistent_version: Mapped[RubricVersion] = relationship(foreign_keys=[persistent_version_id])
    current_version: Mapped[RubricVersion] = relationship(foreign_keys=[current_version_id])
    steps: Mapped[list[EvolutionStep]] = relationship(
        back_populates="track", order_by="EvolutionStep.step"
    )
    criteria: Mapped[list[EvolvedCriterion]] = relationship(
        back_populates="track", order_by="EvolvedCriterion.id"
    )


class EvolutionStep(CreatedAtMixin, Base):
    """One evolution step of a track: the group it read, the generator's answer, the outcome."""

    __tablename__ = "evolution_steps"
    __table_args__ = (UniqueConstraint("track_id", "step"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    track_id: Mapped[int] = mapped_column(ForeignKey("evolution_tracks.id"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    version_before_id: Mapped[int] = mapped_column(ForeignKey("rubric_versions.id"))
    version_after_id: Mapped[int] = mapped_column(ForeignKey("rubric_versions.id"))
    outcome: Mapped[StepOutcome] = mapped_column(str_enum(StepOutcome, "step_outcome"))
    # The rollouts the generator read: [{"text", "score", "sha256"}], in the order shown.
    rollouts: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    # The generator: model, config hash, template name and sha256, sampling, attempts.
    generator: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # What was refused (duplicates, mirror images) or why the generator failed.
    refused: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    error: Mapped[str | None] = mapped_column(Text)

    track: Mapped[EvolutionTrack] = relationship(back_populates="steps")
    version_before: Mapped[RubricVersion] = relationship(foreign_keys=[version_before_id])
    version_after: Mapped[RubricVersion] = relationship(foreign_keys=[version_after_id])
    spreads: Mapped[list[CriterionSpread]] = relationship(
        back_populates="step_row", order_by="CriterionSpread.id"
    )


class EvolvedCriterion(CreatedAtMixin, Base):
    """A criterion a generator added to a track. Its text and weight never change; its state
    goes from active to inactive once, at ``inactive_step``."""

    __tablename__ = "evolved_criteria"
    __table_args__ = (UniqueConstraint("track_id", "content_hash"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    track_id: Mapped[int] = mapped_column(ForeignKey("evolution_tracks.id"), index=True)
    # The step that wrote it (its provenance: that step's rollouts and generator).
    step_id: Mapped[int] = mapped_column(ForeignKey("evolution_steps.id"), index=True)
    text: Mapped[str] = mapped_column(Text)
    explanation: Mapped[str | None] = mapped_column(Text)
    category: Mapped[Category] = mapped_column(str_enum(Category, "category"))
    theme: Mapped[str | None] = mapped_column(String(100))
    # The weight its category gives it: positive, or negative for a pitfall (its sign).
    weight: Mapped[float] = mapped_column(Float)
    # sha256 of what a judge sees of it, as a stored criterion's.
    content_hash: Mapped[str] = mapped_column(String(HASH_LENGTH))
    state: Mapped[EvolvedState] = mapped_column(str_enum(EvolvedState, "evolved_state"))
    inactive_step: Mapped[int | None] = mapped_column(Integer)
    inactive_reason: Mapped[str | None] = mapped_column(String(200))

    track: Mapped[EvolutionTrack] = relationship(back_populates="criteria")
    step_row: Mapped[EvolutionStep] = relationship()


class CriterionSpread(Base):
    """An evolved criterion's verdicts over one step's group: their spread (the population
    standard deviation), the weight it carried and whether it stayed active."""

    __tablename__ = "evolved_criterion_spreads"
    __table_args__ = (UniqueConstraint("criterion_id", "step_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    criterion_id: Mapped[int] = mapped_column(ForeignKey("evolved_criteria.id"), index=True)
    step_id: Mapped[int] = mapped_column(ForeignKey("evolution_steps.id"), index=True)
    values: Mapped[list[float | None]] = mapped_column(JSONType)
    spread: Mapped[float | None] = mapped_column(Float)
    weight: Mapped[float] = mapped_column(Float)
    active: Mapped[bool] = mapped_column(default=True)

    criterion: Mapped[EvolvedCriterion] = relationship()
    step_row: Mapped[EvolutionStep] = relationship(back_populates="spreads")
