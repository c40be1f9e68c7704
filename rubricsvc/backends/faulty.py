"""A fault-injecting wrapper: a real backend whose requests fail at random, or answer slowly.

For testing what the platform does with failures (retries, masking, redelivery) against a
real model. Chosen by name like any backend, so a worker process can be started with it::

    backend: faulty
    backend_options: {inner: transformers, failure_rate: 0.3, seed: 7}
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rubricsvc.backends.base import BackendError, JudgeBackend
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.errors import ValidationFailed

R = TypeVar("R")
Q = TypeVar("Q")


class FaultyBackend:
    """Forwards to ``inner``, but a random ``failure_rate`` of requests get a retryable error."""

    name = "faulty"

    def __init__(
        self,
        inner: str | JudgeBackend = "scripted",
        failure_rate: float = 0.3,
        seed: int | None = None,
        latency: float = 0.0,
        model_dir: str | Path | None = None,  # for an inner backend that runs the embedded model
        **inner_options: Any,
    ) -> None:
        if not 0.0 <= failure_rate <= 1.0:
            raise ValidationFailed(f"failure_rate must be in [0, 1], not {failure_rate}")
        if isinstance(inner, str):
            if inner == self.name:
                raise ValidationFailed("a faulty backend cannot wrap another faulty backend")
            from rubricsvc.backends import create_backend

            inner = create_backend(inner, model_dir=model_dir, **inner_options)
        self.inner = inner
        self.model = inner.model
        self.failure_rate = failure_rate
        self.latency = latency  # seconds per request, to stand in for a slow model
        self._random = random.Random(seed)
        self.injected = 0  # failures injected so far

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        return self._forward(requests, self.inner.generate)

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        return self._forward(requests, self.inner.choice_probs)

    def _forward(
        self, requests: Sequence[Q], call: Callable[[Sequence[Q]], list[R | BackendError]]
    ) -> list[R | BackendError]:
        doomed = [self._random.random() < self.failure_rate for _ in requests]
        passed = [r for r, fail in zip(requests, doomed, strict=True) if not fail]
        if self.latency:
            time.sleep(self.latency * len(requests))
        answers = iter(call(passed) if passed else [])
        out: list[R | BackendError] = []
        for fail in doomed:
            if fail:
                self.injected += 1
                out.append(BackendError("injected fault: HTTP 503", retryable=True, status=503))
            else:
                out.append(next(answers))
        return out

    def close(self) -> None:
        self.inner.close()
