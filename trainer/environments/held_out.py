"""The gold monitor's held-out answers in a tool environment: each held-out prompt answered
through the environment, in the multi-turn tool loop training rollouts run in, and stored as a
training rollout is (final answer, trajectory, documents opened).

The loop is the one TRL's GRPOTrainer runs with ``environment_factory``, step for step: one
environment instance per rollout, ``reset(**row)`` with the dataset row training uses (the
prompt and its id); the instance's public methods (but ``reset`` and ``get_reward``) offered
as tools in the chat template; each reply parsed with TRL's parser; every call of a reply run
in order, its result appended as a ``tool`` message named by the tool (``str`` of what the
method returned, or TRL's ``{'error': ...}`` when it cannot be called); generation again after
the results, at most ``max_turns`` times (``max_tool_calling_iterations``); the whole rollout
(replies and tool results) within ``max_new_tokens`` tokens (``max_completion_length``). The
environment is made from the run's own options. What differs from training is the decoding:
greedy, as the monitor's single-turn answers are, so that evaluations differ only by the
policy. The generated messages become a rollout through the environment's own reader
(``rubricsvc.environments``), as the agent reward reads a training rollout.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from rubricsvc.environments import find_environment
from rubricsvc.scoring.rewards import RewardRequest
from trainer.rewards import PROMPT_ID_COLUMN

# The policy's next reply to a conversation, given the tools offered; None when the rollout's
# token budget is spent (nothing more is generated).
Turn = Callable[[list[dict[str, Any]], list[Callable[..., Any]]], dict[str, Any] | None]


def environment_tools(instance: Any) -> list[Callable[..., Any]]:
    """The tools an environment instance offers, as TRL finds them: the public functions of
    its class but ``reset`` and ``get_reward``, bound to the instance."""
    return [
        getattr(instance, name)
        for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def call_tool(tools: dict[str, Callable[..., Any]], call: dict[str, Any]) -> tuple[str, str]:
    """The tool message's name and content for one parsed call, as TRL makes them."""
    if call.get("type") != "function":
        name = str(call.get("name", "unknown"))
        return name, str({"error": f"Unsupported tool call type: {call.get('type')}"})
    function = call["function"]
    name = function["name"]
    try:
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        return name, str(tools[name](**function["arguments"]))
    except Exception as err:  # as TRL: any failure of the call is the tool's result
        return name, str({"error": str(err)})


def run_in_environment(
    turn: Turn,
    instance: Any,
    row: dict[str, Any],
    messages: Sequence[dict[str, Any]],
    max_turns: int | None,
) -> list[dict[str, Any]]:
    """What the policy generated (assistant replies and tool results) answering ``messages``
    in ``instance``, reset with ``row``: the messages TRL hands the reward as a completion."""
    observation = instance.reset(**row)
    conversation = [dict(m) for m in messages]
    if isinstance(observation, str) and conversation:  # as TRL: appended to the last message
        last = conversation[-1]
        conversation[-1] = {**last, "content": str(last.get("content", "")) + observation}
    tools = environment_tools(instance)
    by_name = {tool.__name__: tool for tool in tools}
    generated: list[dict[str, Any]] = []
    iterations = 0
    reply = turn(conversation, tools)
    while reply is not None:
        generated.append(reply)
        conversation.append(reply)
        calls = reply.get("tool_calls")
        if not calls or (max_turns is not None and iterations >= max_turns):
            break
        for call in calls:
            name, content = call_tool(by_name, call)
            result = {"role": "tool", "name": name, "content": content}
            generated.append(result)
            conversation.append(result)
        iterations += 1
        reply = turn(conversation, tools)
    return generated


def model_turns(model: Any, tokenizer: Any, max_new_tokens: int) -> Turn:
    """A rollout's turns generated greedily by ``model``: each reply within what is left of
    ``max_new_tokens`` for the whole rollout (tool results included), parsed as TRL parses
    it. One per rollout (it counts from the rollout's prompt)."""
    import torch
    from trl.chat_template_utils import parse_response

    prompt_length: int | None = None

    def turn(
        conversation: list[dict[str, Any]], tools: list[Callable[..., Any]]
    ) -> dict[str, Any] | None:
        nonlocal prompt_length
        ids = list(
            tokenizer.apply_chat_template(
                conversation,
                tools=tools or None,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"]
        )
        if prompt_length is None:
            prompt_length = len(ids)
        left = max_new_tokens - (len(ids) - prompt_length)
        if left <= 0:
            return None
        inputs = torch.tensor([ids], device=model.device)
        with torch.no_grad():
            output = model.generate(
                input_ids=inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=left,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
        new = [int(t) for t in output[0, len(ids) :]]
        if not new:
            return None
        reply = parse_response(tokenizer, new, prefix=ids, tools=tools)
        return dict(reply) if reply else None

    return turn


class EnvironmentAnswers:
    """The held-out prompts answered through environment ``name`` with the run's options."""

    def __init__(self, name: str, options: dict[str, Any], max_turns: int | None) -> None:
        environment = find_environment(name)
        self.make = environment.factory(options)
        self.read = environment.rollout
        self.max_turns = max_turns

    def requests(
        self,
        turns: Callable[[], Turn],
        prompt_ids: Sequence[str],
        messages: Sequence[Sequence[dict[str, Any]]],
    ) -> list[RewardRequest]:
        """Each prompt's rollout as the request its scores are asked with (``turns`` makes one
        rollout's policy turns): its final answer, trajectory and opened documents."""
        requests = []
        for pid, prompt in zip(prompt_ids, messages, strict=True):
            instance = self.make()
            row = {"prompt": list(prompt), PROMPT_ID_COLUMN: pid}
            generated = run_in_environment(turns(), instance, row, prompt, self.max_turns)
            done = self.read(generated, instance)
            requests.append(
                RewardRequest(
                    done.text,
                    prompt_id=pid,
                    trajectory=done.trajectory,
                    documents=done.documents or None,
                )
            )
        return requests

    def answer(
        self,
        model: Any,
        tokenizer: Any,
        prompt_ids: Sequence[str],
        messages: Sequence[Sequence[dict[str, Any]]],
        max_new_tokens: int,
    ) -> list[RewardRequest]:
        """The held-out rollouts of ``model`` (greedy; in eval mode, restored after)."""
        was_training = model.training
        model.eval()
        try:
            return self.requests(
                lambda: model_turns(model, tokenizer, max_new_tokens), prompt_ids, messages
            )
        finally:
            if was_training:
                model.train()
