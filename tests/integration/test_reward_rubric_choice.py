"""A reward is scored against one rubric. A prompt with several usable rubrics, asked for without
naming one, gets no reward ("ambiguous", naming the rubrics to choose from) and costs the judge
nothing; naming one of them scores against it alone; the other prompts of the batch are judged
as usual. The work a request is checked against counts only what will be judged, and the
trainer's Celery scorer submits no job for such a prompt.

The judge is a scripted backend: the test is about which criteria reach it, not its verdicts.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.backends.types import ChoiceRequest
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.models import ScoreJob
from rubricsvc.scoring.rewards import DEFAULT_SOURCE, RewardRequest, compute_rewards
from rubricsvc.scoring.scorer import ScoreOptions
from rubricsvc.scoring.workload import reward_work
from tests.helpers import approve_rubrics

PROMPT = {"external_id": "p-two", "text": "How can I sleep better?"}
FIRST: dict[str, Any] = {
    "name": "t/sleep-a",
    "prompt": PROMPT,
    "criteria": [{"text": "Recommends a regular sleep schedule", "weight": 1}],
}
SECOND: dict[str, Any] = {
    "name": "t/sleep-b",
    "prompt": PROMPT,
    "criteria": [
        {"text": "Mentions limiting caffeine", "weight": 1},
        {"text": "Recommends sleeping pills without a doctor", "weight": -1},
    ],
}
ONLY: dict[str, Any] = {
    "name": "t/tea",
    "prompt": {"external_id": "p-one", "text": "How do I brew green tea?"},
    "criteria": [{"text": "Gives a water temperature below boiling", "weight": 1}],
}
JUDGE = JudgeSpec(name="scripted-prob", backend="scripted", mode=VerdictMode.CRITERION_PROB)


def _yes(request: ChoiceRequest) -> dict[str, float]:
    return {"Yes": 0.8, "No": 0.2}


def test_a_prompt_with_two_rubrics_is_refused_unjudged_unless_one_is_named(
    database_url: str,
) -> None:
    approve_rubrics(database_url, FIRST, SECOND, ONLY, judges=[JUDGE])
    backend = ScriptedBackend(probs=_yes)
    requests = [
        RewardRequest("Keep a schedule and skip coffee.", prompt_id="p-two"),
        RewardRequest("Brew it at 80 C for two minutes.", prompt_id="p-one"),
        RewardRequest("Keep a schedule.", prompt_id="p-two", rubric="t/sleep-b@1"),
    ]
    engine = db.make_engine(database_url)
    try:
        with Session(engine) as session:
            planned = reward_work(
                session, JUDGE, requests, source=DEFAULT_SOURCE, include_drafts=False
            )
        with db.session_scope(engine) as session:
            batch = compute_rewards(
                session, JUDGE, requests, ScoreOptions(), lambda _: lambda: backend
            )
    finally:
        engine.dispose()

    ambiguous, tea, named = batch.results
    assert ambiguous.reward is None and ambiguous.status == "ambiguous"
    assert "t/sleep-a@1" in ambiguous.reasons[0] and "t/sleep-b@1" in ambiguous.reasons[0]
    assert ambiguous.criteria == []
    assert tea.status == "ok" and tea.rubric == "t/tea@1"
    assert named.status == "ok" and named.rubric == "t/sleep-b@1"
    # Judged: the tea rubric's one criterion and the named rubric's two; nothing of the
    # ambiguous rollout, under either rubric.
    shown = [request.chat[-1]["content"] for request in backend.requests]
    assert len(shown) == 1 + 2, shown
    assert not any("skip coffee" in text for text in shown)
    assert planned.judgments == 3


def test_the_celery_scorer_refuses_an_ambiguous_prompt_without_submitting_a_job(
    database_url: str,
) -> None:
    """No job is submitted for it, so no broker or worker is needed to get the refusal."""
    from trainer.celery_scorer import CeleryScorer
    from trainer.config import ScorerSettings

    approve_rubrics(database_url, FIRST, SECOND, judges=[JUDGE])
    scorer = CeleryScorer(ScorerSettings(via="celery", judge=JUDGE.name, database_url=database_url))
    (result,) = scorer.score([RewardRequest("Keep a schedule.", prompt_id="p-two")])
    assert result.reward is None and result.status == "ambiguous"
    assert "t/sleep-a@1" in result.reasons[0] and "t/sleep-b@1" in result.reasons[0]
    engine = db.make_engine(database_url)
    try:
        with Session(engine) as session:
            assert session.scalar(select(func.count()).select_from(ScoreJob)) == 0
    finally:
        engine.dispose()
