"""Tool environments a trainer runs rollouts in, by name (``environment:`` in a training config).

An environment is registered with two callables: ``factory(options)`` returns what TRL's
``GRPOTrainer(environment_factory=...)`` takes (a callable making one environment instance per
rollout, whose ``reset(**row)`` starts a rollout and whose public methods are its tools), and
``rollout(messages, instance)`` turns what the policy generated in that instance into the
rollout the platform stores and scores (``trainer.environments.rollouts.Rollout``: final
answer, trajectory, documents opened). The trainer registers ``deepresearch``; a plugin
registers its own through ``rubricsvc.ext.register_environment``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rubricsvc.errors import ValidationFailed

EnvironmentFactory = Callable[[dict[str, Any]], Callable[[], Any]]
RolloutReader = Callable[[Sequence[dict[str, Any]], Any], Any]


@dataclass(frozen=True)
class Environment:
    name: str
    factory: EnvironmentFactory
    rollout: RolloutReader


_ENVIRONMENTS: dict[str, Environment] = {}


def register_environment(name: str, factory: EnvironmentFactory, rollout: RolloutReader) -> None:
    """Make ``name`` usable as a training config's ``environment`` (a later registration of
    the same name replaces the earlier one)."""
    _ENVIRONMENTS[name] = Environment(name, factory, rollout)


def environment_names() -> list[str]:
    return sorted(_ENVIRONMENTS)


def find_environment(name: str) -> Environment:
    """The environment registered as ``name``; ValidationFailed naming the known ones."""
    found = _ENVIRONMENTS.get(name)
    if found is None:
        known = ", ".join(environment_names()) or "none"
        raise ValidationFailed(f"no environment named {name!r} (known: {known})")
    return found
