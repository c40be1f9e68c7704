"""A built-in mode's own text is hashed through its wording version: this test fails when that
text changes and the version does not.

Each mode builds its calls for fixed inputs through a template made only of the placeholders
it fills, so the digest covers what the mode writes (questions, answer formats, how criteria
are listed, the verdict choices) and nothing of the bundled templates or the sampling
settings, which are hashed on their own.
"""

from __future__ import annotations

import dataclasses

import pytest

from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import (
    CallContext,
    Case,
    CompletionView,
    CriterionView,
    DocumentView,
    RubricCriterion,
    get_mode,
)
from rubricsvc.judging.templates import PromptTemplate

# mode -> (its wording version, the digest of its calls for the inputs below). When a mode's
# text changes on purpose: bump its ``wording`` (every judge config of that mode gets a new
# hash, so nothing cached is replayed), then record the new pair here.
RECORDED = {
    "criterion-prob": ("2", "8f858ec7aef111e8143b09ec90f773a62a9b7906c8502e7ff2388002f88b5a31"),
    "criterion-text": ("2", "7aed8d6924b17e3513cf838f839eac7c2405092be52bb018ff0602d829b5dc94"),
    "multi-criterion": ("2", "0c53907d052634b6cbd25e8255495c1e86daa70b3d1b52dbbd1bb24e1443ad03"),
    "holistic": ("2", "37e9ab3cbae6f459ef1c62e123f1cd1c1a824fc2462032adcad3ccfdc420ac80"),
    "reference-relative": ("2", "02b9b003ba1c494f64753bcae3b5799c2a1d193f4566c74fb682b8d7ea1fa206"),
}

# The placeholders each mode fills besides the conversation and the response.
FIELDS = {
    "criterion-prob": ("reference", "question"),
    "criterion-text": ("reference", "question", "verdict_format"),
    "multi-criterion": ("reference", "criteria", "answer_format"),
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


# The per-criterion modes also write the framing of a reference answer and of a trajectory,
# and the citation checks (their own template and questions): an agent's cited response with
# its trajectory and a document, judged with the reference shown.
PER_CRITERION = {"criterion-prob", "criterion-text", "multi-criterion"}
AGENT_COMPLETION = dataclasses.replace(
    COMPLETION,
    response="Go to bed at ten [1].\n\n## References\n[1] Sleep. https://sleep.example/",
    trajectory=(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "Error: timed out"},
        {"role": "assistant", "content": "Go to bed at ten [1]."},
    ),
    documents=(
        DocumentView("1", "https://sleep.example/", "Sleep", "A fixed bedtime helps.", "doc-1"),
    ),
)
AGENT_CRITERIA = (
    RubricCriterion(
        4,
        4,
        CriterionView(4, "Searched first", None, 1.0, {"type": "binary"}, target="trajectory"),
        "criterion-4",
    ),
    RubricCriterion(
        5,
        5,
        CriterionView(5, "Citations hold", None, 2.0, {"type": "binary"}),
        "criterion-5",
        citations=True,
    ),
)


def digest_of_calls(mode_name: str) -> str:
    mode = get_mode(mode_name)
    placeholders = ("conversation", "response", *FIELDS[mode_name])
    template = PromptTemplate("fields", "### user\n" + "\n".join(f"${{{f}}}" for f in placeholders))
    criteria = tuple(RubricCriterion(c.id, c.id, c, f"criterion-{c.id}") for c in CRITERIA)
    completion = COMPLETION
    extra: dict[str, bool] = {}
    if mode_name in PER_CRITERION:
        completion, criteria, extra = (
            AGENT_COMPLETION,
            criteria + AGENT_CRITERIA,
            {"reference": True},
        )
    elif mode_name == "reference-relative":  # citation checks too (no trajectory, no option)
        completion, criteria = AGENT_COMPLETION, criteria + AGENT_CRITERIA[1:]
    spec = JudgeSpec(
        name="wording", backend="scripted", mode=mode_name, max_criteria=2, seed=1, **extra
    )
    case = Case(completion, criteria, "judge", "rubric", "prompt", "response", spec=spec)
    calls = mode.calls(CallContext(spec, template, completion), mode.plan(case).items)
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
