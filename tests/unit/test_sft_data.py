"""The warm start's rows: read, rendered as the RL run renders them, and labelled so that the
loss is on the assistant's turns only (trainer/sft_data.py). The tiny policy's tokenizer is
SmolLM2's (its chat template without a tool format or {% generation %} markers)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from rubricsvc.errors import ValidationFailed
from trainer.sft_data import (
    IGNORED,
    ChatRow,
    Templates,
    check_loss_mask,
    choose_templates,
    environment_tools,
    read_sft_data,
    tokenize_rows,
)

pytestmark = pytest.mark.model  # the tiny policy's tokenizer is made from the prepared model

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "deepresearch" / "corpus.jsonl"
QUESTION = {"role": "user", "content": "What is alpha?"}
SEARCH = {"type": "function", "function": {"name": "search", "arguments": {"query": "alpha"}}}
TOOL_ROW = [
    QUESTION,
    {"role": "assistant", "content": "", "tool_calls": [SEARCH]},
    {"role": "tool", "name": "search", "content": "[1] Alpha: RESULT-TEXT"},
    {"role": "assistant", "content": "Alpha is a letter [1]."},
]


def _tokenizer() -> Any:
    from transformers import AutoTokenizer

    from tests.tiny_model import tiny_model_dir

    return AutoTokenizer.from_pretrained(tiny_model_dir())


def _rows(tmp_path: Path, *rows: dict[str, Any]) -> list[ChatRow]:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return read_sft_data(path).rows


def _trained_text(tokenizer: Any, ids: list[int], labels: list[int]) -> str:
    """The labelled tokens, decoded, each run of them on a line of its own."""
    runs: list[list[int]] = [[]]
    for token, label in zip(ids, labels, strict=True):
        if label == IGNORED:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(token)
    return "|".join(tokenizer.decode(run) for run in runs if run)


def test_a_trajectory_is_trained_on_its_calls_and_answer_not_on_what_it_was_shown(
    tmp_path: Path,
) -> None:
    tokenizer = _tokenizer()
    rows = _rows(tmp_path, {"messages": TOOL_ROW})
    assert rows[0].prompt == [QUESTION] and rows[0].shows_tool_results
    tools = environment_tools("deepresearch", {"corpus": str(CORPUS)})
    assert [t["function"]["name"] for t in tools] == ["open", "search"]
    templates = choose_templates(tokenizer, tool_format=True)
    assert templates.training is not None and "generation" in templates.training
    tokenized = tokenize_rows(tokenizer, rows, templates, tools, 4096, assistant_only=True)

    trained = _trained_text(tokenizer, tokenized.input_ids[0], tokenized.labels[0])
    # Two assistant turns: the call in the tool-call format, then the answer; each ends with
    # the end-of-turn token, so the policy learns to stop.
    assert trained == (
        '<tool_call>\n{"name": "search", "arguments": {"query": "alpha"}}\n</tool_call>'
        "<|im_end|>\n|\nAlpha is a letter [1].<|im_end|>\n"
    )
    assert tokenized.trained_tokens == sum(1 for x in tokenized.labels[0] if x != IGNORED)
    # What it was shown (the tools' schemas, the question, the result) is in its input only.
    text = tokenizer.decode(tokenized.input_ids[0])
    for shown in ("RESULT-TEXT", "What is alpha?", "A few words naming what to look for."):
        assert shown in text and shown not in trained


def test_the_tokens_are_those_the_rl_run_renders(tmp_path: Path) -> None:
    """The environment's tools as schemas render as GRPOTrainer renders its methods, and the
    training variant renders the policy's text: the tokens trained on are the policy's."""
    from trainer.environments.chat_template import with_tool_format
    from trainer.environments.deepresearch import deepresearch_factory

    tokenizer = _tokenizer()
    tools = environment_tools("deepresearch", {"corpus": str(CORPUS)})
    environment = deepresearch_factory({"corpus": str(CORPUS)})()
    policy = with_tool_format(_tokenizer())
    as_grpo = policy.apply_chat_template(
        TOOL_ROW, tools=[environment.open, environment.search], tokenize=True
    )
    templates = choose_templates(tokenizer, tool_format=True)
    rows = _rows(tmp_path, {"messages": TOOL_ROW})
    tokenized = tokenize_rows(tokenizer, rows, templates, tools, 4096, assistant_only=True)
    assert tokenized.input_ids[0] == list(as_grpo["input_ids"])

    # A training variant that renders other text is refused, naming the row.
    other = Templates(templates.policy, templates.training.replace("<tool_call>", "<call>"), "x")  # type: ignore[union-attr]
    with pytest.raises(ValidationFailed, match="row 1: the training variant"):
        tokenize_rows(tokenizer, rows, other, tools, 4096, assistant_only=True)


def test_a_plain_answer_needs_no_markers_and_is_trained_on_alone(tmp_path: Path) -> None:
    tokenizer = _tokenizer()
    rows = _rows(
        tmp_path,
        {"messages": [{"role": "system", "content": "Be brief."}, QUESTION,
                      {"role": "assistant", "content": "A letter."}]},
        # TRL's prompt-completion form, an earlier exchange in its prompt.
        {"prompt": [QUESTION, {"role": "assistant", "content": "A letter."},
                    {"role": "user", "content": "And beta?"}],
         "completion": [{"role": "assistant", "content": "Another one."}]},
    )  # fmt: skip
    templates = choose_templates(tokenizer, tool_format=False)
    assert templates.training is None  # SmolLM2's template: no markers, no TRL variant
    assert templates.policy == tokenizer.chat_template
    tokenized = tokenize_rows(tokenizer, rows, templates, None, 4096, assistant_only=True)
    assert [
        _trained_text(tokenizer, ids, labels)
        for ids, labels in zip(tokenized.input_ids, tokenized.labels, strict=True)
    ] == ["A letter.<|im_end|>\n", "Another one.<|im_end|>\n"]

    # Tool results after the prompt cannot be told from the assistant's turns without markers.
    tool_rows = _rows(tmp_path, {"messages": TOOL_ROW})
    with pytest.raises(ValidationFailed, match=r"sft\.assistant_only_loss: false"):
        check_loss_mask(tool_rows, templates, assistant_only=True)
    check_loss_mask(tool_rows, templates, assistant_only=False)  # then on all of it


def test_rows_are_read_with_their_sha256_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    # Arguments as a JSON string (as OpenAI-style clients send them) become a mapping.
    stringly = {**SEARCH, "function": {"name": "search", "arguments": '{"query": "alpha"}'}}
    row = {"messages": [QUESTION, {"role": "assistant", "content": None, "tool_calls": [stringly]},
                        TOOL_ROW[2], TOOL_ROW[3]], "provenance": {"completion_id": 1}}  # fmt: skip
    path.write_text(json.dumps(row) + "\n\n", encoding="utf-8")
    data = read_sft_data(path)
    assert data.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert data.rows[0].completion[0] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [SEARCH],
    }

    path.write_text(
        json.dumps(row) + "\n" + json.dumps({"messages": [QUESTION]}) + "\n", encoding="utf-8"
    )
    with pytest.raises(ValidationFailed, match=r"rows.jsonl:2: no assistant turn after"):
        read_sft_data(path)
    path.write_text(json.dumps({"text": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(ValidationFailed, match=r":1: a row needs \"messages\""):
        read_sft_data(path)

    long = _rows(tmp_path, {"messages": [QUESTION, {"role": "assistant", "content": "x " * 500}]})
    tokenizer = _tokenizer()
    templates = choose_templates(tokenizer, tool_format=False)
    with pytest.raises(ValidationFailed, match="every row is longer than max_length"):
        tokenize_rows(tokenizer, long, templates, None, 64, assistant_only=True)


def test_the_warm_start_recipe_fits_every_demonstration() -> None:
    """examples/deepresearch/sft.yaml trains on every demonstration (none longer than its
    max_length), and train.yaml's completion budget holds each one's turns after its prompt,
    so that the RL run after the warm start can write what the policy was taught."""
    from trainer.config import load_config
    from trainer.sft_config import load_sft_config

    example = CORPUS.parent
    config = load_sft_config(example / "sft.yaml")
    assert config.policy is None and config.environment == "deepresearch"
    tokenizer = _tokenizer()
    rows = read_sft_data(config.data).rows
    tools = environment_tools("deepresearch", config.agent.options)
    templates = choose_templates(tokenizer, tool_format=True)
    tokenized = tokenize_rows(
        tokenizer, rows, templates, tools, config.sft.max_length, assistant_only=True
    )
    assert len(rows) == 126 and tokenized.left_out == 0
    longest = max(len(ids) for ids in tokenized.input_ids)
    assert 1024 < longest <= config.sft.max_length  # 1,280: a tighter bound would drop rows
    budget = load_config(example / "train.yaml").grpo.max_completion_length
    for row, ids in zip(rows, tokenized.input_ids, strict=True):
        prompt = tokenizer.apply_chat_template(
            row.prompt, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        assert 256 < len(ids) - len(prompt) <= budget  # each past the 256 it had before
