"""Rubric authoring without a database: generator configs, strict draft parsing, the generic
criteria, no-signal flags, and the rubric formats read from files."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rubricsvc.errors import ValidationFailed
from rubricsvc.importers.autoj import read_autoj_rubrics
from rubricsvc.importers.prometheus import read_prometheus_rubrics
from rubricsvc.models import Category
from rubricsvc.rubrics.drafts import DraftError, parse_draft
from rubricsvc.rubrics.generator import GeneratorSpec, load_generator_file, with_overrides
from rubricsvc.rubrics.generic import GENERIC_CRITERIA, with_generic
from rubricsvc.rubrics.refinement import flag_constant
from rubricsvc.rubrics.schemas import CriterionSpec, RubricSpec

SPEC = GeneratorSpec(min_criteria=2, max_criteria=4)


def _draft(*criteria: dict[str, Any]) -> str:
    return json.dumps({"criteria": list(criteria)})


def _item(text: str, category: str = "important", theme: str = "coverage") -> dict[str, Any]:
    return {"text": text, "category": category, "theme": theme}


# -- generator configs -------------------------------------------------------------------


def test_generator_hash_covers_what_shapes_a_draft_and_not_retries() -> None:
    base = GeneratorSpec()
    assert base.config_hash() == GeneratorSpec().config_hash()
    assert with_overrides(base, retries=9).config_hash() == base.config_hash()
    for change in ({"max_criteria": 12}, {"temperature": 0.2}, {"model": "/m"}, {"seed": 1}):
        assert with_overrides(base, **change).config_hash() != base.config_hash(), change
    weights = {**base.category_weights, Category.PITFALL: -5.0}
    assert with_overrides(base, category_weights=weights).config_hash() != base.config_hash()


def test_generator_defaults_follow_the_rubric_conventions() -> None:
    spec = GeneratorSpec()
    assert (spec.min_criteria, spec.max_criteria) == (7, 20)
    assert spec.weight(Category.PITFALL) < 0 < spec.weight(Category.OPTIONAL)
    assert spec.themes == ("coverage", "accuracy", "structure", "style", "safety")
    assert spec.sampling(2)["seed"] == spec.seed + 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"min_criteria": 9, "max_criteria": 3}, "greater than max_criteria"),
        ({"category_weights": {"essential": 5, "important": 3, "optional": 1}}, "pitfall"),
        (
            {"category_weights": {"essential": 5, "important": 3, "optional": 1, "pitfall": 2}},
            "pitfalls weigh less than 0",
        ),
        ({"themes": ["style", "style"]}, "distinct"),
        ({"template": "no_such_template"}, "no template"),
    ],
)
def test_generator_config_errors(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationFailed, match=message):
        with_overrides(GeneratorSpec(), **overrides)


def test_json_schema_bounds_the_draft() -> None:
    schema = SPEC.json_schema()
    criteria = schema["properties"]["criteria"]
    assert (criteria["minItems"], criteria["maxItems"]) == (2, 4)
    item = criteria["items"]
    assert item["properties"]["category"]["enum"] == [c.value for c in Category]
    assert item["properties"]["theme"]["enum"] == list(SPEC.themes)
    assert item["additionalProperties"] is False
    assert SPEC.json_schema(1, 3)["properties"]["criteria"]["maxItems"] == 3


# -- strict parsing of drafts ------------------------------------------------------------


def test_a_valid_draft_is_weighted_by_category() -> None:
    text = _draft(
        _item("Names the capital", "essential"),
        _item("Gives a population figure", "optional", "accuracy"),
        _item("Names the wrong city", "pitfall", "accuracy"),
    )
    criteria = parse_draft(f"```json\n{text}\n```", SPEC)
    assert [(c.text, c.weight, c.category) for c in criteria] == [
        ("Names the capital", 5.0, Category.ESSENTIAL),
        ("Gives a population figure", 1.0, Category.OPTIONAL),
        ("Names the wrong city", -3.0, Category.PITFALL),
    ]
    assert [c.theme for c in criteria] == ["coverage", "accuracy", "accuracy"]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("Here is the rubric: {}", "not a JSON object"),
        ('{"criteria": [{"text": "Names the capital"', "not a JSON object"),
        ("", "not a JSON object"),
        ("[1, 2]", "JSON list, not an object"),
        (_draft(_item("Names the capital")), "1 criteria, expected 2 to 4"),
        (_draft(*(_item(f"Point {n}") for n in range(5))), "5 criteria, expected 2 to 4"),
        (_draft(_item("Names the capital"), _item("names  the CAPITAL")), "duplicates criteria[0]"),
        (_draft(_item("Names the capital"), _item("   ")), "criteria[1].text"),
        (_draft(_item("Names the capital"), _item("Cites", "critical")), "criteria[1].category"),
        (_draft(_item("Names the capital"), _item("Cites", theme="tone")), "not one of"),
        (_draft(_item("Names the capital"), {**_item("Cites"), "weight": 4}), "criteria[1].weight"),
        (json.dumps({"criteria": [], "title": "x"}), "title"),
        (_draft(_item("Names the capital"), _item("A" * 301)), "criteria[1].text"),
    ],
)
def test_malformed_drafts_are_refused_with_one_reason(reply: str, reason: str) -> None:
    with pytest.raises(DraftError) as caught:
        parse_draft(reply, SPEC)
    assert reason in str(caught.value)
    assert "\n" not in str(caught.value)


# -- generic criteria --------------------------------------------------------------------


def test_generic_criteria_are_appended_once_and_valid() -> None:
    own = [CriterionSpec(text="Is clear and EASY to follow", weight=2)]
    criteria, added = with_generic(own)
    assert criteria[0] is own[0]  # the rubric's own wording stays
    assert len(added) == len(GENERIC_CRITERIA) - 1
    assert "Is clear and easy to follow" not in added
    rubric = RubricSpec(name="x/y", criteria=criteria)
    assert any(c.weight < 0 for c in rubric.criteria)  # pitfalls: sycophancy, padding, ...
    assert all("generic" in c.tags for c in rubric.criteria[1:])
    assert with_generic(criteria)[1] == []


# -- no-signal flags ---------------------------------------------------------------------


def test_flags_only_criteria_constant_within_every_group() -> None:
    criteria = [SimpleNamespace(id=i, position=i - 1, text=f"c{i}") for i in (1, 2, 3, 4)]
    groups = [
        [{1: 0.90, 2: 0.1, 3: 1.0, 4: 0.5}, {1: 0.91, 2: 0.9, 3: 1.0}],
        [{1: 0.905, 2: 0.3, 3: 1.0}, {1: 0.90, 2: 0.3, 3: 0.0}],
    ]
    flags = flag_constant(criteria, groups, tolerance=0.02)  # type: ignore[arg-type]
    # 1 never moves more than 0.01; 2 varies in the first prompt; 3 in the second; 4 was
    # judged once per prompt, too few to tell.
    assert [(f.position, f.text, f.judgments) for f in flags] == [(0, "c1", 4)]
    assert flags[0].value == pytest.approx(0.90375)
    assert flag_constant(criteria, groups, tolerance=0.001) == []  # type: ignore[arg-type]


# -- rubric formats from files -----------------------------------------------------------


def _autoj_tree(root: Path, special: str) -> Path:
    folder = root / "other_resources" / "scenario_criteria"
    (folder / "basics").mkdir(parents=True)
    (folder / "specials").mkdir()
    (folder / "basics" / "basic_x.yaml").write_text(
        "clarity:\n  content: Is clear.\n  weight: 4\n  type: basic\n"
    )
    (folder / "specials" / "demo.yaml").write_text(special)
    return folder


def test_autoj_scenario_includes_its_basics_first(tmp_path: Path) -> None:
    folder = _autoj_tree(
        tmp_path,
        "extended:\n  tone:\n    content: Polite tone.\n    weight: 2\n    type: style\n"
        'basic-x:\n  !include "./other_resources/scenario_criteria/basics/basic_x.yaml"\n',
    )
    (spec,) = read_autoj_rubrics(folder).specs
    assert spec.name == "autoj/demo" and spec.prompt is None
    assert [(c.text, c.weight, c.theme, c.tags) for c in spec.criteria] == [
        ("Is clear.", 4.0, "basic", ["name:clarity", "from:basic-x"]),
        ("Polite tone.", 2.0, "style", ["name:tone", "from:extended"]),
    ]


@pytest.mark.parametrize(
    ("special", "message"),
    [
        ('basic-x:\n  !include "./nowhere/basic.yaml"\n', "no such file"),
        ('basic-x:\n  !include "../../etc/passwd"\n', "inside the repository"),
        ("extended:\n  a: {content: A, weight: 2, type: style, colour: red}\n", "colour"),
        (
            "extended:\n  a: {content: A, weight: 2, type: style}\n"
            "  a: {content: B, weight: 1, type: style}\n",
            "duplicate key",
        ),
        (
            "extra:\n  a: {content: A, weight: 2, type: style}\n",
            "expected 'extended' or an !include",
        ),
        ("extended:\n  a: {content: A, weight: 0, type: style}\n", "non-zero"),
    ],
)
def test_autoj_errors_name_the_file(tmp_path: Path, special: str, message: str) -> None:
    folder = _autoj_tree(tmp_path, special)
    with pytest.raises(ValidationFailed, match=message) as caught:
        read_autoj_rubrics(folder)
    assert "demo.yaml" in str(caught.value)


def _score_rubric(criteria: str, prefix: str = "") -> dict[str, str]:
    rubric = {f"{prefix}criteria": criteria}
    rubric |= {f"{prefix}score{n}_description": f"Level {n} of {criteria}" for n in range(1, 6)}
    return rubric


def test_prometheus_score_rubric_becomes_an_ordinal_criterion(tmp_path: Path) -> None:
    path = tmp_path / "rubrics.jsonl"
    records = [
        _score_rubric("Is the answer helpful?"),
        {**_score_rubric("Is the answer helpful?", "orig_"), "orig_response": "..."},
        _score_rubric("Is the tone kind?"),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    batch = read_prometheus_rubrics(path)
    assert batch.notes == ["1 repeated score rubric(s) stored once"]
    first, second = batch.specs
    assert first.name.startswith("prometheus/") and first.name != second.name
    (criterion,) = first.criteria
    assert criterion.text == "Is the answer helpful?"
    assert criterion.scale.model_dump() == {
        "type": "ordinal",
        "levels": [
            {"score": n, "description": f"Level {n} of Is the answer helpful?"} for n in range(1, 6)
        ],
    }


def test_prometheus_record_without_a_level_is_refused(tmp_path: Path) -> None:
    record = _score_rubric("Is it kind?")
    del record["score4_description"]
    path = tmp_path / "rubric.json"
    path.write_text(json.dumps([_score_rubric("Is it short?"), record]))
    with pytest.raises(ValidationFailed, match=r"rubric.json score rubric #2: score4_description"):
        read_prometheus_rubrics(path)


def test_generator_file(tmp_path: Path) -> None:
    path = tmp_path / "generator.yaml"
    path.write_text("backend: vllm\nmodel: /models/m\nmin_criteria: 3\nthemes: [coverage, style]\n")
    spec = load_generator_file(path)
    assert (spec.backend, spec.model, spec.min_criteria, spec.themes) == (
        "vllm",
        "/models/m",
        3,
        ("coverage", "style"),
    )
    path.write_text("backend: vllm\nmax_criterias: 3\n")
    with pytest.raises(ValidationFailed, match=r"generator\.yaml: max_criterias: Extra inputs"):
        load_generator_file(path)
