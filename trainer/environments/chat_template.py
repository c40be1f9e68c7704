"""A tool-calling chat template for a policy whose own has none (the embedded SmolLM2-135M-
Instruct's renders only role and content: tool calls and results would vanish from its prompt).

The template given is Qwen2.5's tool format on the same ChatML markers SmolLM2 already uses
(``<|im_start|>``, ``<|im_end|>``): the tools' JSON schemas in the system turn between
``<tools>`` tags, each call the model makes as ``<tool_call>{"name": ..., "arguments": ...}
</tool_call>``, tool results in a user turn between ``<tool_response>`` tags. It is TRL 1.16's
``trl/chat_templates/qwen2_5.jinja`` (Apache License 2.0) with SmolLM2's own default system
line in place of Qwen's, read from the installed TRL so the two never drift apart; the model's
replies are parsed with TRL's parser for that format (``qwen3_template``: ``<tool_call>`` JSON
blocks, then the text up to ``<|im_end|>``). The base model was never trained on it: a policy
learns the format from the reward (``format``, ``search_turns``), if at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def tool_chat_template() -> str:
    return _smollm_variant("qwen2_5.jinja")


def tool_training_chat_template() -> str:
    """``tool_chat_template`` with ``{% generation %}`` markers around the assistant's turns,
    which render the same text: TRL's training variant of the Qwen2.5 template
    (``qwen2_5_training.jinja``) with the same system line, so that supervised fine-tuning can
    take the loss on the assistant's turns only (``trainer/sft_data.py``)."""
    return _smollm_variant("qwen2_5_training.jinja")


def _smollm_variant(name: str) -> str:
    import trl

    path = Path(trl.__file__).parent / "chat_templates" / name
    template = path.read_text(encoding="utf-8")
    assert QWEN_SYSTEM in template, f"{path}: not the Qwen2.5 template this module expects"
    return template.replace(QWEN_SYSTEM, SMOLLM_SYSTEM)


def with_tool_format(tokenizer: Any) -> Any:
    """``tokenizer`` able to render and parse tool calls: unchanged when its template already
    can (TRL then picks its parser), else given ``tool_chat_template`` and TRL's parser for it."""
    from trl.chat_template_utils import qwen3_template, supports_tool_calling

    if supports_tool_calling(tokenizer):
        return tokenizer
    tokenizer.chat_template = tool_chat_template()
    tokenizer.response_template = qwen3_template
    return tokenizer
