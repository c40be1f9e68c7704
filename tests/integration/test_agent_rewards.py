"""The reward of a deep-research rollout on a real migrated SQLite database: rollouts made in
the real environment on the shipped corpus, scored by the embedded judge against the example's
rubrics (the citation path is the real one), and the same rollouts over the HTTP API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from rubricsvc.db import make_engine, session_scope
from rubricsvc.models import Completion
from tests.helpers import approve_rubrics, check_criterion
from tests.integration.test_trainer_rewards import running_api
from tests.requirements import prepared_model_dir, require_module
from trainer.agent_reward import AgentReward
from trainer.config import AgentSettings, RewardWeights, ScorerSettings, ScorerVia
from trainer.environments.deepresearch import DeepResearchEnv, DeepResearchSettings

EXAMPLE = Path(__file__).parents[2] / "examples" / "deepresearch"
TASK = "dr-loop-exits"  # documents [17] break and [24] continue
ANSWER = (
    "break terminates the loop and skips its else clause [17]. "
    "continue goes on with the next cycle of the loop [24]."
)


def _example_rubrics(task: str) -> list[dict[str, Any]]:
    document = yaml.safe_load((EXAMPLE / "rubrics.yaml").read_text(encoding="utf-8"))
    return [r for r in document["rubrics"] if r["name"].startswith(f"{task}/")]


def _environment(tool_budget: int = 4) -> DeepResearchEnv:
    require_module("bm25s", "trainer")
    settings = DeepResearchSettings(corpus=EXAMPLE / "corpus.jsonl", tool_budget=tool_budget)
    return DeepResearchEnv(settings)


def _rollout(calls: list[tuple[str, dict[str, Any]]], answer: str, **env: Any) -> tuple[Any, Any]:
    """The completion TRL's GRPOTrainer would hand the reward for ``calls`` (one per turn,
    each result the environment's answer) and the environment it ran in."""
    environment = _environment(**env)
    environment.reset(prompt_id=TASK)
    messages: list[dict[str, Any]] = []
    for name, arguments in calls:
        call = {"type": "function", "function": {"name": name, "arguments": arguments}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        content = str(getattr(environment, name)(**arguments))
        messages.append({"role": "tool", "name": name, "content": content})
    if answer:
        messages.append({"role": "assistant", "content": answer})
    return messages, environment


def _reward(database: str, **scorer: Any) -> AgentReward:
    settings = ScorerSettings(
        database_url=database, rubric="{prompt_id}/proxy", include_drafts=True, **scorer
    )
    return AgentReward(settings, AgentSettings(), "deepresearch")


def _score(reward: AgentReward, rollouts: list[tuple[Any, Any]]) -> list[float | None]:
    import trainer.environments  # noqa: F401  (registers deepresearch)

    logged: dict[str, float] = {}
    values = reward(
        prompts=[[{"role": "user", "content": "q"}]] * len(rollouts),
        completions=[m for m, _ in rollouts],
        environments=[e for _, e in rollouts],
        prompt_id=[TASK] * len(rollouts),
        log_metric=logged.__setitem__,
    )
    reward.logged = logged  # type: ignore[attr-defined]
    return values


BOTH_OPENED = [
    ("search", {"query": "break continue loop"}),
    ("open", {"doc_id": "17"}),
    ("open", {"doc_id": "24"}),
]
ONE_OPENED = [("search", {"query": "break continue loop"}), ("open", {"doc_id": "17"})]


@pytest.mark.model
@pytest.mark.slow
def test_a_citation_of_a_document_never_opened_is_charged_on_the_real_citation_path(
    sqlite_url: str,
) -> None:
    prepared_model_dir()
    approve_rubrics(sqlite_url, *_example_rubrics(TASK))
    reward = _reward(sqlite_url)
    rewards = _score(reward, [_rollout(BOTH_OPENED, ANSWER), _rollout(ONE_OPENED, ANSWER)])
    assert None not in rewards
    opened, unopened = reward.last_components
    assert reward.last_rollouts[1].documents[0]["label"] == "17"
    assert [d["label"] for d in reward.last_rollouts[0].documents] == ["17", "24"]
    assert unopened.citations is not None and opened.citations is not None
    # The claim citing [24] has no document in the second rollout: unsupported, support 0.
    assert unopened.citations < opened.citations
    # Both rollouts searched once, opened documents and answered: the same other components.
    assert opened.format == unopened.format == 1.0
    assert opened.search_turns == unopened.search_turns == 0.5
    logged = reward.logged  # type: ignore[attr-defined]
    assert logged["agent/citation_precision"] == pytest.approx(3 / 4)
    assert logged["agent/documents_opened"] == pytest.approx(1.5)
    assert logged["agent/tool_call_rate"] == 1.0 and logged["agent/valid_call_rate"] == 1.0
    for name in ("reward/rubric", "reward/citations", "reward/format", "reward/search_turns"):
        assert name in logged


CHECKS: dict[str, Any] = {
    "name": f"{TASK}/proxy",
    "prompt": _example_rubrics(TASK)[0]["prompt"],
    "criteria": [
        check_criterion("Cites break", {"type": "regex", "pattern": r"\[17\]"}, weight=1),
        check_criterion("Does not ignore a tool error", {"type": "tool_errors_ignored"}, weight=1),
    ],
}
WEIGHTS_WITHOUT_CITATIONS = RewardWeights(rubric=0.6, citations=0.0, format=0.2, search_turns=0.2)


def _check_reward(database: str, **scorer: Any) -> AgentReward:
    settings = ScorerSettings(database_url=database, rubric="{prompt_id}/proxy", **scorer)
    agent = AgentSettings(weights=WEIGHTS_WITHOUT_CITATIONS, citations_rubric=None)
    return AgentReward(settings, agent, "deepresearch")


def test_bad_arguments_an_empty_search_and_a_spent_budget_are_charged_not_masked(
    sqlite_url: str,
) -> None:
    """DR Tulu's weights without citations (0.6/0.2/0.2) on a checks-only rubric: each way a
    call of the policy's own ends the research scores what the rollout had, format 0."""
    approve_rubrics(sqlite_url, CHECKS)
    reward = _check_reward(sqlite_url)
    answer = "break skips the else clause [17]."
    clean = _rollout(BOTH_OPENED[:2], answer)
    bad = _rollout([("open", {"doc_id": "nine"})], answer)
    empty = _rollout([("search", {"query": "zzyzx qwxv"})], answer)
    spent = _rollout(BOTH_OPENED, answer, tool_budget=2)
    rewards = _score(reward, [clean, bad, empty, spent])
    # clean: every check passes, one search of two, format kept: 0.6 + 0.2 + 0.2 x 0.5.
    assert rewards[0] == pytest.approx(0.9)
    # bad and empty: the answer does not own up to the error (tool_errors_ignored fails:
    # rubric 0.5), no successful search, format 0.
    assert rewards[1] == rewards[2] == pytest.approx(0.6 * 0.5)
    # spent: the third call was refused; it searched once and opened [17] before the end.
    assert rewards[3] == pytest.approx(0.6 * 0.5 + 0.2 * 0.5)
    assert [c.format for c in reward.last_components] == [1.0, 0.0, 0.0, 0.0]
    assert [r.documents for r in reward.last_rollouts][1:3] == [[], []]
    assert [d["label"] for d in reward.last_rollouts[3].documents] == ["17"]
    # 7 calls: clean's 2 and spent's first 2 valid; bad's, empty's and spent's third not.
    assert reward.logged["agent/valid_call_rate"] == pytest.approx(4 / 7)  # type: ignore[attr-defined]


def test_over_http_the_same_rollouts_get_the_same_rewards_and_are_stored_alike(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    approve_rubrics(sqlite_url, CHECKS)
    rollouts = [_rollout(BOTH_OPENED, ANSWER), _rollout([("search", {"query": ""})], "No.")]
    in_process = _score(_check_reward(sqlite_url, source="inprocess"), rollouts)
    with running_api(sqlite_url, monkeypatch) as base_url:
        remote = _check_reward(sqlite_url, via=ScorerVia.HTTP, base_url=base_url, source="http")
        over_http = _score(remote, rollouts)
    assert over_http == in_process and None not in in_process
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        stored = {
            (c.source, c.text): c
            for c in session.scalars(select(Completion).options(selectinload(Completion.documents)))
        }
        for source in ("inprocess", "http"):
            first = stored[(source, ANSWER)]
            assert [d.label for d in first.documents] == ["17", "24"]
            assert first.messages == remote.last_rollouts[0].trajectory
    engine.dispose()


def test_the_run_records_rollouts_and_gold_scores_the_stored_answers(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Gold (the example's checks-only rubric) scores what the reward stored: the rollout's
    answer with its trajectory, not the last message TRL generated (here a tool result)."""
    from trainer.recording import RecordingReward
    from trainer.rundir import SAMPLES, RunDirectory
    from trainer.scorers import make_scorer

    gold_rubric = next(r for r in _example_rubrics(TASK) if r["name"].endswith("/gold"))
    approve_rubrics(sqlite_url, CHECKS, gold_rubric)
    gold = make_scorer(ScorerSettings(database_url=sqlite_url, rubric="{prompt_id}/gold"))
    run = RunDirectory(tmp_path / "run")
    recording = RecordingReward(_check_reward(sqlite_url), run, gold=gold)
    answered = _rollout(BOTH_OPENED, ANSWER)
    unanswered = _rollout(ONE_OPENED, "")  # ends on the open's result: no answer
    logged: dict[str, float] = {}
    recording(
        prompts=[[{"role": "user", "content": "q"}]] * 2,
        completions=[answered[0], unanswered[0]],
        environments=[answered[1], unanswered[1]],
        prompt_id=[TASK] * 2,
        log_metric=logged.__setitem__,
    )
    samples = run.read(SAMPLES)
    assert [s["completion"] for s in samples] == [ANSWER, ""]
    # The full answer meets both facts and both citations; the empty one nothing.
    assert [s["gold_reward"] for s in samples] == [1.0, 0.0]
    assert logged["gold/train_reward"] == pytest.approx(0.5)
    assert samples[0]["trajectory"][-1] == {"role": "assistant", "content": ANSWER}
    assert [d["label"] for d in samples[1]["documents"]] == ["17"]
