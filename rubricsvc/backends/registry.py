"""Judge backends by name: the built-in ones and any a plugin registers, each with what it can do.

A backend is registered with its factory and its capabilities; code elsewhere asks these
questions of the registry and never compares a backend's name. A built-in backend registers
its factory as ``"module:Class"``, so its heavy dependencies are imported only when it is made;
a plugin may register the class (or any callable taking the options) itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rubricsvc.backends.base import JudgeBackend
from rubricsvc.capabilities import names_with
from rubricsvc.errors import ValidationFailed

# What makes a backend: called with the judge's options (and ``model`` when the judge names
# one), it returns the backend. A class is one.
BackendFactory = Callable[..., JudgeBackend]


@dataclass(frozen=True)
class RegisteredBackend:
    """A backend as registered: its factory and the capabilities other modules ask about."""

    name: str
    # The factory, or ``"module:attribute"`` naming it (imported on first use).
    factory: BackendFactory | str
    # Runs the embedded model when given no model, so it takes the folder the model is kept in
    # (``model_dir``, from ``RUBRICSVC_JUDGE_MODEL_DIR``).
    runs_embedded_model: bool = False
    # Loads a judge's ``model`` (a folder or a hub id) in this process: the same model and
    # revision are the same weights in every such backend, so a promotion gate on one holds
    # for the others.
    loads_model_in_process: bool = False
    # Only replays verdicts stored for it (imported from a data set): it never judges, so
    # nothing asks it for new verdicts.
    replays_only: bool = False
    # Takes ``device`` and ``dtype`` options (``placement``): hashed as they resolve on the
    # machine that hashes (never ``auto``), since precision changes verdicts.
    places_model: bool = False
    # Applies a judge's LoRA ``adapter`` (a folder) to its model; a judge with an adapter is
    # refused by every other backend, which would serve the base without it.
    takes_adapter: bool = False
    # Options that change speed or plumbing but never a verdict: not hashed into a config.
    operational_options: frozenset[str] = frozenset()

    def load(self) -> BackendFactory:
        """The factory, imported now if it was registered by name."""
        if not isinstance(self.factory, str):
            return self.factory
        module_name, _, attribute = self.factory.partition(":")
        made: BackendFactory = getattr(importlib.import_module(module_name), attribute)
        return made


_BACKENDS: dict[str, RegisteredBackend] = {}


def register_backend(
    name: str,
    factory: BackendFactory | str,
    *,
    runs_embedded_model: bool = False,
    loads_model_in_process: bool = False,
    replays_only: bool = False,
    places_model: bool = False,
    takes_adapter: bool = False,
    operational_options: Iterable[str] = (),
) -> RegisteredBackend:
    """Make a backend known as ``name`` (a name registered again is replaced). ``factory`` is
    a class or callable taking the judge's options, or ``"module:attribute"`` naming one (so
    nothing is imported until a judge uses the backend); the keywords declare its capabilities
    (see ``RegisteredBackend``)."""
    if not name:
        raise ValueError(f"a judge backend needs a name: {factory!r}")
    if isinstance(factory, str) and not all(factory.partition(":")[::2]):
        raise ValueError(f"a backend factory by name is 'module:attribute', not {factory!r}")
    registered = RegisteredBackend(
        name,
        factory,
        runs_embedded_model=runs_embedded_model,
        loads_model_in_process=loads_model_in_process,
        replays_only=replays_only,
        places_model=places_model,
        takes_adapter=takes_adapter,
        operational_options=frozenset(operational_options),
    )
    _BACKENDS[name] = registered
    return registered


def backend_names() -> list[str]:
    """Every registered backend's name, in registration order (the built-in ones first)."""
    return list(_BACKENDS)


def find_backend(name: str) -> RegisteredBackend | None:
    """The backend registered as ``name``; None when none is (a jury, or a plugin's backend in
    a process that has not loaded the plugin)."""
    return _BACKENDS.get(name)


def get_backend(name: str) -> RegisteredBackend:
    """The backend registered as ``name``; otherwise an error listing the names."""
    registered = _BACKENDS.get(name)
    if registered is None:
        raise ValidationFailed(
            f"unknown judge backend {name!r}; choose one of {', '.join(sorted(_BACKENDS))}"
        )
    return registered


def backends_that(
    *,
    runs_embedded_model: bool | None = None,
    loads_model_in_process: bool | None = None,
    replays_only: bool | None = None,
) -> list[str]:
    """The names of the registered backends with each capability given as asked, sorted."""
    wanted = {
        "runs_embedded_model": runs_embedded_model,
        "loads_model_in_process": loads_model_in_process,
        "replays_only": replays_only,
    }
    return names_with(_BACKENDS, wanted)


def replays_only(name: str) -> bool:
    """Whether backend ``name`` only replays stored verdicts (False for a name not registered:
    it is refused when made)."""
    registered = _BACKENDS.get(name)
    return registered is not None and registered.replays_only


def operational_options() -> frozenset[str]:
    """Every option a registered backend declares operational. A config's hash leaves them all
    out whatever its backend: a backend that wraps another (``faulty``) passes its options on,
    and a config may name a backend this process has not registered, so the hash cannot ask
    the config's own backend."""
    return frozenset().union(*(b.operational_options for b in _BACKENDS.values()))


def places_model(name: str) -> bool:
    """Whether backend ``name`` takes ``device`` and ``dtype`` (False for a name not
    registered: its options are hashed as given)."""
    registered = _BACKENDS.get(name)
    return registered is not None and registered.places_model


def takes_adapter(name: str) -> bool:
    """Whether backend ``name`` applies a judge's LoRA adapter (False for a name not
    registered)."""
    registered = _BACKENDS.get(name)
    return registered is not None and registered.takes_adapter


def check_adapter_backend(judge: str, backend: str, adapter: str | None) -> None:
    """Refuse, in one line naming ``judge``, an adapter on a backend that cannot apply one."""
    if adapter is None or takes_adapter(backend):
        return
    takers = ", ".join(b for b in _BACKENDS if _BACKENDS[b].takes_adapter) or "none"
    raise ValidationFailed(
        f"judge {judge!r} has an adapter ({adapter}), which backend {backend!r} cannot apply: "
        f"serve it with a backend that takes one ({takers}), or merge it into a model folder"
    )


def hashed_backend_options(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """What a config's hash covers of backend ``name``'s ``options``: the operational ones
    left out (see ``operational_options``), and ``device`` and ``dtype`` resolved on this
    machine for a backend that places its model (``placement.hashed_options``)."""
    from rubricsvc.backends.placement import hashed_options

    operational = operational_options()
    kept = {k: v for k, v in sorted(options.items()) if k not in operational}
    return hashed_options(places_model(name), kept)


def make_backend(name: str, **options: Any) -> JudgeBackend:
    """An instance of backend ``name`` made with ``options``."""
    backend: JudgeBackend = get_backend(name).load()(**options)
    return backend
