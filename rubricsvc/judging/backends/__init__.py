"""Judge backends, chosen by name; each module imports its heavy dependencies only when used."""

from __future__ import annotations

import importlib
from typing import Any

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


__all__ = ["BACKENDS", "BackendError", "ContextLengthError", "JudgeBackend", "create_backend"]
