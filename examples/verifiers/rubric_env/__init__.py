"""A verifiers taskset rewarded by rubric rewards (taskset id ``rubric-env``).

Each line of ``tasks.jsonl`` (or the file ``--env.taskset.path`` names) is a task
{prompt_id, prompt}: the policy answers the prompt, and the reward ``rubric`` is its rubric
reward from rubricsvc's reward API (``trainer/adapters/verifiers_rubric.py``). With the
rubrics of ``rubrics.yaml`` approved and ``rubricsvc serve`` running (its key in
``RUBRICSVC_REWARD_API_KEY``), from the repository root::

    PYTHONPATH=.:examples/verifiers vf-eval rubric-env \\
        --env.taskset.task.rubricsvc.base-url http://127.0.0.1:8000 \\
        --env.taskset.task.rubricsvc.judge embedded

Group rewards (one request per group of rollouts): add ``--env.id rubric-group``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import verifiers.v1 as vf

from trainer.adapters.verifiers_rubric import RubricTask, RubricTaskConfig, RubricTaskData

__all__ = ["RubricTaskset", "RubricTasksetConfig"]

TASKS = Path(__file__).resolve().parents[1] / "tasks.jsonl"


class RubricTasksetConfig(vf.TasksetConfig):
    path: Path = TASKS
    """JSON Lines of tasks: {prompt_id, prompt}."""
    task: RubricTaskConfig = RubricTaskConfig()


class RubricTaskset(vf.Taskset[RubricTask, RubricTasksetConfig]):
    def load(self) -> Iterator[RubricTask]:
        for line in self.config.path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                data = RubricTaskData(id=row["prompt_id"], **row)
                yield RubricTask(data, self.config.task)
