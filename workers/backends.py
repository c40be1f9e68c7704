"""Judge backends of a worker process: built once, kept for every chunk, closed at shutdown.

The scoring service closes its backend at the end of each run; a worker hands it a view
whose ``close`` does nothing, so the model stays loaded between chunks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from rubricsvc.config import get_settings
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.backends import BackendError, JudgeBackend, create_backend
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest

log = logging.getLogger(__name__)

_backends: dict[str, JudgeBackend] = {}  # judge config hash -> backend
_lock = threading.Lock()


class _Kept:
    """A kept backend as the scoring service sees it: everything but ``close``."""

    def __init__(self, inner: JudgeBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        return self.inner.generate(requests)

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        return self.inner.choice_probs(requests)

    def close(self) -> None:
        pass  # closed by close_all() when the worker process stops


def build(spec: JudgeSpec) -> JudgeBackend:
    """A new backend for ``spec``, behind the shared API limits if the judge has some."""
    broker = get_settings().broker
    limits = broker.api_limits.get(spec.name)
    url = broker.limits_url or (broker.url if (broker.url or "").startswith("redis") else None)
    if limits is not None and url is None:  # refused before any model is loaded
        raise ValidationFailed(
            f"judge {spec.name!r} has API limits, which are counted in Redis: set "
            "RUBRICSVC_BROKER_LIMITS_URL (the broker is not Redis)"
        )
    options = dict(spec.backend_options)
    if spec.model is not None:
        options["model"] = spec.model
    backend = create_backend(spec.backend, **options)
    if limits is None or url is None:
        return backend
    from rubricsvc.judging.backends.limits import limited

    return limited(backend, url, spec.name, limits)


def backend_for(spec: JudgeSpec) -> JudgeBackend:
    """This process's backend for ``spec``, built on first use."""
    key = spec.config_hash()
    with _lock:
        if key not in _backends:
            log.info("loading judge %s (backend %s)", spec.name, spec.backend)
            _backends[key] = build(spec)
        return _Kept(_backends[key])


def close_all() -> None:
    with _lock:
        for backend in _backends.values():
            try:
                backend.close()
            except Exception as err:  # shutting down: report and go on
                log.warning("closing %s: %s", backend.name, err)
        _backends.clear()
