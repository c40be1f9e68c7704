"""Plugins: modules that register verdict modes (``judging.modes.register_mode``) or anything
else the platform looks up by name, when they are imported.

A process loads them once, at its boundary (a CLI command, the API app, a worker, the trainer's
launcher), before it reads a judge config: the modules named in ``RUBRICSVC_PLUGINS`` (comma
separated), then those an installed package declares under the entry-point group
``rubricsvc.plugins``. Every process that judges with a plugin's mode must load it, workers
included, so the setting belongs in the environment they all share.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from importlib.metadata import entry_points

from rubricsvc.errors import ValidationFailed, first_line

ENTRY_POINT_GROUP = "rubricsvc.plugins"


def load_plugins(names: Sequence[str]) -> list[str]:
    """Import the plugin modules ``names`` and the installed entry points; their names, in the
    order loaded. A plugin that cannot be imported stops the process with one line saying
    which and why (judging on without its mode would refuse every judge that names it)."""
    loaded: list[str] = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as err:
            raise ValidationFailed(
                f"cannot load plugin {name!r} (RUBRICSVC_PLUGINS): {first_line(err)}"
            ) from None
        loaded.append(name)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except Exception as err:
            raise ValidationFailed(
                f"cannot load plugin {point.name!r} ({point.value}, entry point of "
                f"{ENTRY_POINT_GROUP}): {first_line(err)}"
            ) from None
        loaded.append(point.value)
    return loaded
