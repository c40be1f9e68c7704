"""Tool environments for multi-turn GRPO rollouts (``environment:`` in a training config).

Importing this package registers the built-in ``deepresearch`` environment
(``trainer.environments.deepresearch``); plugins register theirs through
``rubricsvc.ext.register_environment``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rubricsvc.environments import register_environment
from trainer.environments.deepresearch import DeepResearchEnv, deepresearch_factory
from trainer.environments.rollouts import Rollout, rollout


def deepresearch_rollout(messages: Sequence[dict[str, Any]], instance: Any) -> Rollout:
    if not isinstance(instance, DeepResearchEnv):
        raise TypeError(f"expected a DeepResearchEnv, got {type(instance).__name__}")
    return rollout(messages, instance.record)


register_environment("deepresearch", deepresearch_factory, deepresearch_rollout)
