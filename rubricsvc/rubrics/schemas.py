"""The rubric file format (JSON, JSON Lines or YAML), validated with pydantic.

A rubric file holds one rubric, a list of rubrics, or ``{"rubrics": [...]}``::

    name: sleep-hygiene-advice
    prompt: {text: "How can I sleep better?", external_id: sleep-1}
    criteria:
      - text: Recommends a consistent sleep schedule
        weight: 5
        category: essential
        theme: coverage
      - text: Recommends prescription drugs without advising a doctor
        weight: -5            # a pitfall: negative weight
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rubricsvc.hashing import content_hash
from rubricsvc.judging.readers.checks import compile_pattern
from rubricsvc.models.rubric import Category, CriterionKind, CriterionTarget

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"
# Weights (criteria, dimensions) stay within this: far beyond any real rubric (HealthBench
# points are within 10), far below where sums of weights overflow or lose their precision.
MAX_WEIGHT = 1e6
# The themes criteria are grouped by, one list for rubric files and rubric generators: a
# generator drafts and evolves criteria within its ``themes`` (these by default), and the
# bundled rubrics and the docs use these. A file may still name a theme of its own (a
# dimension it weights with ``dimension_weights``); a generator drafts it only when its
# ``themes`` list it.
THEMES = ("coverage", "accuracy", "structure", "style", "safety")


class _Strict(BaseModel):
    # Unknown keys are errors: a typo ("wieght") must not silently drop a field.
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class Message(_Strict):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str = Field(min_length=1)


class ToolFunction(_Strict):
    name: str = Field(min_length=1, max_length=200)
    # A JSON string as OpenAI sends it, or the parsed object (as TRL's rollouts carry it).
    arguments: str | dict[str, Any] = ""


class ToolCall(_Strict):
    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolFunction


class TrajectoryMessage(_Strict):
    """One message of an agent trajectory, OpenAI-style: assistant turns may call tools, and a
    ``tool`` message carries a tool's result (``content`` a string or text parts)."""

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> TrajectoryMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"a {self.role} message cannot call tools (only assistant turns)")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        return self


class PromptSpec(_Strict):
    """The prompt a rubric belongs to: plain text or chat messages."""

    text: str | None = Field(default=None, min_length=1)
    messages: list[Message] | None = Field(default=None, min_length=1)
    external_id: str | None = Field(default=None, min_length=1, max_length=200)
    reference_answer: str | None = None
    tags: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _text_xor_messages(self) -> PromptSpec:
        if (self.text is None) == (self.messages is None):
            raise ValueError("give exactly one of 'text' or 'messages'")
        return self

    def chat(self) -> list[dict[str, str]]:
        if self.messages is not None:
            return [m.model_dump() for m in self.messages]
        return [{"role": "user", "content": self.text or ""}]


class Level(_Strict):
    score: int
    description: str = Field(min_length=1)


class BinaryScale(_Strict):
    type: Literal["binary"] = "binary"


class OrdinalScale(_Strict):
    """Levels such as 1..5, each described; a verdict maps to (score - min) / (max - min)."""

    type: Literal["ordinal"]
    levels: list[Level]

    @field_validator("levels")
    @classmethod
    def _levels_well_formed(cls, levels: list[Level]) -> list[Level]:
        if len(levels) < 2:
            raise ValueError("an ordinal scale needs at least two levels, each with a description")
        scores = [level.score for level in levels]
        if len(set(scores)) != len(scores):
            raise ValueError(f"level scores must be distinct, got {scores}")
        return sorted(levels, key=lambda level: level.score)


Scale = Annotated[BinaryScale | OrdinalScale, Field(discriminator="type")]


class RegexCheck(_Strict):
    type: Literal["regex"]
    pattern: str
    must_match: bool = True  # False: the pattern must be absent
    ignore_case: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        # Checks run on RE2 (linear time): a pattern it cannot compile is refused here, naming
        # the construct it lacks, rather than when a response is scored.
        compile_pattern(pattern)
        return pattern


class ContainsCheck(_Strict):
    type: Literal["contains", "not_contains"]
    text: str = Field(min_length=1)
    ignore_case: bool = True


class LengthCheck(_Strict):
    type: Literal["word_count", "char_count"]
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> LengthCheck:
        if self.min is None and self.max is None:
            raise ValueError("give 'min', 'max' or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self


class ToolLoopCheck(_Strict):
    """Passes unless one tool call (same name and arguments) occurs ``min_repeats`` times or
    more anywhere in the trajectory."""

    type: Literal["tool_loop"]
    min_repeats: int = Field(default=3, ge=2)


class ToolErrorsIgnoredCheck(_Strict):
    """Passes unless a tool error is followed by a final answer that neither retries nor says
    anything of the failure."""

    type: Literal["tool_errors_ignored"]


Check = Annotated[
    RegexCheck | ContainsCheck | LengthCheck | ToolLoopCheck | ToolErrorsIgnoredCheck,
    Field(discriminator="type"),
]


class CriterionSpec(_Strict):
    """One weighted criterion. A negative weight marks a pitfall (a penalty when met)."""

    text: str = Field(min_length=1)
    explanation: str | None = None
    weight: float
    category: Category | None = None  # default: pitfall if weight < 0, else important
    theme: str | None = Field(default=None, max_length=100)
    kind: CriterionKind = CriterionKind.JUDGE
    scale: Scale = Field(default_factory=BinaryScale)
    check: Check | None = None
    required: bool = False
    tags: list[str] = Field(default_factory=list)
    # What a judged criterion is judged on: the final answer, or the agent's trajectory.
    target: CriterionTarget = CriterionTarget.RESPONSE
    # The stored documents (content hashes) a drafted criterion came from, for a reviewer to
    # check it against; not shown to judges.
    evidence: list[Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = Field(default_factory=list)

    @field_validator("weight")
    @classmethod
    def _finite_non_zero(cls, weight: float) -> float:
        if not math.isfinite(weight):
            raise ValueError(f"weight must be a finite number, got {weight}")
        if abs(weight) > MAX_WEIGHT:
            raise ValueError(
                f"weight must be between -{MAX_WEIGHT:,.0f} and {MAX_WEIGHT:,.0f}, got {weight:g}"
            )
        if weight == 0:
            raise ValueError("weight must be non-zero (negative for a pitfall)")
        return weight

    @model_validator(mode="after")
    def _consistent(self) -> CriterionSpec:
        if self.category is None:
            self.category = Category.PITFALL if self.weight < 0 else Category.IMPORTANT
        if (self.category == Category.PITFALL) != (self.weight < 0):
            raise ValueError(
                f"category {self.category.value!r} does not match weight {self.weight:g}: "
                "pitfalls carry negative weight and only pitfalls do"
            )
        if self.kind == CriterionKind.CHECK and self.check is None:
            raise ValueError("a criterion of kind 'check' needs a 'check' spec")
        if self.kind != CriterionKind.CHECK and self.check is not None:
            raise ValueError("'check' is only allowed with kind: check")
        if self.kind == CriterionKind.CITATIONS:
            if self.weight < 0:
                raise ValueError("a citations criterion rewards supported citations: weight > 0")
            if self.scale.type != "binary":
                raise ValueError("a citations criterion is yes/no per citation: no scale")
        if self.required and self.weight < 0:
            raise ValueError("a pitfall cannot be required (required criteria gate the score)")
        if self.target == CriterionTarget.TRAJECTORY and self.kind != CriterionKind.JUDGE:
            raise ValueError(
                "target: trajectory is for judged criteria (the tool_loop and "
                "tool_errors_ignored checks read the trajectory by themselves)"
            )
        return self

    def judged_content(self) -> dict[str, Any]:
        """What a judge sees of this criterion: the criterion part of the judgment cache key."""
        return {
            "text": self.text,
            "explanation": self.explanation,
            "scale": self.scale.model_dump(),
            "check": self.check.model_dump() if self.check else None,
            # Only when set: every criterion judged on the response keeps the hash it had
            # before criteria could target the trajectory.
            **({"target": self.target.value} if self.target == CriterionTarget.TRAJECTORY else {}),
            # Likewise the kind, which only a citations criterion changes the judging of.
            **({"kind": self.kind.value} if self.kind == CriterionKind.CITATIONS else {}),
        }

    def stored(self) -> dict[str, Any]:
        """Everything that makes up this criterion in a version (its content). ``target`` only
        when it is the trajectory and ``evidence`` only when there is some, so existing
        versions keep their hashes."""
        stored = self.model_dump(mode="json")
        if self.target == CriterionTarget.RESPONSE:
            del stored["target"]
        if not self.evidence:  # likewise
            del stored["evidence"]
        return stored


def normalized_text(text: str) -> str:
    """The form in which two criterion texts count as the same (case and spacing ignored)."""
    return " ".join(text.lower().split())


class RubricSpec(_Strict):
    """A rubric as authored: a name, an optional prompt, and its criteria."""

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    title: str | None = None
    description: str | None = None
    prompt: PromptSpec | None = None
    criteria: list[CriterionSpec]
    # Weight of each theme for dimension-weighted aggregation (RACE); every theme used by a
    # criterion must be listed. Omitted: themes are not weighted.
    dimension_weights: dict[str, float] | None = None
    origin: Literal["human", "llm", "imported", "evolved"] = "human"
    origin_detail: dict[str, Any] = Field(default_factory=dict)
    note: str | None = None

    @field_validator("criteria")
    @classmethod
    def _non_empty_and_distinct(cls, criteria: list[CriterionSpec]) -> list[CriterionSpec]:
        if not criteria:
            raise ValueError("a rubric needs at least one criterion")
        seen: dict[str, int] = {}
        for index, criterion in enumerate(criteria):
            key = normalized_text(criterion.text)
            if key in seen:
                raise ValueError(
                    f"criteria[{index}] duplicates criteria[{seen[key]}]: {criterion.text!r}"
                )
            seen[key] = index
        if all(c.weight < 0 for c in criteria):
            raise ValueError("a rubric needs at least one criterion with positive weight")
        return criteria

    @model_validator(mode="after")
    def _dimensions_cover_themes(self) -> RubricSpec:
        if self.dimension_weights is None:
            return self
        for theme, weight in self.dimension_weights.items():
            if not math.isfinite(weight) or not 0 < weight <= MAX_WEIGHT:
                raise ValueError(
                    f"dimension_weights.{theme}: must be a positive number up to {MAX_WEIGHT:,.0f}"
                )
        if any(c.theme is None for c in self.criteria):
            raise ValueError("dimension_weights: every criterion needs a theme")
        missing = sorted({str(c.theme) for c in self.criteria} - set(self.dimension_weights))
        if missing:
            raise ValueError(f"dimension_weights has no weight for theme(s): {', '.join(missing)}")
        return self

    def content_hash(self) -> str:
        """Hash of the versioned content: title, dimension weights and the ordered criteria."""
        content: dict[str, Any] = {
            "title": self.title,
            "criteria": [c.stored() for c in self.criteria],
        }
        if self.dimension_weights is not None:
            content["dimension_weights"] = self.dimension_weights
        return content_hash(content)
