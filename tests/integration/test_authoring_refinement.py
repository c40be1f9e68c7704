"""Refinement from stored judgments: a criterion that never varies across a prompt's
completions is flagged, new criteria are proposed, and the result is a new draft version; the
refined version stays as it was."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.backends.types import ChoiceRequest, GenerationRequest
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.models import RubricVersion, VersionStatus
from rubricsvc.rubrics import versions as rubric_versions
from rubricsvc.rubrics.generator import GeneratorSpec
from rubricsvc.rubrics.refinement import RefineOptions, refine
from rubricsvc.rubrics.repository import resolve_version
from rubricsvc.scoring.scorer import ScoreOptions, score
from rubricsvc.scoring.selection import Selection
from tests.cli_runner import run_cli
from tests.helpers import rubric_spec

CRITERIA = [
    {"text": "Recommends a regular schedule", "weight": 5},
    {"text": "Mentions caffeine", "weight": 3},
    {"text": "Recommends pills without a doctor", "weight": -4},
]
RESPONSES = {
    "best": "Keep a fixed schedule, and no coffee after noon.",
    "middle": "Keep a fixed schedule; coffee is fine.",
    "worst": "Keep a fixed schedule and take sleeping pills.",
}
# The judge's probability of "Yes" per (criterion, response): the schedule is always met.
YES = {
    "Recommends a regular schedule": {"best": 0.90, "middle": 0.91, "worst": 0.905},
    "Mentions caffeine": {"best": 0.95, "middle": 0.60, "worst": 0.05},
    "Recommends pills without a doctor": {"best": 0.02, "middle": 0.10, "worst": 0.97},
}
JUDGE = JudgeSpec(name="scripted-prob", backend="scripted", mode=VerdictMode.CRITERION_PROB)
GENERATOR = GeneratorSpec(backend="scripted", retries=2)
PROPOSAL = {
    "criteria": [
        {
            "text": "Advises against caffeine late in the day",
            "category": "important",
            "theme": "coverage",
        }
    ]
}


def _judge(request: ChoiceRequest) -> dict[str, float]:
    content = request.chat[-1]["content"]
    criterion = next(text for text in YES if text in content)
    response = next(name for name, text in RESPONSES.items() if text in content)
    yes = YES[criterion][response]
    return {"Yes": yes, "No": 1 - yes}


def _scored_rubric(session: Session) -> RubricVersion:
    spec = rubric_spec(
        "t/sleep", criteria=CRITERIA, prompt={"text": "How do I sleep better?", "external_id": "p"}
    )
    version = rubric_versions.save_rubric(session, spec).version
    records = [
        ("test", CompletionRecord(prompt_external_id="p", text=text, external_id=name))
        for name, text in RESPONSES.items()
    ]
    add_completions(session, records)
    report = score(
        session,
        JUDGE,
        Selection(include_drafts=True),
        ScoreOptions(aggregation="rar"),
        lambda: ScriptedBackend(probs=_judge),
    )
    assert [s.status for s in report.scores] == ["ok"] * 3
    session.commit()
    return version


def test_a_constant_criterion_is_flagged_and_a_new_draft_proposed(session: Session) -> None:
    version = _scored_rubric(session)
    before = (version.content_hash, [(c.text, c.weight) for c in version.criteria])
    replies = iter(
        [
            # First a proposal that repeats a criterion of the rubric: refused, tried again.
            json.dumps({"criteria": [{**PROPOSAL["criteria"][0], "text": "Mentions  CAFFEINE"}]}),
            json.dumps(PROPOSAL),
        ]
    )
    generator = ScriptedBackend(text=lambda _r: next(replies))
    report = refine(session, version, JUDGE.name, GENERATOR, lambda: generator)
    session.commit()

    assert [(f.position, f.text) for f in report.flagged] == [(0, "Recommends a regular schedule")]
    assert report.flagged[0].judgments == 3
    assert report.flagged[0].value == pytest.approx(0.905)
    assert report.attempts == 2 and [c.text for c in report.proposed] == [
        PROPOSAL["criteria"][0]["text"]
    ]
    # The generator saw the best and the worst response (by their rar scores), not the middle.
    request = generator.requests[-1]
    assert isinstance(request, GenerationRequest)
    shown = request.chat[-1]["content"]
    assert RESPONSES["best"] in shown and RESPONSES["worst"] in shown
    assert RESPONSES["middle"] not in shown
    assert shown.index(RESPONSES["best"]) < shown.index(RESPONSES["worst"])

    assert report.saved is not None and report.saved.outcome == "new version"
    session.expire_all()
    refined = resolve_version(session, "t/sleep@2")
    assert refined.parent_id == version.id and refined.status == VersionStatus.DRAFT
    assert [c.text for c in refined.criteria] == [c["text"] for c in CRITERIA] + [
        "Advises against caffeine late in the day"
    ]
    assert refined.criteria[-1].weight == GENERATOR.weight(refined.criteria[-1].category)
    assert refined.note is not None
    assert (
        "Flagged, no variation across completions (kept for review): #1 'Recommends a regular schedule'"
        in refined.note
    )
    assert "Proposed: 'Advises against caffeine late in the day'" in refined.note
    assert refined.origin_detail["refined_from"] == "t/sleep@1"
    assert refined.origin_detail["flagged"][0]["text"] == "Recommends a regular schedule"

    old = resolve_version(session, "t/sleep@1")
    assert (old.content_hash, [(c.text, c.weight) for c in old.criteria]) == before
    assert old.note is None and old.status == VersionStatus.DRAFT


def test_nothing_is_stored_when_no_proposal_is_valid(session: Session) -> None:
    version = _scored_rubric(session)
    generator = ScriptedBackend(text=lambda _r: "Add a criterion about caffeine.")
    with pytest.raises(
        ValidationFailed,
        match=r"no valid proposal for t/sleep@1 after 3 attempt\(s\); "
        r"last: the answer is not a JSON object",
    ):
        refine(session, version, JUDGE.name, GENERATOR, lambda: generator)
    session.rollback()
    assert session.scalar(select(func.count()).select_from(RubricVersion)) == 1


def test_flags_only_and_the_errors_that_say_why(session: Session) -> None:
    version = _scored_rubric(session)
    report = refine(
        session,
        version,
        JUDGE.name,
        GENERATOR,
        lambda: ScriptedBackend(),
        RefineOptions(propose=False),
    )
    assert [f.text for f in report.flagged] == ["Recommends a regular schedule"]
    assert report.saved is None and report.attempts == 0
    with pytest.raises(NotFoundError, match="no stored judgments of a judge named 'other'"):
        refine(session, version, "other", GENERATOR, lambda: ScriptedBackend())
    with pytest.raises(ValidationFailed, match="needs holistic scores by judge 'scripted-prob'"):
        refine(
            session,
            version,
            JUDGE.name,
            GENERATOR,
            ScriptedBackend,
            RefineOptions(aggregation="holistic"),
        )


def test_refine_on_the_command_line(sqlite_url: str) -> None:
    engine = db.make_engine(sqlite_url)
    with db.session_scope(engine) as session:
        _scored_rubric(session)
    engine.dispose()
    flagged = run_cli(
        "rubrics",
        "refine",
        "t/sleep",
        "--judge",
        JUDGE.name,
        "--no-propose",
        database_url=sqlite_url,
    )
    assert flagged.code == 0, flagged.stderr
    assert (
        "t/sleep@1: 1 of 3 criteria flagged (no variation across 3 completion(s) of 1 prompt(s)"
        in flagged.stdout
    )
    assert "flagged   #1 Recommends a regular schedule (always 0.90)" in flagged.stdout
    missing = run_cli("rubrics", "refine", "t/sleep", "--judge", "nobody", database_url=sqlite_url)
    assert missing.code == 3 and missing.stderr.startswith("error: no stored judgments")
