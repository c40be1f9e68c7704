"""The warm start's data: chat rows read and checked, rendered with the chat template the RL
run will render them with, and tokenized with labels on the tokens the loss is taken on.

Each row is split into its prompt (every message up to the last user or system message) and
its completion (what follows: the assistant's turns and the tool results it was shown). The
loss is taken on the completion's assistant tokens only (``assistant_only_loss``), which needs
a chat template that marks the assistant's turns with ``{% generation %}``. SmolLM2's own
template has no such markers and TRL has no training variant of it; so:

- a row whose completion is the assistant's turns only (a plain answer) needs none: its loss
  is on the completion, that is on the assistant's turn, with any template;
- a row with tool results in its completion is rendered with the template's training
  variant: the policy's own if it has the markers, else TRL's for a template it knows
  (``get_training_chat_template``), else, for the tool-call format the trainer gives a policy
  without one (``trainer/environments/chat_template.py``), that format's training variant.
  Every row is checked to render the same text under the training variant as under the
  policy's template, so the tokens trained on are the tokens the policy sees in RL.

The rows are tokenized here, not by TRL: a dataset column of tool calls would turn each call's
``arguments`` into one record type with every argument name of every tool (missing ones null),
which the template would then write out.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import jsonl_lines
from rubricsvc.sft_export import chat_turn

PROMPT_ROLES = frozenset({"system", "user", "developer"})
IGNORED = -100  # the label of a token the loss leaves out (PyTorch's cross-entropy default)


@dataclass(frozen=True)
class ChatRow:
    prompt: list[dict[str, Any]]
    completion: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None  # the row's own tool schemas

    @property
    def uses_tools(self) -> bool:
        return bool(self.tools) or any(
            m.get("tool_calls") or m["role"] == "tool" for m in self.completion
        )

    @property
    def shows_tool_results(self) -> bool:
        return any(m["role"] != "assistant" for m in self.completion)


@dataclass(frozen=True)
class SftData:
    rows: list[ChatRow]
    sha256: str  # of the file's bytes


@dataclass(frozen=True)
class Tokenized:
    input_ids: list[list[int]]
    labels: list[list[int]]
    left_out: int  # rows longer than max_length
    trained_tokens: int  # tokens with a label


def read_sft_data(path: Path) -> SftData:
    """The rows of ``path`` (JSON Lines), with the file's sha256; ValidationFailed naming the
    line of the first row that is not a chat with an assistant turn after its prompt."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ValidationFailed(f"{path}: cannot read the data ({err.strerror})") from None
    rows = []
    for number, line in enumerate(jsonl_lines(raw.decode("utf-8")), start=1):
        if not line.strip():
            continue
        try:
            rows.append(_row(json.loads(line)))
        except (ValueError, TypeError, KeyError) as err:
            raise ValidationFailed(f"{path}:{number}: {err}") from None
    if not rows:
        raise ValidationFailed(f"{path}: no rows")
    return SftData(rows, hashlib.sha256(raw).hexdigest())


def _row(data: Any) -> ChatRow:
    if not isinstance(data, dict):
        raise ValueError("a row is a JSON object with messages")
    if "messages" in data:
        messages = _messages(data["messages"], "messages")
    elif "prompt" in data and "completion" in data:  # TRL's prompt-completion form
        messages = _messages(data["prompt"], "prompt") + _messages(data["completion"], "completion")
    else:
        raise ValueError('a row needs "messages" (or "prompt" and "completion")')
    starts = [i for i, m in enumerate(messages) if m["role"] in PROMPT_ROLES]
    if not starts:
        raise ValueError("no user message: the prompt is every message up to the last one")
    prompt, completion = messages[: starts[-1] + 1], messages[starts[-1] + 1 :]
    if not any(m["role"] == "assistant" for m in completion):
        raise ValueError("no assistant turn after the last user message: nothing to learn")
    tools = data.get("tools")
    if isinstance(tools, str):
        tools = json.loads(tools)
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        raise ValueError("tools: a list of JSON schemas")
    return ChatRow(prompt, completion, tools or None)


def _messages(value: Any, field: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{field}: a non-empty list of messages")
    messages = []
    for message in value:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f"{field}: each message is an object with a role")
        # Content as text, tool-call arguments as mappings: as chat templates read them.
        messages.append(chat_turn(message))
    return messages


def environment_tools(name: str, options: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON schemas of an environment's tools as GRPOTrainer offers them: every public
    method of one instance but ``reset`` (and ``get_reward``), in name order."""
    from transformers.utils import get_json_schema

    import trainer.environments  # noqa: F401  (registers the built-in environments)
    from rubricsvc.environments import find_environment

    instance = find_environment(name).factory(options)()
    names = [
        member
        for member, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if member not in ("reset", "get_reward") and not member.startswith("_")
    ]
    return [get_json_schema(getattr(instance, member)) for member in names]


@dataclass(frozen=True)
class Templates:
    """The policy's chat template (as the RL run renders with it) and the one the rows are
    tokenized with: the same, or its training variant (``{% generation %}`` markers)."""

    policy: str
    training: str | None  # None: no training variant; the loss is then on the completion
    source: str  # where the training variant came from, for the run's record


def choose_templates(tokenizer: Any, tool_format: bool) -> Templates:
    """``tokenizer``'s template (given the trainer's tool-call format first when
    ``tool_format`` and it has none) and the training variant found for it."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    from trainer.environments.chat_template import (
        tool_chat_template,
        tool_training_chat_template,
        with_tool_format,
    )

    if tool_format:
        with_tool_format(tokenizer)
    template = tokenizer.chat_template
    if not isinstance(template, str):
        raise ValidationFailed("the policy's tokenizer has no chat template: rows need one")
    if has_generation_markers(template):
        return Templates(template, template, "the policy's own (it marks the assistant's turns)")
    if template == tool_chat_template():
        return Templates(
            template, tool_training_chat_template(), "the tool format's training variant"
        )
    try:
        found = get_training_chat_template(tokenizer)
    except ValueError:
        return Templates(template, None, "none (the policy's template has no training variant)")
    return Templates(template, found or template, "TRL's training variant of the policy's")


def check_loss_mask(rows: Sequence[ChatRow], templates: Templates, assistant_only: bool) -> None:
    """Refuse rows whose assistant turns cannot be told from the tool results they show."""
    if not assistant_only or templates.training is not None:
        return
    for number, row in enumerate(rows, start=1):
        if row.shows_tool_results:
            raise ValidationFailed(
                f"row {number} has tool results after its prompt, and the policy's chat "
                "template has no training variant that marks the assistant's turns "
                "({% generation %}): set sft.assistant_only_loss: false to take the loss on "
                "everything after the prompt, tool results included, or give the policy a "
                "template with the markers"
            )


def tokenize_rows(
    tokenizer: Any,
    rows: Sequence[ChatRow],
    templates: Templates,
    tools: list[dict[str, Any]] | None,
    max_length: int,
    assistant_only: bool,
) -> Tokenized:
    """Each row's token ids and labels (``IGNORED`` where the loss is not taken); rows longer
    than ``max_length`` left out. ``tools``: schemas for the rows without their own."""
    input_ids: list[list[int]] = []
    labels: list[list[int]] = []
    left_out = trained = 0
    masked = assistant_only and templates.training is not None
    template = templates.training if masked else templates.policy
    for number, row in enumerate(rows, start=1):
        row_tools = row.tools or tools
        if template != templates.policy:
            _same_text(tokenizer, row, row_tools, templates, number)
        full = tokenizer.apply_chat_template(
            row.prompt + row.completion,
            tools=row_tools,
            chat_template=template,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=masked,
        )
        ids = list(full["input_ids"])
        if len(ids) > max_length:
            left_out += 1
            continue
        prompt_ids = tokenizer.apply_chat_template(
            row.prompt,
            tools=row_tools,
            chat_template=template,
            tokenize=True,
            return_dict=True,
            add_generation_prompt=True,
        )["input_ids"]
        # The completion starts where the prompt's rendering (with the assistant's header)
        # and the whole row's part: after the prompt, unless tokens merge across the seam.
        start = _common_prefix(prompt_ids, ids)
        mask = list(full["assistant_masks"]) if masked else [1] * len(ids)
        row_labels = [token if i >= start and mask[i] else IGNORED for i, token in enumerate(ids)]
        count = sum(1 for label in row_labels if label != IGNORED)
        if not count:
            raise ValidationFailed(f"row {number}: no token to learn after its prompt")
        trained += count
        input_ids.append(ids)
        labels.append(row_labels)
    if not input_ids:
        raise ValidationFailed(
            f"every row is longer than max_length ({max_length} tokens): raise sft.max_length"
        )
    return Tokenized(input_ids, labels, left_out, trained)


def _same_text(
    tokenizer: Any,
    row: ChatRow,
    tools: list[dict[str, Any]] | None,
    templates: Templates,
    number: int,
) -> None:
    rendered = [
        tokenizer.apply_chat_template(
            row.prompt + row.completion, tools=tools, chat_template=template, tokenize=False
        )
        for template in (templates.policy, templates.training)
    ]
    if rendered[0] != rendered[1]:
        raise ValidationFailed(
            f"row {number}: the training variant of the chat template ({templates.source}) "
            "renders it differently from the policy's template: the loss would be taken on "
            "text the policy never sees"
        )


def _common_prefix(first: Sequence[int], second: Sequence[int]) -> int:
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return length
