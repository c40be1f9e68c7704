"""The lines label files and verdict files have in common.

A label (``labels import jsonl``) and an imported judge's verdict (``judges import``) are said
of the same things: a completion x criterion met, or with a value in [0, 1]; a pair of
completions; a completion's score on a scale. Both files spell these alike, so one model of
each reads, and refuses, them in both; each file adds its own fields (a labeller, tags and a
pairwise label; reasoning, raw text and a pairwise verdict).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rubricsvc.errors import ValidationFailed
from rubricsvc.importers.common import parse


class Line(BaseModel):
    # Strict: a number is not read from a string, nor a flag from a number.
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: str
    item: str | int | None = None

    def completions(self) -> tuple[str, ...]:
        """The external ids of the completions this line is about."""
        return ()


class PointwiseLine(Line):
    """A completion x criterion: met (true/false) or a value in [0, 1]."""

    completion: str = Field(min_length=1)
    rubric: str = Field(min_length=1)
    criterion: int | str
    met: bool | None = None
    value: float | None = None

    def completions(self) -> tuple[str, ...]:
        return (self.completion,)

    @model_validator(mode="after")
    def _met_or_value(self) -> PointwiseLine:
        if (self.met is None) == (self.value is None):
            raise ValueError("give exactly one of 'met' (true/false) or 'value' (0 to 1)")
        if self.value is not None and not 0.0 <= self.value <= 1.0:
            raise ValueError(f"pointwise value {self.value:g} is outside [0, 1]")
        return self


class PairLine(Line):
    """Two completions, in the order they were shown."""

    first: str = Field(min_length=1)
    second: str = Field(min_length=1)

    def completions(self) -> tuple[str, ...]:
        return (self.first, self.second)


class ScalarLine(Line):
    """A completion's score on its scale [min, max]."""

    completion: str = Field(min_length=1)
    score: float
    scale: list[float] = Field(min_length=2, max_length=2)

    def completions(self) -> tuple[str, ...]:
        return (self.completion,)

    @model_validator(mode="after")
    def _within_scale(self) -> ScalarLine:
        low, high = self.scale
        if not (math.isfinite(low) and math.isfinite(high) and math.isfinite(self.score)):
            raise ValueError("score and scale must be finite numbers")
        if not low < high:
            raise ValueError(f"scale [{low:g}, {high:g}]: expected min < max")
        if not low <= self.score <= high:
            raise ValueError(f"score {self.score:g} is outside its scale [{low:g}, {high:g}]")
        return self


AnyLine = TypeVar("AnyLine", bound=Line)


def parse_line(models: Mapping[str, type[AnyLine]], location: str, data: Any) -> AnyLine:
    """``data`` read as the model its ``kind`` names; or one error naming the line."""
    if not isinstance(data, dict):
        raise ValidationFailed(f"{location}: expected a JSON object, got {type(data).__name__}")
    kind = data.get("kind")
    model = models.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ValidationFailed(
            f"{location}: kind: expected one of {', '.join(models)}, got {kind!r}"
        )
    return parse(model, location, data)
