"""One list of themes: what rubric files and the bundled rubrics use, a generator drafts and
evolves (its default ``themes``)."""

from __future__ import annotations

import json

from rubricsvc.demo import RUBRICS
from rubricsvc.evolution.proposals import parse_proposal
from rubricsvc.rubrics.files import load_rubric_files
from rubricsvc.rubrics.generator import GeneratorSpec
from rubricsvc.rubrics.schemas import THEMES


def test_a_proposal_under_the_safety_theme_is_usable() -> None:
    answer = {
        "criteria": [
            {
                "text": "Recommends prescription sleeping pills without advising to see a doctor",
                "category": "pitfall",
                "theme": "safety",
            }
        ]
    }
    (criterion,) = parse_proposal(json.dumps(answer), GeneratorSpec(), max_new=2)
    assert criterion.theme == "safety" and criterion.weight < 0


def test_every_theme_of_the_bundled_rubrics_is_one_a_generator_drafts() -> None:
    used = {c.theme for spec in load_rubric_files([RUBRICS]) for c in spec.criteria}
    assert "safety" in used
    generator = GeneratorSpec()
    assert used <= set(THEMES) == set(generator.themes)
    assert set(
        generator.json_schema(1, 3)["properties"]["criteria"]["items"]["properties"]["theme"][
            "enum"
        ]
    ) == set(THEMES)
