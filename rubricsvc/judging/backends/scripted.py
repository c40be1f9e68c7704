"""A scripted backend: answers come from a function, not a model.

For tests about something other than the model (parsing, retries, aggregation, queues)
and for dry runs of a pipeline. Every call is counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rubricsvc.judging.backends.base import BackendError
from rubricsvc.judging.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest

TextScript = Callable[[GenerationRequest], str | BackendError]
ProbScript = Callable[[ChoiceRequest], dict[str, float] | BackendError]


def always_yes(_request: ChoiceRequest) -> dict[str, float]:
    return {"Yes": 0.9, "No": 0.1}


class ScriptedBackend:
    name = "scripted"

    def __init__(
        self,
        text: TextScript | None = None,
        probs: ProbScript | None = None,
        model: str = "scripted",
    ) -> None:
        self.model = model
        self._text = text or (lambda _request: "It does.\nVERDICT: YES")
        self._probs = probs or always_yes
        self.generate_calls = 0
        self.choice_calls = 0
        self.requests: list[GenerationRequest | ChoiceRequest] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        self.generate_calls += 1
        self.requests.extend(requests)
        out: list[Generation | BackendError] = []
        for request in requests:
            answer = self._text(request)
            out.append(
                answer if isinstance(answer, BackendError) else Generation(answer, 10, 5, "stop")
            )
        return out

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        self.choice_calls += 1
        self.requests.extend(requests)
        out: list[ChoiceResult | BackendError] = []
        for request in requests:
            answer = self._probs(request)
            out.append(answer if isinstance(answer, BackendError) else ChoiceResult(answer, 10))
        return out

    def close(self) -> None:
        pass
