"""The same calls, run by TRL's GRPOTrainer and by verl's tool agent loop, are one stored
trajectory: each framework's messages built the way its own code builds them (TRL's response
parser on the embedded model's tokenizer with the tool format the trainer gives it; verl's
Hermes parser and message builders, tests/verl_tool_loop.py), then stored and scored alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.requirements import prepared_model_dir, require_module, unavailable
from tests.verl_tool_loop import (
    build_assistant_message,
    hermes_extract_tool_calls,
    tool_message,
    verl_schemas,
)
from trainer.environments.deepresearch import DeepResearchEnv, DeepResearchSettings
from trainer.environments.rollouts import rollout

pytestmark = pytest.mark.model

CORPUS = Path(__file__).parents[2] / "examples" / "deepresearch" / "corpus.jsonl"
END = "<|im_end|>"
# What the policy writes, turn by turn (decoded; each turn ends with the end-of-turn token).
TURNS = [
    '<tool_call>\n{"name": "search", "arguments": {"query": "break loop else"}}\n</tool_call>'
    + END,
    '<tool_call>\n{"name": "open", "arguments": {"doc_id": "17"}}\n</tool_call>' + END,
    '<tool_call>\n{"name": "open", "arguments": {"doc_id": "nine"}}\n</tool_call>' + END,
    "break skips the loop's else clause [17]." + END,
]


def _environment() -> DeepResearchEnv:
    require_module("bm25s", "trainer")
    env = DeepResearchEnv(DeepResearchSettings(corpus=CORPUS))
    env.reset(prompt_id="dr-loop-exits")
    return env


def _trl_messages(tokenizer: Any) -> tuple[list[dict[str, Any]], DeepResearchEnv]:
    """As GRPOTrainer._tool_call_loop: each turn parsed by TRL's ``parse_response`` after the
    rendered prompt, each call made on the environment with the parsed arguments, the result
    appended as ``{"role": "tool", "name", "content": str(result)}``."""
    from trl.chat_template_utils import parse_response

    env = _environment()
    prompt = [{"role": "user", "content": "Inside a for loop, what does break do?"}]
    tools = [env.search, env.open]
    messages: list[dict[str, Any]] = []
    for text in TURNS:
        prefix = tokenizer.apply_chat_template(
            prompt + messages, tools=tools, add_generation_prompt=True, tokenize=True
        )["input_ids"]
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        parsed = parse_response(tokenizer, ids, prefix=list(prefix), tools=tools)
        messages.append(parsed)
        for call in parsed.get("tool_calls") or []:
            function = call["function"]
            result = getattr(env, function["name"])(**function["arguments"])
            messages.append({"role": "tool", "name": function["name"], "content": str(result)})
    return messages, env


def _verl_messages(schemas: Any) -> tuple[list[dict[str, Any]], DeepResearchEnv]:
    """As ToolAgentLoop: each turn's decoded text through the Hermes parser, the assistant
    message from ``_build_assistant_message``, each call's JSON arguments loaded and given
    to the tool (a BaseTool whose ``execute`` calls the environment), its text returned as a
    tool message."""
    import json

    env = _environment()
    messages: list[dict[str, Any]] = []
    for text in TURNS:
        content, calls = hermes_extract_tool_calls(text)
        messages.append(build_assistant_message(content, calls, schemas))
        for call in calls:
            result = getattr(env, call["name"])(**json.loads(call["arguments"]))
            messages.append(tool_message(result, call["tool_call_id"]))
    return messages, env


def test_verls_rollout_and_trls_are_one_stored_trajectory_with_the_same_documents() -> None:
    from transformers import AutoTokenizer

    from trainer.environments.chat_template import with_tool_format

    schemas = verl_schemas()
    if schemas is None:
        unavailable("verl is not installed (make setup installs its code)")
    tokenizer = with_tool_format(AutoTokenizer.from_pretrained(prepared_model_dir()))
    trl_messages, trl_env = _trl_messages(tokenizer)
    verl_messages, verl_env = _verl_messages(schemas)
    assert trl_messages != verl_messages  # two spellings: tool names, end tokens
    assert any("name" in m for m in trl_messages if m["role"] == "tool")
    assert not any("name" in m for m in verl_messages if m["role"] == "tool")
    from_trl = rollout(trl_messages, trl_env.record, [tokenizer.eos_token])
    from_verl = rollout(verl_messages, verl_env.record, [tokenizer.eos_token])
    assert from_trl == from_verl
    assert from_trl.text == "break skips the loop's else clause [17]."
    assert [m.get("name") for m in from_trl.trajectory if m["role"] == "tool"] == [
        "search",
        "open",
        "open",
    ]
    assert from_trl.ended_by_error  # open("nine") names no document
    assert [d["label"] for d in from_trl.documents] == ["17"]
