"""Judge backends, chosen by name from one registry (``registry.py``); each built-in module
imports its heavy dependencies only when used."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from rubricsvc.backends.base import BackendError, ContextLengthError, JudgeBackend
from rubricsvc.backends.registry import (
    BackendFactory,
    RegisteredBackend,
    backend_names,
    backends_that,
    check_adapter_backend,
    find_backend,
    get_backend,
    hashed_backend_options,
    make_backend,
    operational_options,
    places_model,
    register_backend,
    replays_only,
    takes_adapter,
)

# The built-in backends, registered as a plugin's are; their modules are imported on first use.
register_backend(
    "transformers",
    "rubricsvc.backends.transformers:TransformersBackend",
    runs_embedded_model=True,
    loads_model_in_process=True,
    places_model=True,
    takes_adapter=True,
    operational_options=("batch_size", "prefix_reuse", "threads", "token_budget"),
)
register_backend(
    "vllm",
    "rubricsvc.backends.vllm:VLLMBackend",
    runs_embedded_model=True,
    loads_model_in_process=True,
    operational_options=("kv_cache_memory_bytes", "enforce_eager", "enable_prefix_caching"),
)
register_backend(
    "openai",
    "rubricsvc.backends.openai:OpenAIBackend",
    operational_options=("api_key_env", "max_concurrency", "timeout"),
)
register_backend("scripted", "rubricsvc.backends.scripted:ScriptedBackend")
# Wraps another backend, failing a share of its requests at random (tests of failures); it
# passes the embedded model's folder on to the backend it wraps.
register_backend("faulty", "rubricsvc.backends.faulty:FaultyBackend", runs_embedded_model=True)
# Verdicts imported from a data set: replayed from the store, never asked for new ones.
register_backend("imported", "rubricsvc.backends.imported:ImportedBackend", replays_only=True)


def create_backend(
    name: str, *, model_dir: str | Path | None = None, **options: Any
) -> JudgeBackend:
    """An instance of backend ``name`` configured with ``options`` (see each backend's class);
    ``model_dir`` is where the embedded model is kept (``RUBRICSVC_JUDGE_MODEL_DIR``), for
    the backends that can run it."""
    if model_dir is not None and get_backend(name).runs_embedded_model:
        options["model_dir"] = model_dir
    return make_backend(name, **options)


class BackendChoice(Protocol):
    """A config that names a backend: a judge spec, a generator spec."""

    @property
    def backend(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    @property
    def backend_options(self) -> dict[str, Any]: ...


def backend_from_spec(spec: BackendChoice, model_dir: str | Path | None = None) -> JudgeBackend:
    """The backend ``spec`` names, configured with its model, adapter and options
    (``model_dir``: see ``create_backend``). A judge's adapter on a backend that cannot apply
    one is refused: served without it, the base would answer under the adapter's config hash."""
    options = dict(spec.backend_options)
    if spec.model is not None:
        options["model"] = spec.model
    adapter = getattr(spec, "adapter", None)  # a judge's; a generator has none
    check_adapter_backend(str(getattr(spec, "name", "")), spec.backend, adapter)
    if adapter is not None:
        options["adapter"] = adapter
    return create_backend(spec.backend, model_dir=model_dir, **options)


__all__ = [
    "BackendChoice",
    "BackendError",
    "BackendFactory",
    "ContextLengthError",
    "JudgeBackend",
    "RegisteredBackend",
    "backend_from_spec",
    "backend_names",
    "backends_that",
    "check_adapter_backend",
    "create_backend",
    "find_backend",
    "get_backend",
    "hashed_backend_options",
    "make_backend",
    "operational_options",
    "places_model",
    "register_backend",
    "replays_only",
    "takes_adapter",
]
