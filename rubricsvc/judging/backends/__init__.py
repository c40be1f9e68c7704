"""Judge backends, chosen by name; each module imports its heavy dependencies only when used."""

from __future__ import annotations

import importlib
from pathlib import Path
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
    # Verdicts imported from a data set: replayed from the store, never asked for new ones.
    "imported": ("rubricsvc.judging.backends.imported", "ImportedBackend"),
}


# Backends that run the embedded model when given no model: they take the folder it is kept in.
EMBEDDED_MODEL_BACKENDS = frozenset({"transformers", "vllm", "faulty"})


def create_backend(
    name: str, *, model_dir: str | Path | None = None, **options: Any
) -> JudgeBackend:
    """An instance of backend ``name`` configured with ``options`` (see each backend's class);
    ``model_dir`` is where the embedded model is kept (``RUBRICSVC_JUDGE_MODEL_DIR``), for
    the backends that can run it."""
    try:
        module_name, class_name = BACKENDS[name]
    except KeyError:
        raise ValidationFailed(
            f"unknown judge backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}"
        ) from None
    backend_class = getattr(importlib.import_module(module_name), class_name)
    if model_dir is not None and name in EMBEDDED_MODEL_BACKENDS:
        options["model_dir"] = model_dir
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


def backend_from_spec(spec: BackendChoice, model_dir: str | Path | None = None) -> JudgeBackend:
    """The backend ``spec`` names, configured with its model and options (``model_dir``: see
    ``create_backend``)."""
    options = dict(spec.backend_options)
    if spec.model is not None:
        options["model"] = spec.model
    return create_backend(spec.backend, model_dir=model_dir, **options)


__all__ = [
    "BACKENDS",
    "BackendChoice",
    "BackendError",
    "ContextLengthError",
    "JudgeBackend",
    "backend_from_spec",
    "create_backend",
]
