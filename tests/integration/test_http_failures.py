"""An OpenAI-compatible endpoint that fails: HTTP 500, time-outs and garbage are retried with
backoff, then stored as failed with their error; the affected scores are masked, never 0.

The endpoint is a real HTTP server on loopback whose answers are scripted per request, so
the failures go through the real client, network stack and error mapping.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.backends import create_backend
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import Judgment, JudgmentStatus
from rubricsvc.rubrics import versions as rubrics
from rubricsvc.scoring.scorer import ScoreOptions, score
from rubricsvc.scoring.selection import Selection
from tests.fake_openai import FakeOpenAI, chat_completion, openai_judge, serving
from tests.helpers import rubric_spec
from tests.requirements import require_module

require_module("openai", "openai")

CRITERIA = [
    {"text": "Recommends a regular schedule", "weight": 5},
    {"text": "Mentions caffeine", "weight": 3},
    {"text": "Explains why", "weight": 2},
]


class ScriptedEndpoint(FakeOpenAI):
    """Answers /v1/chat/completions by criterion: 'ok', '500', 'slow', 'garbage', or a list."""

    def __init__(self) -> None:
        super().__init__(self._answer)
        self.plan: dict[str, list[str]] = {}
        self.requests: list[str] = []

    def next_action(self, criterion: str) -> str:
        self.requests.append(criterion)
        actions = self.plan.get(criterion, ["ok"])
        return actions.pop(0) if len(actions) > 1 else actions[0]

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        criterion = body["messages"][-1]["content"].split("Criterion: ")[-1].split("\n")[0]
        action = self.next_action(criterion)
        if action == "500":
            return 500, {"error": {"message": "internal error", "type": "server_error"}}
        if action == "slow":
            time.sleep(1.5)  # longer than the client's timeout
            return 200, chat_completion("Too late.\nVERDICT: YES", "scripted")
        if action == "garbage":
            return 200, chat_completion("¯\\_(ツ)_/¯ who knows", "scripted")
        return 200, chat_completion("It does.\nVERDICT: YES", "scripted")


@pytest.fixture
def endpoint() -> Iterator[ScriptedEndpoint]:
    with serving(ScriptedEndpoint()) as server:
        yield server


def _judge(endpoint: ScriptedEndpoint, name: str = "http") -> JudgeSpec:
    """Two quick retries, and a time-out shorter than the endpoint's slow answer."""
    return openai_judge(
        endpoint, name, model="scripted", retries=2, retry_backoff=0.05, timeout=0.5
    )


def _setup(session: Session) -> None:
    spec = rubric_spec(
        "t/http", criteria=CRITERIA, prompt={"text": "How to sleep?", "external_id": "p"}
    )
    rubrics.approve(session, rubrics.save_rubric(session, spec).version, "tester")
    add_completions(
        session,
        [("t", CompletionRecord(prompt_external_id="p", text="Keep a schedule.", external_id="c"))],
    )
    session.commit()


def _score(session: Session, judge: JudgeSpec) -> Any:
    options = dict(judge.backend_options)
    report = score(
        session,
        judge,
        Selection(),
        ScoreOptions(aggregation="rar", min_coverage=0.4),
        lambda: create_backend("openai", model=judge.model, **options),
    )
    session.commit()
    return report


def test_500_timeout_and_garbage_are_retried_then_stored_as_failed(
    sqlite_url: str, endpoint: ScriptedEndpoint
) -> None:
    from rubricsvc.db import make_engine

    engine = make_engine(sqlite_url)
    endpoint.plan = {"Mentions caffeine": ["500"], "Explains why": ["slow"]}
    with Session(engine) as session:
        _setup(session)
        report = _score(session, _judge(endpoint))
        assert (report.computed, report.failed) == (1, 2)
        # Two failing criteria, three attempts each; the healthy one once.
        assert endpoint.requests.count("Mentions caffeine") == 3
        assert endpoint.requests.count("Explains why") == 3
        assert endpoint.requests.count("Recommends a regular schedule") == 1
        failed = {
            j.criterion_id: j
            for j in session.scalars(
                select(Judgment).where(Judgment.status == JudgmentStatus.FAILED)
            )
        }
        errors = sorted(j.error or "" for j in failed.values())
        assert "500" in errors[0] or "500" in errors[1]
        assert any("did not answer within 0.5 s" in e for e in errors)
        assert all(j.attempts == 3 and j.value is None for j in failed.values())
        (scored,) = report.scores
        assert scored.value == pytest.approx(1.0)  # only the judged criterion counts...
        assert scored.coverage == pytest.approx(0.5)  # ...and the score says how much that is
        assert scored.status == "partial"
    engine.dispose()


def test_garbage_then_recovery(sqlite_url: str, endpoint: ScriptedEndpoint) -> None:
    from rubricsvc.db import make_engine

    engine = make_engine(sqlite_url)
    endpoint.plan = {"Mentions caffeine": ["garbage", "500", "ok"]}
    with Session(engine) as session:
        _setup(session)
        # Sampling (temperature > 0): a garbled reply is asked again (at temperature 0 it
        # would come back the same and is not retried: test_scoring).
        judge = _judge(endpoint, "http-recovers").model_copy(update={"temperature": 0.7})
        report = _score(session, judge)
        assert (report.computed, report.failed) == (3, 0)
        assert endpoint.requests.count("Mentions caffeine") == 3
        judgment = session.scalars(select(Judgment).where(Judgment.attempts == 3)).one()
        assert judgment.status == JudgmentStatus.OK
        assert report.scores[0].value == pytest.approx(1.0)
        assert report.scores[0].coverage == 1.0
    engine.dispose()


def test_everything_failing_masks_the_score(sqlite_url: str, endpoint: ScriptedEndpoint) -> None:
    from rubricsvc.db import make_engine

    engine = make_engine(sqlite_url)
    endpoint.plan = {c["text"]: ["500"] for c in CRITERIA}  # type: ignore[misc]
    with Session(engine) as session:
        _setup(session)
        report = _score(session, _judge(endpoint, "http-down"))
        (scored,) = report.scores
        assert (scored.value, scored.status, scored.coverage) == (None, "masked", 0.0)
    engine.dispose()
