"""Strict reading of a model's drafted criteria: valid as a whole, or refused with one reason.

A draft is one JSON object, ``{"criteria": [{"text", "category", "theme"}, ...]}`` (an
``explanation`` is allowed), optionally inside one Markdown code fence. Nothing is repaired
or guessed: unknown keys, a category or theme outside the configured ones, a count outside
the range, an empty or over-long text all refuse the draft, and the caller tries again.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rubricsvc.fileformats import describe_validation_error
from rubricsvc.judging.verdicts import VerdictParseError, json_object
from rubricsvc.models import Category
from rubricsvc.rubrics.generator import MAX_CRITERION_CHARS, GeneratorSpec
from rubricsvc.rubrics.schemas import CriterionSpec, normalized_text


class DraftError(ValueError):
    """A draft that is not a valid list of criteria; ``str()`` is one line."""


class _DraftCriterion(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    text: str = Field(min_length=1, max_length=MAX_CRITERION_CHARS)
    category: Category
    theme: str = Field(min_length=1)
    explanation: str | None = None
    # The evidence document it came from (0: none); "2" as a schema-decoded reply writes it.
    evidence: int | None = None


class _Draft(BaseModel):
    model_config = ConfigDict(extra="forbid")

    criteria: list[_DraftCriterion]


def parse_draft(
    text: str,
    spec: GeneratorSpec,
    min_count: int | None = None,
    max_count: int | None = None,
    evidence: Sequence[str] = (),
) -> list[CriterionSpec]:
    """The criteria of a drafted reply, weighted by category; ``DraftError`` if anything is off.
    ``evidence``: the content hashes of the numbered evidence documents the generator was
    shown; a criterion's ``evidence`` number (0: none) becomes the hash of its document."""
    least = spec.min_criteria if min_count is None else min_count
    most = spec.max_criteria if max_count is None else max_count
    try:
        draft = _Draft.model_validate(json_object(text))
    except VerdictParseError as err:
        raise DraftError(str(err)) from None
    except ValidationError as err:
        raise DraftError(describe_validation_error(err, limit=1)) from None
    count = len(draft.criteria)
    if not least <= count <= most:
        raise DraftError(f"{count} criteria, expected {least} to {most}")
    criteria = []
    seen: dict[str, int] = {}
    for index, item in enumerate(draft.criteria):
        if item.theme not in spec.themes:
            raise DraftError(
                f"criteria[{index}].theme: {item.theme!r} is not one of {', '.join(spec.themes)}"
            )
        key = normalized_text(item.text)
        if key in seen:
            raise DraftError(f"criteria[{index}] duplicates criteria[{seen[key]}]: {item.text!r}")
        seen[key] = index
        number = item.evidence or 0
        if not 0 <= number <= len(evidence):
            raise DraftError(
                f"criteria[{index}].evidence: {number} is not a document number "
                f"(0 to {len(evidence)})"
            )
        criteria.append(
            CriterionSpec(
                text=item.text,
                explanation=item.explanation or None,
                weight=spec.weight(item.category),
                category=item.category,
                theme=item.theme,
                evidence=[evidence[number - 1]] if number else [],
            )
        )
    return criteria
