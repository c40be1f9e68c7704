"""A verifiers environment that rewards each task's rollouts as one group (env id
``rubric-group``): ``n`` attempts at the task, their per-rollout rewards deferred, then one
request to rubricsvc for the whole group (``score_group``), which the server gathers and judges
together: what a judge that compares a group of rollouts, or an evolving rubric, needs.

Pair it with the ``rubric-env`` taskset: ``vf-eval rubric-env --env.id rubric-group``.
"""

from __future__ import annotations

import asyncio

import verifiers.v1 as vf
from pydantic import Field

from trainer.adapters.verifiers_rubric import score_group

__all__ = ["RubricGroupEnv", "RubricGroupEnvConfig"]


class RubricGroupEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()
    n: int = Field(4, ge=2)
    """Rollouts per group."""


class RubricGroupEnv(vf.Env[RubricGroupEnvConfig]):
    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        # Each attempt's own reward is deferred: the group's request rewards them all.
        async with asyncio.TaskGroup() as group:
            for _ in range(self.config.n):
                group.create_task(agents.agent.run(task.defer_scoring()))

    async def finalize(self, task: vf.Task, episode: vf.Episode) -> None:
        """The group's rubric rewards, one per finished rollout (an errored rollout has no
        reply to score); a reward rubricsvc masks fails the episode."""
        finished = [trace for trace in episode.traces if trace.ok]
        await score_group(
            task.config.rubricsvc, task.data, finished, episode.id, weight=task.config.weight
        )
