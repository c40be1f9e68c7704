"""Backends kept loaded for the life of a process (a worker, the API server, a trainer);
the process's ``BackendProvider`` (``provider``) keeps them here.

The scorer closes its backend at the end of each run; a long-lived process hands it
a view whose ``close`` does nothing, so the model stays loaded between runs. Calls through
the views of one backend are serialized: the in-process backends keep per-call state (the
transformers backend's key/value cache) and one model on one machine gains nothing from
overlapping batches.

A process that serves other programs (the API server) bounds how many backends it keeps
(``max_backends``) and keys them by what is loaded rather than by the whole judge config
(``key=loaded_backend_key``): judge configs that differ only in verdict mode, template or
sampling then share one model, and the rubric generator shares the judge's model when both
name the same one. Past the bound a new backend is refused (``TooManyBackends``) rather than
evicting one: a view handed out may be in use, and a client alternating between more configs
than the bound would otherwise have a model loaded on every request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from rubricsvc.backends import (
    BackendChoice,
    BackendError,
    JudgeBackend,
    backend_from_spec,
    places_model,
)
from rubricsvc.backends.placement import loaded_options
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.errors import ValidationFailed
from rubricsvc.hashing import content_hash

log = logging.getLogger(__name__)

SpecT = TypeVar("SpecT", bound=BackendChoice)


class TooManyBackends(ValidationFailed):
    """A new backend was asked for while the process keeps as many as it may."""


def config_key(spec: Any) -> str:
    """One backend per judge config (its hash): the default."""
    return str(spec.config_hash())


def loaded_backend_key(spec: BackendChoice) -> str:
    """One backend per thing loaded: the backend, its model, adapter and options (what
    ``backend_from_spec`` builds from), so configs that differ only in how they use the model
    (mode, template, sampling, or drafting rubrics instead of judging) share it."""
    return content_hash(
        {
            "backend": spec.backend,
            "model": spec.model,
            "revision": getattr(spec, "revision", None),
            # An adapter is merged into the model it loads: by its contents, as the config
            # hash has it, so a judge with one never shares the base's backend.
            "adapter": _adapter_hash(spec),
            # ``device`` and ``dtype`` as resolved: ``auto`` and what it names load one model.
            "backend_options": loaded_options(
                places_model(spec.backend), dict(spec.backend_options)
            ),
        }
    )


def _adapter_hash(spec: BackendChoice) -> str | None:
    hashed = getattr(spec, "adapter_sha256", None)  # a judge's; a generator has no adapter
    return hashed() if callable(hashed) else None


class KeptView:
    """A kept backend as the scorer sees it: everything but ``close``."""

    def __init__(self, inner: JudgeBackend, lock: threading.RLock) -> None:
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


class KeptBackends(Generic[SpecT]):
    """One backend per ``key(spec)`` (default: per judge config), built on first use by
    ``build``; at most ``max_backends`` of them (None: no bound)."""

    def __init__(
        self,
        build: Callable[[SpecT], JudgeBackend] = backend_from_spec,
        *,
        key: Callable[[SpecT], str] = config_key,
        max_backends: int | None = None,
        limit_name: str = "the limit",
    ) -> None:
        if max_backends is not None and max_backends < 1:
            raise ValueError("max_backends must be at least 1 (or None: no bound)")
        self._build = build
        self._key = key
        self.max_backends = max_backends
        self.limit_name = limit_name  # named in the refusal: what to raise for more
        self._backends: dict[str, tuple[JudgeBackend, threading.RLock, str]] = {}
        self._lock = threading.Lock()

    def get(self, spec: SpecT) -> KeptView:
        """This process's backend for ``spec``, built on first use (other ``get`` calls wait
        while a backend loads). Raises ``TooManyBackends`` (before loading anything) when the
        bound is reached."""
        key = self._key(spec)
        with self._lock:
            if key not in self._backends:
                self._refuse_if_full(spec)
                log.info("loading %s (backend %s)", _label(spec), spec.backend)
                self._backends[key] = (self._build(spec), threading.RLock(), _label(spec))
            backend, lock, _ = self._backends[key]
        return KeptView(backend, lock)

    def check(self, spec: SpecT) -> None:
        """Raise ``TooManyBackends`` if ``get(spec)`` would need a backend beyond the bound."""
        with self._lock:
            if self._key(spec) not in self._backends:
                self._refuse_if_full(spec)

    def loaded(self) -> list[str]:
        """What is loaded, in loading order (the first name each backend was loaded for)."""
        with self._lock:
            return [label for _, _, label in self._backends.values()]

    def _refuse_if_full(self, spec: SpecT) -> None:
        if self.max_backends is not None and len(self._backends) >= self.max_backends:
            held = ", ".join(label for _, _, label in self._backends.values())
            raise TooManyBackends(
                f"cannot load {_label(spec)}: this server keeps at most {self.max_backends} "
                f"judge model(s) loaded and holds {held}; use one of them (judge configs that "
                f"differ only in mode share a model) or raise {self.limit_name}"
            )

    def close_all(self) -> None:
        with self._lock:
            for backend, _, _ in self._backends.values():
                try:
                    backend.close()
                except Exception as err:  # shutting down: report and go on
                    log.warning("closing %s: %s", backend.name, err)
            self._backends.clear()


def _label(spec: Any) -> str:
    name = getattr(spec, "name", None)
    model = spec.model or "the embedded model"
    return f"judge {name!r} ({spec.backend}, {model})" if name else f"{spec.backend}, {model}"
