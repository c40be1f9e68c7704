"""A built-in mode's own text is hashed through its wording version: this test fails when that
text changes and the version does not.

Each mode builds its calls for fixed inputs through a template made only of the placeholders
it fills, so the digest covers what the mode writes (questions, answer formats, how criteria
are listed, the verdict choices) and nothing of the bundled templates or the sampling
settings, which are hashed on their own.
"""

from __future__ import annotations

import pytest

from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import (
    CallContext,
    Case,
    CompletionView,
    CriterionView,
    RubricCriterion,
    get_mode,
)
from rubricsvc.judging.templates import PromptTemplate

# mode -> (its wording version, the digest of its calls for the inputs below). When a mode's
# text changes on purpose: bump its ``wording`` (every judge config of that mode gets a new
# hash, so nothing cached is replayed), then record the new pair here.
RECORDED = {
    "criterion-prob": ("1", "2a78d8355aa9cb12b144ddb02c8a35541fe6c6668a61fc642342d14f3617ee01"),
    "criterion-text": ("1", "b3b90a35f3c22e4c234cfe137ec6343a7b34bbd3c31222f99aa56a04f91928ac"),
    "multi-criterion": ("1", "75d3a75c5dc9340a8b578b8d71a954b6b5c91d9e136a78ca4e85c824d46ebb49"),
    "holistic": ("2", "37e9ab3cbae6f459ef1c62e123f1cd1c1a824fc2462032adcad3ccfdc420ac80"),
    "reference-relative": ("1", "554f3f75d0f2a91b4b8aff675f58a8632af9866a674d3930e66ac5038c408962"),
}

# The placeholders each mode fills besides the conversation and the response.
FIELDS = {
    "criterion-prob": ("question",),
    "criterion-text": ("question", "verdict_format"),
    "multi-criterion": ("criteria", "answer_format"),
    "holistic": ("criteria", "scale"),
    "reference-relative": ("reference", "dimension", "criteria"),
}

SCALE = {
    "type": "ordinal",
    "levels": [{"score": 1, "description": "muddled"}, {"score": 3, "description": "clear"}],
}
CRITERIA = (
    CriterionView(1, "Recommends a schedule", "Same bedtime", 3.0, {"type": "binary"}, "advice"),
    CriterionView(2, "Explains clearly", None, 1.0, SCALE, "style"),
    CriterionView(3, "Recommends pills", None, -2.0, {"type": "binary"}, "advice"),
)
COMPLETION = CompletionView(
    7,
    [{"role": "user", "content": "How do I sleep better?"}],
    "Go to bed at ten.",
    reference="Keep a schedule; avoid screens.",
)


def digest_of_calls(mode_name: str) -> str:
    mode = get_mode(mode_name)
    placeholders = ("conversation", "response", *FIELDS[mode_name])
    template = PromptTemplate("fields", "### user\n" + "\n".join(f"${{{f}}}" for f in placeholders))
    criteria = tuple(RubricCriterion(c.id, c.id, c, f"criterion-{c.id}") for c in CRITERIA)
    case = Case(COMPLETION, criteria, "judge", "rubric", "prompt", "response")
    spec = JudgeSpec(name="wording", backend="scripted", mode=mode_name, max_criteria=2, seed=1)
    calls = mode.calls(CallContext(spec, template, COMPLETION), mode.plan(case).items)
    # What the judge reads and may answer; sampling settings are the judge config's own fields.
    return content_hash(
        [
            [
                c.request.chat,
                getattr(c.request, "choices", None),
                getattr(c.request, "json_schema", None),
            ]
            for c in calls
        ]
    )


@pytest.mark.parametrize("mode_name", sorted(RECORDED))
def test_a_modes_text_changes_only_with_its_wording_version(mode_name: str) -> None:
    version, recorded = RECORDED[mode_name]
    digest = digest_of_calls(mode_name)
    assert get_mode(mode_name).wording == version, (
        f"{mode_name}'s wording version moved to {get_mode(mode_name).wording!r}: record "
        f"({get_mode(mode_name).wording!r}, {digest!r}) in RECORDED"
    )
    assert digest == recorded, (
        f"{mode_name} writes other text than recorded: bump its wording version (it is part "
        f"of the judge-config hash), then record ({version!r} -> new version, {digest!r})"
    )


def test_the_wording_version_is_part_of_the_judge_config_hash() -> None:
    spec = JudgeSpec(name="w", backend="scripted", mode="holistic")
    assert spec.hashed_settings()["mode_wording"] == get_mode("holistic").wording
    mode = get_mode("holistic")
    before = spec.config_hash()
    original = mode.wording
    try:
        type(mode).wording = "test-bump"  # type: ignore[misc]
        assert JudgeSpec(name="w", backend="scripted", mode="holistic").config_hash() != before
    finally:
        type(mode).wording = original  # type: ignore[misc]
