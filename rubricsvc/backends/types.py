"""The data that crosses the judge-backend seam: what a backend is asked and what it answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A chat is a list of {"role": ..., "content": ...} messages.
Chat = list[dict[str, str]]


@dataclass(frozen=True)
class GenerationRequest:
    """Generate the assistant's reply to ``chat``."""

    chat: Chat
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int | None = None
    # A JSON schema the reply must follow. Backends with structured output (vLLM's guided
    # decoding, OpenAI's ``response_format``) enforce it; others ignore it, so callers still
    # validate the reply.
    json_schema: dict[str, Any] | None = None


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None = None  # "stop", "length", ...


@dataclass(frozen=True)
class ChoiceRequest:
    """The probability of each choice as the first token of the assistant's reply to ``chat``.

    Each choice must be a single token of the model's vocabulary (backends check this);
    verdict parsers pass the variants they accept (``"yes"``, ``"Yes"``) and add them up.
    """

    chat: Chat
    choices: tuple[str, ...]
    # Requests with the same group share a long prefix (the judged prompt and response);
    # a backend that can reuse the prefix's key/value cache does so within a group.
    group: str | None = None


@dataclass(frozen=True)
class ChoiceResult:
    # Probability of each choice under the full next-token distribution (softmax over the
    # whole vocabulary, not renormalized over the choices). A choice the backend could not
    # see (outside an API's top-k logprobs) is absent rather than guessed.
    probs: dict[str, float]
    prompt_tokens: int
    # Extra detail for debugging (top tokens seen, ...).
    detail: dict[str, object] = field(default_factory=dict)
