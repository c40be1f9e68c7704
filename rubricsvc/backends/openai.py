"""Judging through any OpenAI-compatible endpoint: vLLM's server, OpenAI, other providers.

Each batch is sent as concurrent chat-completion calls, at most ``max_concurrency`` at a
time. Choice probabilities come from the first reply token's ``top_logprobs``: an API
shows only the top-k tokens, so a choice outside them is left out of the result rather
than guessed. When the served model is a local folder (as with vLLM serving a directory),
its tokenizer lets the backend refuse multi-token choices and over-long prompts before
any call; ``max_prompt_chars`` bounds a remote model's prompts in characters before any call;
otherwise the server's own 400 answer (in tokens, or vLLM's bound in characters) is mapped to
the same errors, and any other 400 goes through the failure's attribution (a control call).

The server tokenizes what it is sent, special-token strings included, so message content
leaves here with those strings broken (``rubricsvc.neutral``): the common chat families',
the served model's own when its tokenizer is known, and any listed in ``special_tokens``.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rubricsvc import neutral
from rubricsvc.backends.base import BackendError, ContextLengthError
from rubricsvc.backends.tokens import ChoiceTokens, encode_chat
from rubricsvc.backends.types import (
    Chat,
    ChoiceRequest,
    ChoiceResult,
    Generation,
    GenerationRequest,
)
from rubricsvc.errors import missing_extra

T = TypeVar("T")

# A key for servers that check none (a local vLLM); the client library insists on one.
PLACEHOLDER_API_KEY = "EMPTY"

# vLLM: "This model's maximum context length is 2048 tokens. However, your prompt contains
# at least 2049 input tokens ..."; OpenAI: "... However, your messages resulted in 9000 tokens".
_CONTEXT_LIMIT = re.compile(r"maximum context length is (\d+) tokens")
_CONTEXT_TOKENS = re.compile(
    r"(?:contains (?:at least )?|resulted in |requested )(\d+) (?:input )?tokens"
)
# vLLM's check before tokenizing: "... However, your prompt contains 9000 characters (more than
# 8192 characters, which is the upper bound for 2047 input tokens) ...".
_CONTEXT_CHARACTERS = re.compile(r"contains (\d+) characters \(more than (\d+) characters")


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as err:
        raise missing_extra(err, "the openai backend needs the openai extra", "openai") from None
    return openai


def _load_local_tokenizer(path: str | Path) -> Any | None:
    """The tokenizer of a model served from a local folder, if transformers can load it."""
    if not Path(path).is_dir():
        return None
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError):
        # A folder without tokenizer files: the server's own checks still apply.
        return None


class _EventLoopThread:
    """A private event loop on a daemon thread, for running coroutines from sync code.

    One long-lived loop (rather than ``asyncio.run`` per batch) keeps the HTTP client's
    connection pool, which is bound to the loop that opened it, usable across batches;
    and it works even when the caller is itself inside a running event loop.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="rubricsvc-openai", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class OpenAIBackend:
    """A model behind an OpenAI-compatible chat-completions API."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        max_concurrency: int = 16,
        timeout: float = 60.0,
        max_context: int | None = None,
        top_logprobs: int = 20,
        tokenizer: str | Path | None = None,
        max_retries: int = 0,
        special_tokens: Sequence[str] = (),
        max_prompt_chars: int | None = None,
    ) -> None:
        # ``tokenizer`` defaults to ``model`` when that names a local folder. The client
        # retries nothing by default: callers retry what ``retryable`` allows, with backoff.
        # ``max_prompt_chars``: a prompt whose messages hold more characters than this is refused
        # before any call, as overflowing (for a remote model whose tokenizer is not at hand;
        # vLLM's own bound is the context in tokens times the longest token's length).
        self._openai = _import_openai()
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env  # the variable's name; the key itself is not kept
        self.timeout = timeout
        self.context_limit = max_context
        self.max_prompt_chars = max_prompt_chars
        self.top_logprobs = top_logprobs
        self.tokenizer = _load_local_tokenizer(tokenizer or model)
        self.choices = None if self.tokenizer is None else ChoiceTokens(self.tokenizer, model)
        known = [] if self.tokenizer is None else neutral.tokenizer_special_tokens(self.tokenizer)
        self.special_tokens = neutral.SpecialTokens([*known, *special_tokens])
        api_key = (os.environ.get(api_key_env) if api_key_env else None) or PLACEHOLDER_API_KEY
        self._loop = _EventLoopThread()
        self._client, self._semaphore = self._loop.run(
            self._open(api_key, max_concurrency, max_retries)
        )

    async def _open(self, api_key: str, max_concurrency: int, max_retries: int) -> tuple[Any, Any]:
        """The client and the concurrency limit, created on the loop that will use them."""
        client = self._openai.AsyncOpenAI(
            base_url=self.base_url, api_key=api_key, timeout=self.timeout, max_retries=max_retries
        )
        return client, asyncio.Semaphore(max_concurrency)

    def messages(self, chat: Chat) -> Chat:
        """``chat`` as sent: no message content can spell a special token of the model."""
        return [{**m, "content": self.special_tokens.break_all(str(m["content"]))} for m in chat]

    # -- local checks (only with a tokenizer) -------------------------------------------

    def _check_request(self, chat: Chat, reply_tokens: int, choices: Sequence[str] = ()) -> None:
        """Refuse prompts over ``max_prompt_chars``, and (with a tokenizer) multi-token choices
        and prompts over ``max_context``, before any call."""
        if self.max_prompt_chars is not None:
            chars = sum(len(str(m["content"])) for m in chat)
            if chars > self.max_prompt_chars:
                raise ContextLengthError(chars, self.max_prompt_chars, unit="characters")
        if self.tokenizer is None or self.choices is None:
            return
        for choice in choices:
            self.choices.id_of(choice)
        if self.context_limit is None:
            return
        tokens = len(encode_chat(self.tokenizer, chat)) + reply_tokens
        if tokens > self.context_limit:
            raise ContextLengthError(tokens, self.context_limit)

    # -- calls ------------------------------------------------------------------------

    def _run_batch(self, calls: list[dict[str, Any] | BackendError]) -> list[Any]:
        """Send every call (skipping the pre-failed ones) concurrently; results in order."""

        async def one(call: dict[str, Any] | BackendError) -> Any:
            if isinstance(call, BackendError):
                return call
            async with self._semaphore:
                try:
                    return await self._client.chat.completions.create(model=self.model, **call)
                except self._openai.OpenAIError as err:
                    return self._backend_error(err)

        async def run_all() -> list[Any]:
            return list(await asyncio.gather(*(one(call) for call in calls)))

        return self._loop.run(run_all())

    def _backend_error(self, err: Exception) -> BackendError:
        """Map a client error to a ``BackendError`` that says whether retrying may help."""
        openai = self._openai
        if isinstance(err, openai.APITimeoutError):
            return BackendError(
                f"{self.base_url} did not answer within {self.timeout:g} s", retryable=True
            )
        if isinstance(err, openai.APIConnectionError):
            return BackendError(f"cannot reach {self.base_url}: {err}", retryable=True)
        if isinstance(err, openai.APIStatusError):
            status = int(err.status_code)
            message = _server_message(err)
            if status == 400:
                context_error = _context_length_error(message)
                if context_error is not None:
                    return context_error
            if status == 401 and self.api_key_env:
                message += f" (the API key is read from ${self.api_key_env})"
            # 408 and 429 are the server asking to come back later; 5xx are its own faults.
            retryable = status in (408, 429) or status >= 500
            return BackendError(
                f"{self.base_url} answered {status}: {message}",
                retryable=retryable,
                status=status,
                retry_after=_retry_after(err.response.headers.get("retry-after")),
            )
        return BackendError(f"{self.base_url}: {type(err).__name__}: {err}", retryable=False)

    # -- the two primitives -----------------------------------------------------------

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        calls: list[dict[str, Any] | BackendError] = []
        for request in requests:
            try:
                # The server needs room for the one token it samples after the prompt.
                self._check_request(request.chat, 1, request.choices)
            except BackendError as err:
                calls.append(err)
                continue
            calls.append(
                {
                    "messages": self.messages(request.chat),
                    "max_tokens": 1,
                    "temperature": 0.0,
                    "logprobs": True,
                    "top_logprobs": self.top_logprobs,
                }
            )
        responses = self._run_batch(calls)
        return [
            response
            if isinstance(response, BackendError)
            else self._choice_result(request, response)
            for request, response in zip(requests, responses, strict=True)
        ]

    def _choice_result(self, request: ChoiceRequest, response: Any) -> ChoiceResult | BackendError:
        logprobs = response.choices[0].logprobs if response.choices else None
        if logprobs is None or not logprobs.content:
            return BackendError(
                f"{self.base_url} returned no logprobs for {self.model}; "
                "choice probabilities need an endpoint that supports logprobs",
                retryable=False,
            )
        # Token text -> logprob, most likely first; a repeated text keeps its best entry.
        top: dict[str, float] = {}
        for entry in logprobs.content[0].top_logprobs or []:
            top.setdefault(entry.token, float(entry.logprob))
        return ChoiceResult(
            probs={c: math.exp(top[c]) for c in request.choices if c in top},
            prompt_tokens=_usage(response, "prompt_tokens"),
            detail={
                "top": [(token, round(math.exp(lp), 6)) for token, lp in list(top.items())[:5]]
            },
        )

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        calls: list[dict[str, Any] | BackendError] = []
        for request in requests:
            try:
                self._check_request(request.chat, request.max_tokens)
            except BackendError as err:
                calls.append(err)
                continue
            call: dict[str, Any] = {
                "messages": self.messages(request.chat),
                "max_tokens": request.max_tokens,
                "temperature": request.temperature,
            }
            if request.seed is not None:
                call["seed"] = request.seed
            if request.json_schema is not None:
                # Structured outputs: the server decodes only replies that match the schema.
                call["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "reply", "schema": request.json_schema, "strict": True},
                }
            calls.append(call)
        responses = self._run_batch(calls)
        return [
            response if isinstance(response, BackendError) else _generation(response)
            for response in responses
        ]

    def close(self) -> None:
        loop = self.__dict__.pop("_loop", None)
        if loop is None:
            return
        loop.run(self._client.close())
        loop.stop()


def _generation(response: Any) -> Generation:
    choice = response.choices[0]
    return Generation(
        text=choice.message.content or "",
        prompt_tokens=_usage(response, "prompt_tokens"),
        completion_tokens=_usage(response, "completion_tokens"),
        finish_reason=choice.finish_reason,
    )


def _usage(response: Any, field: str) -> int:
    """A token count from the response's usage block (0 where the provider sends none)."""
    usage = getattr(response, "usage", None)
    return int(getattr(usage, field, 0) or 0)


def _retry_after(value: str | None) -> float | None:
    """A Retry-After header in seconds (the HTTP-date form is rare from model servers and
    is left out)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < 86_400 else None


def _server_message(err: Any) -> str:
    """The server's own error message, without the client library's prefix."""
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return str(getattr(err, "message", None) or err)


def _context_length_error(message: str) -> ContextLengthError | None:
    """A ``ContextLengthError`` from a server's 400 message, when it gives both numbers (in
    tokens, or in characters for vLLM's bound before tokenizing)."""
    limit = _CONTEXT_LIMIT.search(message)
    tokens = _CONTEXT_TOKENS.search(message)
    characters = _CONTEXT_CHARACTERS.search(message)
    if characters is not None:
        error = ContextLengthError(
            int(characters.group(1)), int(characters.group(2)), unit="characters"
        )
    elif limit is not None and tokens is not None:
        error = ContextLengthError(int(tokens.group(1)), int(limit.group(1)))
    else:
        return None
    error.status = 400
    return error
