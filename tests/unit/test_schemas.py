"""The rubric file schema: defaults, normalization and content hashing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rubricsvc.models import Category, CriterionKind
from rubricsvc.rubrics.schemas import OrdinalScale, RubricSpec
from tests.helpers import rubric_dict, rubric_spec


def test_category_defaults_from_the_sign_of_the_weight() -> None:
    spec = rubric_spec()
    assert [c.category for c in spec.criteria] == [
        Category.ESSENTIAL,
        Category.IMPORTANT,
        Category.PITFALL,
    ]
    assert {c.kind for c in spec.criteria} == {CriterionKind.JUDGE}


def test_ordinal_levels_are_sorted_by_score() -> None:
    data = rubric_dict()
    data["criteria"][0]["scale"] = {
        "type": "ordinal",
        "levels": [{"score": 3, "description": "great"}, {"score": 1, "description": "poor"}],
    }
    scale = rubric_spec(criteria=data["criteria"]).criteria[0].scale
    assert isinstance(scale, OrdinalScale)
    assert [level.score for level in scale.levels] == [1, 3]


def test_content_hash_depends_on_content_only() -> None:
    base = rubric_spec()
    assert base.content_hash() == rubric_spec().content_hash()
    assert base.content_hash() == rubric_spec(description="other words").content_hash()
    reweighted = rubric_dict()
    reweighted["criteria"][1]["weight"] = 3
    assert base.content_hash() != rubric_spec(criteria=reweighted["criteria"]).content_hash()
    reordered = rubric_dict()
    reordered["criteria"].reverse()
    assert base.content_hash() != rubric_spec(criteria=reordered["criteria"]).content_hash()


def test_whitespace_is_stripped() -> None:
    data = rubric_dict()
    data["criteria"][0]["text"] = "  Recommends a regular schedule \n"
    assert rubric_spec(criteria=data["criteria"]).content_hash() == rubric_spec().content_hash()


@pytest.mark.parametrize(
    "check",
    [
        {"type": "regex", "pattern": r"\bsources?\b", "must_match": False},
        {"type": "contains", "text": "Paris"},
        {"type": "not_contains", "text": "As an AI"},
        {"type": "word_count", "max": 300},
        {"type": "char_count", "min": 10, "max": 20},
    ],
)
def test_check_specs(check: dict[str, object]) -> None:
    data = rubric_dict()
    data["criteria"][1].update(kind="check", check=check)
    parsed = rubric_spec(criteria=data["criteria"]).criteria[1].check
    assert parsed is not None
    assert parsed.model_dump(exclude_defaults=True) == {
        k: v for k, v in check.items() if k not in {"must_match", "ignore_case"} or v is not True
    } | {"type": check["type"]}


def test_length_check_bounds_are_ordered() -> None:
    data = rubric_dict()
    data["criteria"][1].update(kind="check", check={"type": "word_count", "min": 50, "max": 10})
    with pytest.raises(ValidationError, match=r"min \(50\) is greater than max \(10\)"):
        RubricSpec.model_validate(data)


def test_prompt_needs_text_or_messages() -> None:
    with pytest.raises(ValidationError, match="exactly one of 'text' or 'messages'"):
        rubric_spec(prompt={"external_id": "p"})
    spec = rubric_spec(prompt={"messages": [{"role": "user", "content": "hi"}]})
    assert spec.prompt is not None
    assert spec.prompt.chat() == [{"role": "user", "content": "hi"}]


def test_required_pitfall_is_refused() -> None:
    data = rubric_dict()
    data["criteria"][2]["required"] = True
    with pytest.raises(ValidationError, match="pitfall cannot be required"):
        RubricSpec.model_validate(data)


def _themed(weights: dict[str, float] | None) -> RubricSpec:
    data = rubric_dict(dimension_weights=weights)
    for criterion, theme in zip(data["criteria"], ["coverage", "coverage", "style"], strict=True):
        criterion["theme"] = theme
    return RubricSpec.model_validate(data)


def test_dimension_weights_cover_every_theme_and_are_versioned() -> None:
    weighted = _themed({"coverage": 0.6, "style": 0.4})
    assert weighted.content_hash() != _themed(None).content_hash()
    assert weighted.content_hash() != _themed({"coverage": 0.5, "style": 0.5}).content_hash()
    with pytest.raises(ValidationError, match="no weight for theme"):
        _themed({"coverage": 1.0})
    with pytest.raises(ValidationError, match=r"dimension_weights\.style: must be a positive"):
        _themed({"coverage": 1.0, "style": 0.0})
    with pytest.raises(ValidationError, match="every criterion needs a theme"):
        rubric_spec(dimension_weights={"coverage": 1.0})
