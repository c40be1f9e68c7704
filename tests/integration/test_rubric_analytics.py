"""Per-criterion analytics of a rubric version, read from scores the real scorer stored.

A scripted judge gives known verdicts: the response's marker words decide each criterion
(STEP, SOURCE, BRIEF, PILLS; GARBLE makes the judge's reply to "Cites a source" unparseable,
OVERFLOW and OUTAGE make the backend fail as a too-long response and an outage do). Every
expected figure below is worked out by hand from those verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, select, text
from sqlalchemy.orm import Session

from rubricsvc.backends.base import BackendError, ContextLengthError
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.backends.types import GenerationRequest
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.models import Criterion, JudgeConfig, Judgment, RubricVersion, Score
from rubricsvc.rubrics import versions as rubrics
from rubricsvc.rubrics.analytics import (
    CriterionStats,
    RubricAnalytics,
    chart_bars,
    rubric_analytics,
)
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.scoring.attribution import CANARY_RESPONSE
from rubricsvc.scoring.scorer import ScoreOptions, score
from rubricsvc.scoring.selection import Selection

NAME = "t/analytics"
# (text, weight); the first four are decided by a marker word, "Is polite" is always met.
CRITERIA: list[tuple[str, float]] = [
    ("Gives a concrete STEP", 3),
    ("Is polite", 1),
    ("Cites a SOURCE", 2),
    ("Stays BRIEF", 1),
    ("Recommends PILLS without a doctor", -2),
]
# Prompt -> its completions' texts. Verdicts [step, polite, source, brief, pills] and rar
# scores (sum of weight * value over the judged |weights|):
#   a1 [1,1,1,0,0] 6/9   a2 [0,1,F,1,0] 2/7   a3 [0,1,0,1,1] 0     (best a1, worst a3)
#   b1 [1,1,0,0,0] 4/9   b2 [0,1,F,1,1] 0/7                         (best b1, worst b2)
#   c1 [1,1,1,0,0] 6/9                                              (alone: no comparison)
COMPLETIONS = {
    "How do I start running?": {
        "a1": "One STEP: jog ten minutes a day. SOURCE: the NHS couch-to-5k plan.",
        "a2": "BRIEF: just run. GARBLE",
        "a3": "BRIEF: take PILLS for the pain.",
    },
    "How do I sleep better?": {
        "b1": "One STEP: go to bed at the same time every night.",
        "b2": "BRIEF: PILLS. GARBLE",
    },
    "How do I learn to cook?": {
        "c1": "One STEP: cook one new recipe a week. SOURCE: a library cookbook.",
    },
}


def _save_version(session: Session, criteria: list[tuple[str, float]]) -> RubricVersion:
    spec = RubricSpec.model_validate(
        {"name": NAME, "criteria": [{"text": t, "weight": w} for t, w in criteria]}
    )
    version = rubrics.save_rubric(session, spec).version
    rubrics.approve(session, version, "tester")
    return version


def _add_completions(session: Session, prompts: dict[str, dict[str, str]]) -> None:
    records = [
        ("test", CompletionRecord(prompt=prompt, text=body, external_id=external_id))
        for prompt, completions in prompts.items()
        for external_id, body in completions.items()
    ]
    add_completions(session, records)


def _parts(request: GenerationRequest) -> tuple[str, str]:
    """The criterion and the response a criterion-text request shows the judge."""
    content = str(request.chat[-1]["content"])
    response = content.split("<response>\n")[1].split("\n</response>")[0]
    criterion = content.split("Criterion: ")[-1].split("\n")[0]
    return criterion, response


def marker_judge(request: GenerationRequest) -> str | BackendError:
    """YES when the criterion's upper-case marker word is in the response ("Is polite": always);
    unparseable on "Cites a SOURCE" when the response says GARBLE and on the canary's neutral
    response too (so those failures are the judge's, not the response's); OVERFLOW and OUTAGE fail
    the call like a too-long response and an unreachable backend."""
    criterion, response = _parts(request)
    if "OVERFLOW" in response:
        return ContextLengthError(5000, 2048)
    if "OUTAGE" in response:
        return BackendError("HTTP 503", retryable=True, status=503)
    if "SOURCE" in criterion and ("GARBLE" in response or response == CANARY_RESPONSE):
        return "I cannot tell, sorry!"
    marker = next((word for word in criterion.split() if word.isupper() and len(word) > 1), None)
    met = marker is None or marker in response
    return f"Reasoning.\nVERDICT: {'YES' if met else 'NO'}"


def _score(
    session: Session,
    version: RubricVersion,
    script: Callable[[GenerationRequest], str | BackendError],
    judge: str = "scripted-markers",
    aggregation: str = "rar",
) -> int:
    """Score every completion against ``version`` through the scorer; the judge
    config's id."""
    spec = JudgeSpec(
        name=judge,
        backend="scripted",
        model=judge,  # another model, another config hash: no verdict shared between judges
        mode=VerdictMode.CRITERION_TEXT,
        retries=0,
        retry_backoff=0,
    )
    score(
        session,
        spec,
        Selection(version_ids=(version.id,)),
        ScoreOptions(aggregation=aggregation, min_coverage=0.5),
        lambda: ScriptedBackend(text=script),
    )
    session.commit()
    return session.scalars(select(JudgeConfig.id).where(JudgeConfig.name == judge)).one()


@pytest.fixture
def scored(session: Session) -> tuple[RubricVersion, int]:
    """The rubric shared by the three prompts, its six completions scored by the marker
    judge; the version and the judge config id."""
    version = _save_version(session, CRITERIA)
    _add_completions(session, COMPLETIONS)
    session.commit()
    judge_id = _score(session, version, marker_judge)
    return version, judge_id


def _by_text(analytics: RubricAnalytics) -> dict[str, CriterionStats]:
    return {c.text: c for c in analytics.criteria}


def test_figures_match_the_verdicts(session: Session, scored: tuple[RubricVersion, int]) -> None:
    version, judge_id = scored
    assert len(session.scalars(select(Score)).all()) == 6  # the data is what the docstring says

    analytics = rubric_analytics(session, version)

    assert (analytics.version_id, analytics.judge_config_ids) == (version.id, [judge_id])
    assert (analytics.completions, analytics.prompts) == (6, 3)
    assert [c.text for c in analytics.criteria] == [t for t, _ in CRITERIA]
    assert [c.position for c in analytics.criteria] == [0, 1, 2, 3, 4]
    stats = _by_text(analytics)

    step = stats["Gives a concrete STEP"]
    assert (step.values, step.pass_rate) == pytest.approx((6, 0.5))
    assert (step.mean_spread, step.spread_prompts, step.never_varies) == (1.0, 2, False)
    assert step.discrimination == pytest.approx(1.0)  # present on a1 and b1, not a3 or b2
    assert (step.failures, step.failure_rate, step.suggestion) == ({}, 0.0, None)
    assert (step.weight, step.category) == (3, "important")

    polite = stats["Is polite"]
    assert (polite.values, polite.pass_rate) == (6, 1.0)
    assert (polite.mean_spread, polite.spread_prompts, polite.never_varies) == (0.0, 2, True)
    assert polite.discrimination == 0.0
    assert polite.suggestion == "never varies (pass rate 1.00 on 6 values): sharpen or remove"

    source = stats["Cites a SOURCE"]
    # a2 and b2 failed on the judge's reply: 4 values (a1 1, a3 0, b1 0, c1 1); on the
    # second prompt only b1 is judged, so only the first prompt has a spread.
    assert (source.values, source.pass_rate) == (4, 0.5)
    assert source.failures == {"judge": 2}
    assert source.failure_rate == pytest.approx(2 / 6)
    assert (source.mean_spread, source.spread_prompts, source.never_varies) == (1.0, 1, False)
    assert source.discrimination == pytest.approx(1.0)  # b2 (worst) failed: first prompt only
    assert source.suggestion == "fails its judge 33% of the time (judge): reword"

    brief = stats["Stays BRIEF"]
    assert (brief.values, brief.pass_rate) == (6, 0.5)
    assert brief.discrimination == pytest.approx(-1.0)  # met on a3 and b2, the worst
    assert brief.suggestion == (
        "rewards the worse completion (discrimination -1.00): check its direction/weight"
    )

    pills = stats["Recommends PILLS without a doctor"]
    assert (pills.values, pills.pass_rate) == pytest.approx((6, 2 / 6))
    assert (pills.mean_spread, pills.spread_prompts) == (1.0, 2)
    # Present on the worst completions (raw difference -1); a pitfall there does its job.
    assert pills.discrimination == pytest.approx(1.0)
    assert (pills.category, pills.suggestion) == ("pitfall", None)


def test_judge_filter_and_one_aggregation_per_completion(
    session: Session, scored: tuple[RubricVersion, int]
) -> None:
    version, markers = scored
    # The same judge under a second aggregation (cached verdicts, new score rows) ...
    _score(session, version, marker_judge, aggregation="healthbench")
    # ... and a second judge that says yes to everything.
    yes = _score(session, version, lambda _r: "Fine.\nVERDICT: YES", judge="scripted-yes")
    assert len(session.scalars(select(Score)).all()) == 18

    only_markers = rubric_analytics(session, version, markers)
    assert only_markers.judge_config_ids == [markers]
    assert only_markers.completions == 6
    stats = _by_text(only_markers)
    assert stats["Is polite"].values == 6  # counted once, not once per aggregation
    assert stats["Cites a SOURCE"].failures == {"judge": 2}
    assert stats["Stays BRIEF"].discrimination == pytest.approx(-1.0)

    only_yes = _by_text(rubric_analytics(session, version, yes))
    for criterion in only_yes.values():
        assert (criterion.values, criterion.pass_rate, criterion.never_varies) == (6, 1.0, True)
        # Every completion gets the same score: best and worst tie, nothing is told apart.
        assert criterion.discrimination == 0.0
        assert criterion.suggestion is not None and criterion.suggestion.startswith("never")

    both = rubric_analytics(session, version)
    assert both.judge_config_ids == sorted([markers, yes])
    assert (both.completions, both.prompts) == (6, 3)
    step = _by_text(both)["Gives a concrete STEP"]
    assert (step.values, step.pass_rate) == pytest.approx((12, 9 / 12))
    # Spread and discrimination compare completions under one judge: 2 prompts x 2 judges.
    assert (step.spread_prompts, step.mean_spread) == pytest.approx((4, 0.5))
    assert step.discrimination == pytest.approx(0.5)
    source = _by_text(both)["Cites a SOURCE"]
    assert (source.values, source.failures) == (10, {"judge": 2})
    assert source.failure_rate == pytest.approx(2 / 12)

    assert rubric_analytics(session, version, yes + markers + 100).completions == 0


def test_a_new_version_reads_its_own_scores(
    session: Session, scored: tuple[RubricVersion, int]
) -> None:
    """Version 2 only turns "Stays BRIEF" into a pitfall (weight -1): the judge sees the same
    criteria, so every verdict comes from the cache, and the judgments still name version 1's
    criteria. Scores of version 2 (rar, |weights| 9):
    a1 6/9, a2 0/7, a3 -2/9 (best a1, worst a3); b1 4/9, b2 -2/7 (best b1, worst b2)."""
    first, judge_id = scored
    second = _save_version(session, [(t, -1 if "BRIEF" in t else w) for t, w in CRITERIA])
    session.commit()
    assert second.id != first.id
    _score(session, second, marker_judge)
    second_ids = set(session.scalars(select(Criterion.id).where(Criterion.version_id == second.id)))
    judged = set(session.scalars(select(Judgment.criterion_id)))
    assert judged and not judged & second_ids  # judgments cannot tell which version used them

    analytics = rubric_analytics(session, second, judge_id)
    assert {c.criterion_id for c in analytics.criteria} == second_ids
    assert analytics.completions == 6
    brief = _by_text(analytics)["Stays BRIEF"]
    assert (brief.weight, brief.category, brief.values, brief.pass_rate) == (-1, "pitfall", 6, 0.5)
    # Met on the worst completions, now as a pitfall: it counts against them, as it should.
    assert brief.discrimination == pytest.approx(1.0)
    assert brief.suggestion is None
    assert _by_text(analytics)["Cites a SOURCE"].failures == {"judge": 2}

    # The first version's figures are its own, untouched by the second's scores.
    before = _by_text(rubric_analytics(session, first, judge_id))["Stays BRIEF"]
    assert (before.weight, before.values, before.discrimination) == pytest.approx((1, 6, -1.0))


def test_response_and_infrastructure_failures(session: Session) -> None:
    """d1 is judged (yes, yes, no); d2 overflows the judge's context: each criterion is
    charged its worst value (0, 0, 1 for the pitfall), counted as a response failure, not as a
    verdict; d3 meets an outage: infrastructure failures, the score is masked."""
    version = _save_version(
        session,
        [("Answers the question", 2), ("Avoids jargon", 1), ("Uses SLURS", -1)],
    )
    _add_completions(
        session,
        {
            "What is a prime?": {
                "d1": "A number with two divisors.",
                "d2": "OVERFLOW",
                "d3": "OUTAGE",
            }
        },
    )
    session.commit()
    _score(session, version, marker_judge)
    statuses = {
        s.completion_id: [c["status"] for c in s.details["criteria"]]
        for s in session.scalars(select(Score))
    }
    assert sorted(statuses.values()) == [["failed"] * 3, ["ok"] * 3, ["unjudgeable"] * 3]

    analytics = rubric_analytics(session, version)
    assert (analytics.completions, analytics.prompts) == (3, 1)
    for criterion in analytics.criteria:
        assert criterion.values == 1  # only d1's verdict
        assert criterion.failures == {"infrastructure": 1, "response": 1}
        assert criterion.failure_rate == pytest.approx(2 / 3)
        # One judged completion: no spread; the worst scored one (d2) has no verdict.
        assert (criterion.spread_prompts, criterion.mean_spread) == (0, None)
        assert (criterion.never_varies, criterion.discrimination) == (False, None)
        assert criterion.suggestion == (
            "fails its judge 67% of the time (infrastructure, response): "
            "re-score when the backend is healthy"
        )
    # The pitfall's charged worst value (1 on d2) is not a verdict: its pass rate is d1's 0.
    assert [c.pass_rate for c in analytics.criteria] == [1.0, 1.0, 0.0]


def test_a_version_without_scores(session: Session) -> None:
    version = _save_version(session, CRITERIA)
    session.commit()
    analytics = rubric_analytics(session, version)
    assert (analytics.completions, analytics.prompts, analytics.judge_config_ids) == (0, 0, [])
    assert len(analytics.criteria) == len(CRITERIA)
    for criterion in analytics.criteria:
        assert (criterion.values, criterion.spread_prompts, criterion.never_varies) == (0, 0, False)
        assert (criterion.pass_rate, criterion.mean_spread, criterion.discrimination) == (
            None,
            None,
            None,
        )
        assert (criterion.failures, criterion.failure_rate, criterion.suggestion) == (
            {},
            None,
            None,
        )
    assert chart_bars(analytics) == [
        {"label": f"#{i}", "pass_rate": None, "spread": None, "discrimination": None}
        for i in range(1, len(CRITERIA) + 1)
    ]


def test_chart_bars(session: Session, scored: tuple[RubricVersion, int]) -> None:
    version, _ = scored
    bars = chart_bars(rubric_analytics(session, version))
    assert [b["label"] for b in bars] == ["#1", "#2", "#3", "#4", "#5"]
    assert bars[3] == {
        "label": "#4",
        "pass_rate": pytest.approx(0.5),
        "spread": 1.0,
        "discrimination": pytest.approx(-1.0),
    }
    out_of_range = CriterionStats(
        criterion_id=1,
        position=0,
        text="x",
        weight=1,
        category="important",
        values=3,
        pass_rate=1.5,
        mean_spread=-0.2,
        spread_prompts=1,
        never_varies=False,
        discrimination=-3.0,
    )
    clamped = chart_bars(RubricAnalytics(1, [1], 3, 1, [out_of_range]))
    assert clamped == [{"label": "#1", "pass_rate": 1.0, "spread": 0.0, "discrimination": -1.0}]


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """Every SQL statement the engine runs while the test is on."""
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    yield seen
    event.remove(engine, "before_cursor_execute", record)


def test_the_cost_follows_the_versions_own_scores(
    session: Session,
    engine: Engine,
    scored: tuple[RubricVersion, int],
    statements: list[tuple[str, Any]],
) -> None:
    """A fixed number of queries whatever the data, each reaching ``scores`` through an index
    (never a full scan): the page costs the same beside 10^3 or 10^5 other judgments."""
    version, _ = scored
    small = _save_version(session, [("Says hello", 1)])  # version 2: a single criterion
    session.commit()
    _score(session, small, marker_judge)

    statements.clear()
    rubric_analytics(session, version)
    queries = [s for s in statements if s[0].lstrip().upper().startswith("SELECT")]
    statements.clear()
    rubric_analytics(session, small)
    assert len([s for s in statements if s[0].lstrip().upper().startswith("SELECT")]) == len(
        queries
    )

    reading_scores = [(q, p) for q, p in queries if "scores" in q]
    assert reading_scores
    with engine.connect() as conn:
        postgres = conn.dialect.name == "postgresql"
        if postgres:  # a tiny table is scanned anyway unless scans are ruled out
            conn.exec_driver_sql("SET enable_seqscan = off")
        for query, parameters in reading_scores:
            explain = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "
            plan = "\n".join(str(row) for row in conn.exec_driver_sql(explain + query, parameters))
            if postgres:
                assert "Seq Scan on scores" not in plan, plan
            else:
                assert "SCAN scores" not in plan and "SEARCH scores" in plan, plan
        if postgres:
            conn.execute(text("RESET enable_seqscan"))
