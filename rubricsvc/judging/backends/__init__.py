"""Judge backends, chosen by name; each module imports its heavy dependencies only when used."""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.backends.base import BackendError, ContextLengthError, JudgeBackend

# name -> (module, class). Modules are imported on first use.
BACKENDS: dict[str, tuple[str, str]] = {
    "transformers": ("rubricsvc.judging.backends.transformers", "TransformersBackend"),
    "vllm": ("rubricsvc.judging.backends.vllm", "VLLMBackend"),
    "openai": ("rubricsvc.judging.backends.openai", "OpenAIBackend"),
    "scripted": ("rubricsvc.judging.backends.scripted", "ScriptedBackend"),
    # Wraps another backend, failing a share of its requests at random (tests of failures).
    "faulty": ("rubricsvc.judging.backends.faulty", "FaultyBackend"),
}


def create_backend(name: str, **options: Any) -> JudgeBackend:
    """An instance of backend ``name`` configured with ``options`` (see each backend's class)."""
    if name == "imported":
        raise ValidationFailed(
            "this judge holds verdicts imported from a data set and cannot judge new content; "
            "select only imported completions (e.g. --source) or use another judge"
        )
    try:
        module_name, class_name = BACKENDS[name]
    except KeyError:
        raise ValidationFailed(
            f"unknown judge backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}"
        ) from None
    backend_class = getattr(importlib.import_module(module_name), class_name)
    backend: JudgeBackend = backend_class(**options)
    return backend


class BackendChoice(Protocol):
    """A config that names a backend: a judge spec, a generator spec."""

    @property
    def backend(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    @property
    def backend_options(self) -> dict[str, Any]: ...


def backend_from_spec(spec: BackendChoice) -> JudgeBackend:
    """The backend ``spec`` names, configured with its model and options."""
    options = dict(spec.backend_options)
    if spec.model is not None:
        options["model"] = spec.model
    return create_backend(spec.backend, **options)


__all__ = [
    "BACKENDS",
    "BackendChoice",
    "BackendError",
    "ContextLengthError",
    "JudgeBackend",
    "backend_from_spec",
    "create_backend",
]
