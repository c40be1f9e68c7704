"""What the backends that hold a tokenizer share: rendering chats, verdict tokens, the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rubricsvc import neutral
from rubricsvc.backends.base import BackendError
from rubricsvc.backends.types import Chat


def default_model_path(model_dir: str | Path | None = None) -> Path:
    """The embedded model's folder under ``model_dir`` (the process's
    ``RUBRICSVC_JUDGE_MODEL_DIR``, which its provider passes; None: the default cache),
    converted on first use."""
    from rubricsvc.backends.embedded import prepare_embedded_model
    from rubricsvc.config import default_cache_dir

    return prepare_embedded_model(Path(model_dir) if model_dir else default_cache_dir() / "models")


def encode_chat(tokenizer: Any, chat: Chat) -> list[int]:
    """Token ids of ``chat`` rendered with the model's template, ready for the reply; only
    the template itself can produce control tokens (see ``rubricsvc.neutral``)."""
    try:
        return neutral.encode_chat(tokenizer, chat)
    except neutral.TemplateMangledContent as err:
        raise BackendError(
            f"cannot encode judged text safely: {err}; use a model whose chat template "
            "inserts message content unchanged",
            retryable=False,
        ) from None


class ChoiceTokens:
    """Verdict choices as token ids; a choice must be exactly one token of the vocabulary."""

    def __init__(self, tokenizer: Any, model: str) -> None:
        self._tokenizer = tokenizer
        self._model = model
        # A handful of distinct choices ("Yes", "No", "1".."5") recur in every request:
        # each is encoded once rather than once per request and per result.
        self._ids: dict[str, int] = {}

    def id_of(self, choice: str) -> int:
        if choice not in self._ids:
            self._ids[choice] = self._encode(choice)
        return self._ids[choice]

    def _encode(self, choice: str) -> int:
        ids = self._tokenizer.encode(choice, add_special_tokens=False)
        if len(ids) != 1:
            raise BackendError(
                f"verdict choice {choice!r} is {len(ids)} tokens for {self._model}; "
                "choices must be single tokens",
                retryable=False,
            )
        return int(ids[0])
