"""The gold monitor in a tool environment: its held-out prompts are answered through the
environment (the multi-turn tool loop training rollouts run in, with the run's options), and
each answer is scored with its trajectory and opened documents, as a training rollout is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import trainer.environments  # noqa: F401  (registers deepresearch)
from rubricsvc.scoring.rewards import RewardRequest, RewardResult
from trainer.config import ScorerSettings
from trainer.environments.deepresearch import DeepResearchEnv, DeepResearchSettings
from trainer.environments.held_out import EnvironmentAnswers, run_in_environment

pytest.importorskip("bm25s")

CORPUS = Path(__file__).parents[2] / "examples" / "deepresearch" / "corpus.jsonl"
TASK = "dr-loop-exits"
PROMPT = [{"role": "user", "content": "How does break end a loop? Cite the documents."}]
ANSWER = "break ends the nearest enclosing loop and skips its else clause [17]."


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def scripted(*replies: dict[str, Any]) -> Callable[..., dict[str, Any] | None]:
    """A stand-in policy: its replies in order, then none (its budget spent)."""
    left = list(replies)
    seen: list[list[dict[str, Any]]] = []

    def turn(
        conversation: list[dict[str, Any]], tools: list[Callable[..., Any]]
    ) -> dict[str, Any] | None:
        assert sorted(t.__name__ for t in tools) == ["open", "search"]
        seen.append(list(conversation))
        return left.pop(0) if left else None

    turn.seen = seen  # type: ignore[attr-defined]
    return turn


SEARCH = {"role": "assistant", "content": "", "tool_calls": [_call("search", query="break loop")]}
OPEN = {"role": "assistant", "content": "", "tool_calls": [_call("open", doc_id="17")]}
FINAL = {"role": "assistant", "content": ANSWER}


def test_the_loop_runs_each_call_in_the_environment_and_generates_after_its_results() -> None:
    env = DeepResearchEnv(DeepResearchSettings(corpus=CORPUS, result_chars=100))
    turn = scripted(SEARCH, OPEN, FINAL)
    generated = run_in_environment(turn, env, {"prompt": PROMPT, "prompt_id": TASK}, PROMPT, 5)
    assert [m["role"] for m in generated] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert generated[1]["name"] == "search" and generated[1]["content"].startswith("[17] break")
    assert generated[3]["content"].startswith("[17] break\n")
    assert generated[-1]["content"] == ANSWER
    assert env.record.row["prompt_id"] == TASK and env.record.searches == 1
    # Each turn sees the prompt and everything generated before it.
    assert turn.seen[2][: len(PROMPT)] == PROMPT and turn.seen[2][-1] == generated[3]  # type: ignore[attr-defined]


def test_the_loop_stops_at_the_tool_turn_limit_and_reports_a_bad_call_as_trl_does() -> None:
    env = DeepResearchEnv(DeepResearchSettings(corpus=CORPUS))
    bad = {"role": "assistant", "content": "", "tool_calls": [_call("search", q="x")]}
    generated = run_in_environment(scripted(bad, SEARCH, FINAL), env, {}, PROMPT, max_turns=1)
    # One tool turn: the bad call's result, then the next reply; its call is not run.
    assert [m["role"] for m in generated] == ["assistant", "tool", "assistant"]
    assert generated[1]["content"].startswith("{'error'")
    assert generated[2] == SEARCH and env.record.calls == []


class RecordingScorer:
    def __init__(self, value: float) -> None:
        self.settings = ScorerSettings()
        self.value = value
        self.requests: list[RewardRequest] = []

    def score(self, requests: Sequence[RewardRequest]) -> list[RewardResult]:
        self.requests.extend(requests)
        return [RewardResult(self.value, "ok") for _ in requests]


def test_held_out_rollouts_become_requests_with_their_trajectory_and_documents() -> None:
    answers = EnvironmentAnswers("deepresearch", {"corpus": str(CORPUS), "result_chars": 100}, 4)
    (request,) = answers.requests(lambda: scripted(SEARCH, OPEN, FINAL), [TASK], [PROMPT])
    assert request.completion == ANSWER and request.prompt_id == TASK
    assert request.trajectory is not None and len(request.trajectory) == 5
    assert request.documents is not None and [d["label"] for d in request.documents] == ["17"]
    assert len(request.documents[0]["text"]) == 100  # as the agent saw it


class ScriptedModel:
    """A stand-in policy model: ``generate`` writes a search call, then an open call, then an
    answer, by how many tool results its input holds (whatever decodes it)."""

    training = True
    device = "cpu"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def eval(self) -> None:
        self.training = False

    def train(self) -> None:
        self.training = True

    def generate(self, input_ids: Any, max_new_tokens: int, **kwargs: Any) -> Any:
        import torch

        rows = []
        for row in input_ids:
            results = self.tokenizer.decode(row).count("</tool_response>")
            reply = [
                '<tool_call>\n{"name": "search", "arguments": {"query": "break loop"}}\n'
                "</tool_call><|im_end|>",
                '<tool_call>\n{"name": "open", "arguments": {"doc_id": "17"}}\n</tool_call>'
                "<|im_end|>",
                ANSWER + "<|im_end|>",
            ][min(results, 2)]
            new = self.tokenizer(reply, add_special_tokens=False)["input_ids"][:max_new_tokens]
            rows.append(torch.cat([row, torch.tensor(new, dtype=row.dtype)]))
        return torch.stack(rows)


@pytest.mark.model
def test_a_runs_gold_monitor_answers_held_out_prompts_through_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_callback`` of a run with ``environment: deepresearch``: the held-out prompt is
    answered in the tool loop (search, open, answer), and both scorers score the rollout's
    final answer with its trajectory and the document it opened, as training does."""
    from transformers import AutoTokenizer

    import trainer.grpo as grpo
    from tests.tiny_model import tiny_model_dir
    from trainer.config import TrainConfig
    from trainer.environments.chat_template import with_tool_format
    from trainer.rundir import RunDirectory

    scorers = [RecordingScorer(0.5), RecordingScorer(0.25)]  # the training, then the gold one
    made = iter(scorers)
    monkeypatch.setattr(grpo, "make_scorer", lambda settings, limits=None: next(made))
    monkeypatch.setattr(grpo, "load_prompts", lambda url, ids: [PROMPT for _ in ids])
    config = TrainConfig(
        prompts=[TASK],
        environment="deepresearch",
        agent={"options": {"corpus": str(CORPUS), "tool_budget": 3, "result_chars": 100}},
        reward={"rubric": "{prompt_id}/proxy"},
        monitors={"gold": {"scorer": {"rubric": "{prompt_id}/gold"}, "prompts": [TASK]}},
        grpo={"max_completion_length": 512, "max_steps": 2},
    )
    callback = grpo.run_callback(config, RunDirectory(tmp_path / "run"))
    tokenizer = with_tool_format(AutoTokenizer.from_pretrained(tiny_model_dir()))
    model = ScriptedModel(tokenizer)
    callback.on_train_begin(None, None, None, model=model, processing_class=tokenizer)

    assert model.training  # restored after the evaluation
    for scorer in scorers:
        (request,) = scorer.requests
        assert request.prompt_id == TASK and request.completion == ANSWER
        assert request.trajectory is not None
        assert [m["role"] for m in request.trajectory] == [
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
        assert request.documents is not None
        assert [d["label"] for d in request.documents] == ["17"]
    (point,) = callback.gold.points
    assert point.train_score == 0.5 and point.gold_score == 0.25
    assert point.samples[0]["trajectory"] == scorers[0].requests[0].trajectory
