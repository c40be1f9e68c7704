"""The judge-backend contract: two batch primitives, and errors that say whether to retry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.errors import RubricsvcError


class BackendError(RubricsvcError):
    """A backend call failed. ``retryable`` tells the caller whether trying again may help."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status  # the provider's HTTP status, when there is one
        self.retry_after = retry_after  # seconds the provider asked to wait, when it did


class ContextLengthError(BackendError):
    """The request does not fit the model's context; never silently truncated, never retried."""

    def __init__(self, tokens: int, limit: int, unit: str = "tokens") -> None:
        # ``unit``: "tokens", or "characters" where only a character bound is known (a remote
        # judge's ``max_prompt_chars``, vLLM's bound of context x the longest token's length).
        super().__init__(
            f"prompt of {tokens} {unit} exceeds the model's context of {limit} {unit}",
            retryable=False,
        )
        self.tokens = tokens
        self.limit = limit
        self.unit = unit


class BackendCrash(BackendError):
    """The backend raised (rather than answered) on this one request, sent on its own: what
    it was shown may be why (a text that breaks its tokenizer, a prompt too large to allocate),
    or the backend may be broken. Retried like any crash; then the canary call
    (``scoring.attribution``) decides which."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"backend error: {type(error).__name__}: {error}", retryable=True)


@runtime_checkable
class JudgeBackend(Protocol):
    """A model that judges. Both primitives take a batch and return one item per request,
    in order: the result, or the ``BackendError`` that request met (so one bad request does
    not fail its neighbours). An error that affects the whole call may also be raised.
    """

    name: str  # registry name: "transformers", "vllm", "openai", ...
    model: str  # what the judge config records as the model

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        """Decode a reply for each chat."""
        ...

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        """The probability of each choice as the first reply token, from one forward pass."""
        ...

    def close(self) -> None:
        """Release the model, connections, threads."""
        ...
