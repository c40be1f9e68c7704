"""The scripted researcher's demonstrations (trainer/demonstrations.py): made in the real
environment, citing only what they opened, meeting the gold checks, the same for the same seed,
in the token sequence a GRPO rollout of the same calls is made of; and the committed file
(examples/deepresearch/demonstrations.jsonl) covers the training questions and is what the
command writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rubricsvc.completions import CompletionRecord
from trainer.deepresearch_tasks import load_tasks
from trainer.demonstrations import (
    DEFAULT_OUT,
    demonstrate,
    environment_options,
    main,
    tool_schemas,
)
from trainer.environments.deepresearch import DeepResearchEnv, DeepResearchSettings
from trainer.overopt import Split

pytest.importorskip("bm25s")

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "deepresearch"
COMMITTED = ROOT / DEFAULT_OUT
CONFIG = EXAMPLE / "train.yaml"
# A question of the old set, and two of the added ones: two, three and two key facts.
SOME = ("dr-loop-exits", "dr-class-bases", "dr-xor-shift")


def _tasks():  # type: ignore[no-untyped-def]
    return load_tasks(EXAMPLE / "tasks.yaml", EXAMPLE / "corpus.jsonl")


def _options() -> dict[str, Any]:
    return environment_options(CONFIG)


def _some(seed: int = 0, per_question: int = 3, **kwargs: Any):  # type: ignore[no-untyped-def]
    tasks, ids = _tasks()
    chosen = [t for t in tasks.tasks if t.id in SOME]
    return demonstrate(chosen, ids, _options(), per_question, seed, **kwargs), ids


def _calls(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """Each call of the messages with the result that follows it."""
    calls = []
    for n, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            result = messages[n + 1]
            assert result["role"] == "tool" and result["name"] == call["function"]["name"]
            calls.append(
                (call["function"]["name"], call["function"]["arguments"], result["content"])
            )
    return calls


def test_each_demonstration_opens_what_it_cites_and_meets_every_gold_check() -> None:
    outcome, ids = _some()
    assert {d.task.id for d in outcome.kept} == set(SOME)
    assert len(outcome.kept) == 3 * len(SOME) and not outcome.rejected
    options = _options()
    for demo in outcome.kept:
        messages = demo.prompt + demo.generated
        assert messages[0] == {"role": "user", "content": demo.task.prompt}
        # Every result is what the environment answers the same calls with, in order.
        env = DeepResearchEnv(DeepResearchSettings.model_validate(options))
        env.reset(prompt=demo.prompt, prompt_id=demo.task.id)
        listed: set[str] = set()
        opened: list[str] = []
        for name, arguments, result in _calls(messages):
            assert getattr(env, name)(**arguments) == result
            if name == "search":
                listed |= {line[1 : line.index("]")] for line in result.splitlines()}
            else:
                assert arguments["doc_id"] in listed  # it opens only what a search listed
                opened.append(arguments["doc_id"])
        answer = messages[-1]
        assert answer["role"] == "assistant" and "tool_calls" not in answer
        assert answer["content"] == demo.text
        assert demo.opened == opened
        assert demo.cited and set(demo.cited) <= set(opened)
        assert {ids[t] for t in demo.task.documents} <= set(opened)
        assert all(demo.task.gold_verdicts(demo.text, ids)) and demo.gold_score == 1.0
        assert all(demo.facts_in_view)
        assert len(demo.plan.queries) == sum(1 for c in _calls(messages) if c[0] == "search")


def test_a_question_gets_different_queries_in_each_demonstration() -> None:
    outcome, _ = _some()
    for task_id in SOME:
        plans = [d.plan for d in outcome.kept if d.task.id == task_id]
        assert len(set(plans)) == len(plans)
        assert len({q.text for p in plans for q in p.queries}) >= len(plans)
        assert len({p.key for p in plans}) >= 2  # one search or two, an extra document or not


def test_the_same_seed_gives_the_same_demonstrations_and_another_seed_others() -> None:
    first, _ = _some(seed=0)
    again, _ = _some(seed=0)
    other, _ = _some(seed=1)
    schemas = tool_schemas(_options())
    rows = [d.sft_row(schemas) for d in first.kept]
    assert rows == [d.sft_row(schemas) for d in again.kept]
    assert [r["messages"] for r in rows] != [d.sft_row(schemas)["messages"] for d in other.kept]


def test_an_answer_below_the_gold_threshold_or_citing_an_unopened_document_is_not_kept() -> None:
    tasks, ids = _tasks()
    task = next(t for t in tasks.tasks if t.id == "dr-assert-optimize")
    good, bad = task.answers
    worse = task.model_copy(update={"answers": [bad, good]})
    outcome = demonstrate([worse], ids, _options(), 2, 0)
    assert not outcome.kept and list(outcome.rejected) == ["gold score below 1.0"]
    # Every check met, but it also cites [36], which no search of it lists.
    citing = good.model_copy(update={"text": good.text + " See also the for statement [36]."})
    unopened = task.model_copy(update={"answers": [citing, bad]})
    outcome = demonstrate([unopened], ids, _options(), 2, 0)
    assert not outcome.kept
    assert list(outcome.rejected) == ["it cites a document it did not open"]


def test_held_out_questions_and_facts_past_what_open_shows_are_not_demonstrated() -> None:
    tasks, ids = _tasks()
    chosen = [t for t in tasks.tasks if t.id in ("dr-with-protocol", "dr-dict-keys")]
    # dr-with-protocol's __exit__ arguments are past the first 600 characters of its documents.
    outcome = demonstrate(chosen, ids, _options(), 2, 0)
    assert not outcome.kept and outcome.questions_out_of_view == ["dr-with-protocol"]
    allowed = demonstrate(chosen, ids, _options(), 2, 0, facts_out_of_view=True)
    assert {d.task.id for d in allowed.kept} == {"dr-with-protocol"}
    assert not any(all(d.facts_in_view) for d in allowed.kept)


def test_a_demonstration_is_stored_as_any_rollout_is() -> None:
    outcome, _ = _some(per_question=1)
    for demo in outcome.kept:
        record = CompletionRecord.model_validate(demo.completion_record())
        assert record.prompt_external_id == demo.task.id and record.source == "demonstrations"
        assert record.text == demo.text
        stored = record.stored_trajectory()
        assert stored is not None and stored[-1] == {"role": "assistant", "content": demo.text}
        assert [d.label for d in record.documents or []] == demo.opened
        # As `open` showed them: cut to result_chars.
        assert all(len(d.text) <= 600 for d in record.documents or [])


def test_the_committed_file_covers_the_training_questions_and_no_held_out_one() -> None:
    tasks, ids = _tasks()
    rows = [json.loads(line) for line in COMMITTED.read_text(encoding="utf-8").splitlines()]
    train = {t.id for t in tasks.split(Split.TRAIN)}
    covered = {r["provenance"]["prompt_id"] for r in rows}
    assert len(rows) >= 100 and len(covered) >= 40 and covered <= train
    by_id = {t.id: t for t in tasks.tasks}
    for row in rows:
        provenance = row["provenance"]
        task = by_id[provenance["prompt_id"]]
        assert task.split == Split.TRAIN and provenance["split"] == "train"
        answer = row["messages"][-1]["content"]
        assert all(task.gold_verdicts(answer, ids)) and provenance["gold_score"] == 1.0
        opened = [c[1]["doc_id"] for c in _calls(row["messages"]) if c[0] == "open"]
        assert provenance["opened"] == opened and set(provenance["cited"]) <= set(opened)
        searched = [c[1]["query"] for c in _calls(row["messages"]) if c[0] == "search"]
        assert provenance["queries"] == searched


def test_the_committed_file_is_what_the_command_writes(tmp_path: Path) -> None:
    out = tmp_path / "demonstrations.jsonl"
    main(["--out", str(out), "--tasks", str(EXAMPLE / "tasks.yaml"), "--config", str(CONFIG)])
    assert out.read_text(encoding="utf-8") == COMMITTED.read_text(encoding="utf-8")


def test_datasets_loads_the_file_with_each_call_as_written() -> None:
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset("json", data_files=str(COMMITTED), split="train")
    rows = [json.loads(line) for line in COMMITTED.read_text(encoding="utf-8").splitlines()]
    for row, got in zip(rows, loaded, strict=True):
        for written, read in zip(row["messages"], got["messages"], strict=True):
            assert {k: v for k, v in read.items() if v is not None} == written
        assert json.loads(got["tools"]) == json.loads(row["tools"])


@pytest.mark.model
def test_a_row_is_the_token_sequence_a_grpo_rollout_of_its_calls_is_made_of() -> None:
    """Rendered with the policy's tool template, a row is TRL's rollout of the same calls
    token for token: the prompt with the tools, each reply as the policy would generate it
    (which TRL's parser reads back as the row's message), each tool result as TRL appends it."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import parse_response

    from tests.requirements import prepared_model_dir
    from trainer.environments.chat_template import with_tool_format
    from trainer.environments.held_out import environment_tools

    tokenizer = with_tool_format(AutoTokenizer.from_pretrained(prepared_model_dir()))
    options = _options()
    methods = environment_tools(DeepResearchEnv(DeepResearchSettings.model_validate(options)))
    outcome, _ = _some(per_question=2)
    schemas = tool_schemas(options)
    for demo in outcome.kept:
        row = demo.sft_row(schemas)
        messages, tools = row["messages"], json.loads(row["tools"])
        rendered = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        # The schemas render as TRL's GRPOTrainer renders the environment's methods.
        assert rendered == tokenizer.apply_chat_template(messages, tools=methods, tokenize=False)
        sequence = _ids(tokenizer, messages[:1], tools, generation=True)
        n = 1
        while n < len(messages):
            reply = messages[n]
            before = _text(tokenizer, messages[:n], tools, generation=True)
            generated = _text(tokenizer, messages[: n + 1], tools)[len(before) :]
            assert generated.endswith("<|im_end|>\n")
            ids = tokenizer(generated[:-1], add_special_tokens=False)["input_ids"]
            assert parse_response(tokenizer, ids, prefix=sequence, tools=methods) == reply
            sequence += ids
            results = []
            n += 1
            while n < len(messages) and messages[n]["role"] == "tool":
                results.append(messages[n])
                n += 1
            if results:
                sequence += _tool_suffix(tokenizer, results)
        newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
        assert _ids(tokenizer, messages, tools) == sequence + newline


def _text(tokenizer: Any, messages: Any, tools: Any, generation: bool = False) -> str:
    return str(
        tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=generation
        )
    )


def _ids(tokenizer: Any, messages: Any, tools: Any, generation: bool = False) -> list[int]:
    encoded = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=True, add_generation_prompt=generation, return_dict=True
    )
    return list(encoded["input_ids"])


def _tool_suffix(tokenizer: Any, results: list[dict[str, Any]]) -> list[int]:
    """The tokens TRL 1.16 appends after a reply for its tool results
    (GRPOTrainer._get_tool_suffix_ids): a dummy call's rendering with and without them, cut
    at the reply's end-of-turn token."""
    call = {"type": "function", "function": {"name": results[0]["name"], "arguments": {}}}
    dummy = [
        {"role": "user", "content": "dummy"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    prefix = tokenizer.apply_chat_template(dummy, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(
        dummy + results, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    ends = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
    prefix = prefix[: ends[-1] + 1]
    assert full[: len(prefix)] == prefix
    return list(full[len(prefix) :])
