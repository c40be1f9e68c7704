"""Verdict modes by name: the built-in ones and any a plugin registers."""

from __future__ import annotations

from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.modes.base import VerdictModeImpl

_MODES: dict[str, VerdictModeImpl] = {}


def register_mode(mode: VerdictModeImpl) -> VerdictModeImpl:
    """Make ``mode`` known by its name (a name registered again is replaced)."""
    if not mode.name:
        raise ValueError(f"a verdict mode needs a name: {mode!r}")
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
