"""A scripted backend: answers come from a function, not a model.

For tests about something other than the model (parsing, retries, aggregation, queues)
and for dry runs of a pipeline. Every call is counted.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence

from rubricsvc.backends.base import BackendError
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest

TextScript = Callable[[GenerationRequest], str | BackendError]
ProbScript = Callable[[ChoiceRequest], dict[str, float] | BackendError]


def always_yes(_request: ChoiceRequest) -> dict[str, float]:
    return {"Yes": 0.9, "No": 0.1}


def _yes_if_contains(text: str) -> ProbScript:
    def probs(request: ChoiceRequest) -> dict[str, float]:
        yes = 0.9 if text in request.chat[-1]["content"] else 0.1
        return {"Yes": yes, "No": round(1 - yes, 6)}

    return probs


class ScriptedBackend:
    name = "scripted"

    def __init__(
        self,
        text: TextScript | None = None,
        probs: ProbScript | None = None,
        model: str = "scripted",
        *,
        reply: str | None = None,
        delay: float = 0.0,
        record_to: str | None = None,
        exclusive: bool = False,
        yes_if_contains: str | None = None,
    ) -> None:
        """From a judge file (``backend_options``) too: ``reply`` is the text of every reply,
        ``delay`` seconds are spent on every batch (a slow judge), and each request's chat is
        appended to the JSON Lines file ``record_to`` (what the judge was shown). With
        ``exclusive``, batches run one at a time, as on one GPU engine whose step costs about
        the same whatever its batch size: concurrent callers wait their turn. With
        ``yes_if_contains``, a choice request's "Yes" is likely (0.9) when its last message
        holds that text and unlikely (0.1) when not: a judge whose verdicts vary with the
        response, for tests about what varies."""
        self.model = model
        default_reply = "It does.\nVERDICT: YES" if reply is None else reply
        self._text = text or (lambda _request: default_reply)
        self._probs = probs or (
            always_yes if yes_if_contains is None else _yes_if_contains(yes_if_contains)
        )
        self._delay = delay
        self._record_to = record_to
        self._turn: threading.Lock | None = threading.Lock() if exclusive else None
        self.batch_sizes: list[int] = []
        self.generate_calls = 0
        self.choice_calls = 0
        self.requests: list[GenerationRequest | ChoiceRequest] = []

    def _batch(self, requests: Sequence[GenerationRequest | ChoiceRequest]) -> None:
        if self._turn is None:
            self._take(requests)
            return
        with self._turn:
            self._take(requests)

    def _take(self, requests: Sequence[GenerationRequest | ChoiceRequest]) -> None:
        self.requests.extend(requests)
        self.batch_sizes.append(len(requests))
        if self._record_to:
            with open(self._record_to, "a", encoding="utf-8") as log:
                log.writelines(json.dumps(r.chat, ensure_ascii=False) + "\n" for r in requests)
        if self._delay:
            time.sleep(self._delay)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        self.generate_calls += 1
        self._batch(requests)
        out: list[Generation | BackendError] = []
        for request in requests:
            answer = self._text(request)
            out.append(
                answer if isinstance(answer, BackendError) else Generation(answer, 10, 5, "stop")
            )
        return out

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        self.choice_calls += 1
        self._batch(requests)
        out: list[ChoiceResult | BackendError] = []
        for request in requests:
            answer = self._probs(request)
            out.append(answer if isinstance(answer, BackendError) else ChoiceResult(answer, 10))
        return out

    def close(self) -> None:
        pass
