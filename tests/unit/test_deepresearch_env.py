"""The deep-research environment on the shipped corpus: its tools, its record, the ends of a
rollout a call of the policy's own causes, and the stored rollout it becomes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rubricsvc.environments import find_environment
from rubricsvc.errors import ValidationFailed
from trainer.environments.deepresearch import (
    BAD_ARGUMENTS,
    BUDGET,
    EMPTY_SEARCH,
    DeepResearchEnv,
    DeepResearchSettings,
    deepresearch_factory,
)
from trainer.environments.rollouts import rollout, stored_trajectory

pytest.importorskip("bm25s")

CORPUS = Path(__file__).parents[2] / "examples" / "deepresearch" / "corpus.jsonl"


def _env(**options: Any) -> DeepResearchEnv:
    env = DeepResearchEnv(DeepResearchSettings(corpus=CORPUS, **options))
    env.reset(prompt=[{"role": "user", "content": "q"}], prompt_id="dr-loop-exits")
    return env


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _trl_messages(env: DeepResearchEnv, calls: list[tuple[str, dict[str, Any]]], answer: str):
    """The messages TRL's GRPOTrainer generates for ``calls`` made one per turn: the assistant
    turn parsed from the model's text, the tool result TRL appends (``name`` and ``str`` of
    what the method returned, or TRL's own error when it cannot call it), the final answer."""
    messages: list[dict[str, Any]] = []
    for name, arguments in calls:
        messages.append(
            {"role": "assistant", "content": "", "tool_calls": [_call(name, **arguments)]}
        )
        try:
            result = str(getattr(env, name)(**arguments))
        except TypeError as err:  # as TRL does for arguments the method does not take
            result = str({"error": str(err)})
        messages.append({"role": "tool", "name": name, "content": result})
    messages.append({"role": "assistant", "content": answer})
    return messages


def test_search_lists_matching_documents_and_open_reads_one_cut_to_the_budget() -> None:
    env = _env(result_chars=100, search_results=2)
    found = env.search("break loop else clause")
    lines = found.splitlines()
    assert len(lines) == 2 and lines[0].startswith("[17] break:")
    opened = env.open("17")
    assert opened.startswith("[17] break\n") and len(opened) == len("[17] break\n") + 100
    assert [c.name for c in env.record.calls] == ["search", "open"]
    assert env.record.calls[0].arguments == {"query": "break loop else clause"}
    assert list(env.record.documents) == ["17"] and env.record.ended is None


@pytest.mark.parametrize(
    ("calls", "reason"),
    [
        ([("open", {"doc_id": "999"})], BAD_ARGUMENTS),
        ([("search", {"query": "  "})], BAD_ARGUMENTS),
        ([("search", {"query": "zzyzx qwxv"})], EMPTY_SEARCH),
        ([("search", {"query": "break"})] * 3, BUDGET),
    ],
)
def test_a_bad_call_an_empty_search_and_a_spent_budget_end_the_research(
    calls: list[tuple[str, dict[str, Any]]], reason: str
) -> None:
    env = _env(tool_budget=2)
    results = [getattr(env, name)(**arguments) for name, arguments in calls]
    assert env.record.ended == reason and results[-1].startswith("error:")
    # No later call runs: it is answered, recorded as refused, and opens nothing.
    after = env.open("17")
    assert after.startswith("error: the research has ended")
    assert env.record.calls[-1].refused and "17" not in env.record.documents


def test_the_stored_rollout_ends_at_the_first_error_with_the_answer_and_only_earlier_documents() -> (
    None
):
    env = _env(tool_budget=5)
    messages = _trl_messages(
        env,
        [
            ("search", {"query": "break statement"}),
            ("open", {"doc_id": "17"}),
            ("search", {"q": "continue"}),  # TRL cannot call it: the environment never sees it
            ("open", {"doc_id": "24"}),  # made after the end: not evidence
        ],
        "break skips the else clause [17]. continue goes on [24].",
    )
    done = rollout(messages, env.record)
    assert done.ended_by_error and done.text.startswith("break skips")
    assert [m["role"] for m in done.trajectory] == [
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert done.trajectory[5]["content"].startswith("{'error'")
    assert [d["label"] for d in done.documents] == ["17"]
    assert (
        done.documents[0]["title"] == "break"
        and "nearest enclosing loop" in done.documents[0]["text"]
    )


def test_a_clean_rollout_keeps_every_call_and_its_opened_documents_in_order() -> None:
    env = _env()
    calls = [
        ("search", {"query": "continue"}),
        ("open", {"doc_id": "24"}),
        ("open", {"doc_id": "17"}),
    ]
    done = rollout(_trl_messages(env, calls, "Answer [24] [17]."), env.record)
    assert not done.ended_by_error and done.text == "Answer [24] [17]."
    assert [d["label"] for d in done.documents] == ["24", "17"]
    tool_names = [m["name"] for m in done.trajectory if m["role"] == "tool"]
    assert tool_names == ["search", "open", "open"]


def test_a_rollout_without_an_answer_has_empty_text() -> None:
    env = _env()
    messages = _trl_messages(env, [("search", {"query": "yield"})], "")[:-1]
    assert rollout(messages, env.record).text == ""


def test_call_ids_and_json_string_arguments_store_as_trl_does() -> None:
    verl_shaped = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "open", "arguments": '{"doc_id": "5"}'},
                }
            ],
        },
        {"role": "tool", "content": "text", "tool_call_id": "c1"},
    ]
    trl_shaped = [
        {"role": "assistant", "content": "", "tool_calls": [_call("open", doc_id="5")]},
        {"role": "tool", "name": "open", "content": "text"},
    ]
    assert stored_trajectory(verl_shaped) == stored_trajectory(trl_shaped)


def test_the_environment_is_registered_and_its_factory_checks_the_corpus(tmp_path: Path) -> None:
    import trainer.environments  # noqa: F401  (registers it)

    make = find_environment("deepresearch").factory({"corpus": str(CORPUS), "tool_budget": 2})
    first, second = make(), make()
    assert first is not second and first.settings.tool_budget == 2
    with pytest.raises(ValidationFailed, match="no environment named 'nope'"):
        find_environment("nope")
    broken = tmp_path / "corpus.jsonl"
    broken.write_text('{"id": "1"}\n', encoding="utf-8")
    with pytest.raises(ValidationFailed, match="not a corpus document"):
        deepresearch_factory({"corpus": str(broken)})


def test_only_the_tools_are_public_methods() -> None:
    """TRL offers every public method of an environment (but reset) to the policy as a tool."""
    import inspect

    public = [
        name
        for name, _ in inspect.getmembers(DeepResearchEnv, predicate=inspect.isfunction)
        if not name.startswith("_") and name != "reset"
    ]
    assert public == ["open", "search"]


def test_a_plugins_environment_registered_through_ext_reads_its_rollouts() -> None:
    from rubricsvc import ext
    from trainer.agent_reward import AgentReward
    from trainer.config import AgentSettings, ScorerSettings
    from trainer.environments.rollouts import Rollout

    class Echo:
        def reset(self, **row: Any) -> None:
            self.row = row

    def read(messages: Any, instance: Any) -> Rollout:
        return Rollout(str(messages[-1]["content"]), list(messages), [], False)

    ext.register_environment("echo", lambda options: Echo, read)
    assert "echo" in ext.environment_names()
    reward = AgentReward(ScorerSettings(), AgentSettings(), "echo")
    done = reward.rollouts([[{"role": "assistant", "content": "hi"}]], [Echo()])
    assert done[0].text == "hi" and done[0].trajectory == [{"role": "assistant", "content": "hi"}]


def test_a_training_config_names_an_environment_and_its_turns_follow_the_budget() -> None:
    from pydantic import ValidationError

    from trainer.config import TrainConfig
    from trainer.grpo import agent_arguments

    config = TrainConfig.model_validate(
        {
            "prompts": ["dr-loop-exits"],
            "environment": "deepresearch",
            "agent": {"options": {"corpus": str(CORPUS), "tool_budget": 3}},
        }
    )
    assert agent_arguments(config) == {"max_tool_calling_iterations": 4}
    assert config.agent.weights.model_dump() == {
        "rubric": 0.5,
        "citations": 0.2,
        "format": 0.2,
        "search_turns": 0.1,
    }
    with pytest.raises(ValidationError, match="neither length_penalty nor criterion_dropout"):
        TrainConfig.model_validate(
            {
                "prompts": ["p"],
                "environment": "deepresearch",
                "reward": {"criterion_dropout": 0.5},
            }
        )
    with pytest.raises(ValidationError, match="at least one reward component"):
        TrainConfig.model_validate(
            {
                "prompts": ["p"],
                "agent": {"weights": {"rubric": 0, "citations": 0, "format": 0, "search_turns": 0}},
            }
        )


def test_an_opened_document_is_stored_as_the_agent_saw_it_cut_to_result_chars() -> None:
    """A citation is checked against the stored document: it must be the text ``open``
    showed, so a claim supported only past ``result_chars`` is not supported."""
    from rubricsvc.documents import DocumentRecord

    env = _env(result_chars=100)
    full = env.corpus.by_id["17"]
    assert len(full.text) > 100 and "nearest enclosing loop" in full.text
    shown = env.open("17")
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [_call("open", doc_id="17")]},
        {"role": "tool", "name": "open", "content": shown},
        {"role": "assistant", "content": "break terminates the nearest enclosing loop [17]."},
    ]
    (document,) = rollout(messages, env.record).documents
    assert document["text"] == full.text[:100] and shown.endswith(document["text"])
    assert "nearest enclosing loop" not in document["text"]
    # A different content from the whole document's: stored as a document of its own.
    assert DocumentRecord(**document).digest() != DocumentRecord(**full.record()).digest()
