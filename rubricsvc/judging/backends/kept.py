"""Backends kept loaded for the life of a process (a worker, the API server, a trainer).

The scoring service closes its backend at the end of each run; a long-lived process hands it
a view whose ``close`` does nothing, so the model stays loaded between runs. Calls through
the views of one backend are serialized: the in-process backends keep per-call state (the
transformers backend's key/value cache) and one model on one machine gains nothing from
overlapping batches.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from rubricsvc.judging.backends import BackendError, JudgeBackend, backend_from_spec
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest

log = logging.getLogger(__name__)


class KeptView:
    """A kept backend as the scoring service sees it: everything but ``close``."""

    def __init__(self, inner: JudgeBackend, lock: threading.Lock) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self._lock = lock

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        with self._lock:
            return self.inner.generate(requests)

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        with self._lock:
            return self.inner.choice_probs(requests)

    def close(self) -> None:
        pass  # closed by KeptBackends.close_all() when the process stops


class KeptBackends:
    """One backend per judge config, built on first use by ``build``."""

    def __init__(self, build: Callable[[JudgeSpec], JudgeBackend] = backend_from_spec) -> None:
        self._build = build
        self._backends: dict[str, tuple[JudgeBackend, threading.Lock]] = {}
        self._lock = threading.Lock()

    def get(self, spec: JudgeSpec) -> JudgeBackend:
        """This process's backend for ``spec``; loading it holds back other first uses only."""
        key = spec.config_hash()
        with self._lock:
            if key not in self._backends:
                log.info("loading judge %s (backend %s)", spec.name, spec.backend)
                self._backends[key] = (self._build(spec), threading.Lock())
            backend, lock = self._backends[key]
        return KeptView(backend, lock)

    def close_all(self) -> None:
        with self._lock:
            for backend, _ in self._backends.values():
                try:
                    backend.close()
                except Exception as err:  # shutting down: report and go on
                    log.warning("closing %s: %s", backend.name, err)
            self._backends.clear()
