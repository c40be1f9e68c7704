"""The settings of an evolution run: how often, how many, how strict, which generator."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rubricsvc.rubrics.generator import GeneratorSpec

EVOLUTION_TEMPLATE = "rubric_evolution"
# The largest population standard deviation of values in [0, 1] (half the group at 0, half
# at 1): the spread at which ``separation`` weighting keeps a criterion's full weight.
MAX_SPREAD = 0.5


class Weighting(enum.StrEnum):
    FIXED = "fixed"  # an evolved criterion weighs what its category weighs
    # POW3R-style: that weight times spread / MAX_SPREAD, so a criterion that barely
    # separates the current rollouts weighs little
    SEPARATION = "separation"


# What an evolution generator is unless its configuration says otherwise: the evolution
# template, a reply of a few criteria, one retry.
GENERATOR_DEFAULTS: dict[str, Any] = {
    "template": EVOLUTION_TEMPLATE,
    "max_tokens": 384,
    "retries": 1,
}


def _default_generator() -> GeneratorSpec:
    return GeneratorSpec(**GENERATOR_DEFAULTS)


class EvolutionSettings(BaseModel):
    """``every``: evolve each prompt every this many steps (1: every step). ``max_new``: the
    most criteria one answer may add. ``prune_tolerance``: an evolved criterion whose verdicts
    over the group spread by no more than this (population standard deviation) goes inactive.
    ``max_active``: the most evolved criteria active at once, the highest spread kept.
    ``generator_failure_alarm``: the share of a step's generator calls that may fail before
    a warning is logged (a failure never stops training)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: int = Field(default=1, ge=1)
    max_active: int = Field(default=5, ge=1)
    max_new: int = Field(default=3, ge=1, le=10)
    prune_tolerance: float = Field(default=0.0, ge=0.0, lt=MAX_SPREAD)
    weighting: Weighting = Weighting.FIXED
    generator: GeneratorSpec = Field(default_factory=_default_generator)
    generator_failure_alarm: float = Field(default=0.25, ge=0.0, le=1.0)

    @field_validator("generator", mode="before")
    @classmethod
    def _evolution_defaults(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {**GENERATOR_DEFAULTS, **value}
        return value

    @model_validator(mode="after")
    def _generator_fits(self) -> EvolutionSettings:
        # The draft parser reads an answer of 0..max_new criteria, whatever the generator's
        # own count range (which is for whole drafted rubrics).
        if self.generator.max_tokens < 64:
            raise ValueError("generator.max_tokens: at least 64 tokens to write one criterion")
        return self

    def due(self, step: int) -> bool:
        """Whether a prompt evolves at ``step`` (0-based): steps 0, every, 2 x every, ..."""
        return step % self.every == 0

    def recorded(self) -> dict[str, Any]:
        """What the run stores of its settings: the generator by its hash and template."""
        template = self.generator.prompt_template()
        return {
            "every": self.every,
            "max_active": self.max_active,
            "max_new": self.max_new,
            "prune_tolerance": self.prune_tolerance,
            "weighting": self.weighting.value,
            "generator_hash": self.generator.config_hash(),
            "generator_backend": self.generator.backend,
            "generator_model": self.generator.model,
            "template": template.name,
            "template_sha256": template.sha256,
        }
