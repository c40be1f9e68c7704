"""The over-optimization task set in the database: its rubrics added with the command, and
gold scored by the platform itself (check criteria, no judge called) through the trainer's
scorer, each prompt's rubric named by a template."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubricsvc.judging.aggregation import Outcome, rar
from rubricsvc.scoring.rewards import RewardRequest
from tests.cli_runner import cli_ok
from trainer.config import ScorerSettings
from trainer.overopt import load_task_set
from trainer.scorers import InProcessScorer

OVEROPT = Path(__file__).resolve().parents[2] / "examples" / "overopt"


@pytest.mark.model
def test_gold_scores_the_hand_written_answers_exactly(sqlite_url: str) -> None:
    cli_ok("rubrics", "add", str(OVEROPT / "rubrics.yaml"), database_url=sqlite_url)
    tasks = load_task_set(OVEROPT / "tasks.yaml").tasks
    answered = [(task, answer) for task in tasks for answer in task.answers]
    requests = [RewardRequest(answer.text, prompt_id=task.id) for task, answer in answered]

    gold = InProcessScorer(
        ScorerSettings(database_url=sqlite_url, rubric="{prompt_id}/gold", include_drafts=True)
    )
    results = gold.score(requests)
    for (task, answer), result in zip(answered, results, strict=True):
        outcomes = [
            Outcome(n, c.weight, 1.0 if met else 0.0)
            for n, (c, met) in enumerate(zip(task.criteria, answer.met, strict=True))
        ]
        assert result.status == "ok", (task.id, result.reasons)
        assert result.rubric is not None and result.rubric.startswith(f"{task.id}/gold")
        assert result.reward == pytest.approx(rar(outcomes, None)), (task.id, answer.text)
        assert all(c["status"] == "check" for c in result.criteria)  # nothing judged

    # Without the template each prompt has two rubrics, and the scorer will not guess.
    (ambiguous,) = InProcessScorer(
        ScorerSettings(database_url=sqlite_url, include_drafts=True)
    ).score(requests[:1])
    assert ambiguous.reward is None and ambiguous.status == "ambiguous"
