"""Verdict modes by name: the built-in ones and any a plugin registers.

What a mode can do is declared on the mode (``base.VerdictModeImpl``: ``compares``,
``gives_probability``, ``per_criterion``, ``judges_pairs``, ``decodes``); code elsewhere asks
the registry (``get_mode(name).gives_probability``, ``modes_that(...)``) and never compares a
mode's name.
"""

from __future__ import annotations

from rubricsvc.capabilities import names_with
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.modes.base import VerdictModeImpl

_MODES: dict[str, VerdictModeImpl] = {}

# The yes-or-no capabilities every mode declares.
CAPABILITIES = ("compares", "gives_probability", "per_criterion", "judges_pairs", "decodes")


def register_mode(mode: VerdictModeImpl) -> VerdictModeImpl:
    """Make ``mode`` known by its name (a name registered again is replaced)."""
    if not mode.name:
        raise ValueError(f"a verdict mode needs a name: {mode!r}")
    undeclared = [c for c in CAPABILITIES if not isinstance(getattr(mode, c, None), bool)]
    if undeclared:
        raise TypeError(
            f"verdict mode {mode.name!r} must declare {', '.join(undeclared)} (True or False)"
        )
    _MODES[mode.name] = mode
    return mode


def mode_names() -> list[str]:
    """Every registered mode's name, in registration order (the built-in ones first)."""
    return list(_MODES)


def check_mode_name(name: str) -> str:
    """``name`` if a mode is registered under it; otherwise an error listing the names."""
    if name not in _MODES:
        raise ValidationFailed(
            f"unknown verdict mode {name!r}; choose one of {', '.join(mode_names())}"
        )
    return name


def get_mode(name: str) -> VerdictModeImpl:
    """The mode registered as ``name``."""
    return _MODES[check_mode_name(name)]


def modes_that(
    *,
    compares: bool | None = None,
    gives_probability: bool | None = None,
    per_criterion: bool | None = None,
    judges_pairs: bool | None = None,
    decodes: bool | None = None,
) -> list[str]:
    """The names of the registered modes with each capability given as asked, sorted (for
    messages that list them)."""
    wanted = {
        "compares": compares,
        "gives_probability": gives_probability,
        "per_criterion": per_criterion,
        "judges_pairs": judges_pairs,
        "decodes": decodes,
    }
    return names_with(_MODES, wanted)
