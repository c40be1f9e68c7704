"""Score recorded rollouts of the ``rubric-env`` taskset with verifiers' own scoring, offline.

Each line of ROLLOUTS is {prompt_id, reply, group}. Per rollout, the task's rewards run as a
verifiers rollout runs them (``Task.score`` inside verifiers' scoring boundary; a failure is
recorded on the trace, which is then not ok: verifiers' rule for a judge that gives no
verdict). With ``--groups``, the rollouts of each group are also rewarded as one group by the
``rubric-group`` environment's ``finalize`` (inside verifiers' episode boundary: a failure
fails the episode). Prints one JSON object: each rollout's rewards and error, each group's.

From the repository root, in the environment that holds verifiers (``make verifiers-env``)::

    PYTHONPATH=.:examples/verifiers .venv-verifiers/bin/python \\
        examples/verifiers/score_rollouts.py ROLLOUTS --base-url http://127.0.0.1:8000 \\
        --judge embedded --groups
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from rubric_env import RubricTaskset, RubricTasksetConfig
from rubric_group import RubricGroupEnv, RubricGroupEnvConfig
from verifiers.v1.errors import EnvError, TaskError, boundary

from trainer.adapters.verifiers_rubric import RubricsvcSettings, RubricTaskConfig


def trace_of(task: vf.Task, reply: str) -> vf.Trace:
    """A finished rollout of ``task`` whose reply is ``reply`` (what a harness run leaves)."""
    return vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        root_reply=reply,
        is_completed=True,
        ok=True,
    )


async def score_rollout(task: vf.Task, reply: str) -> vf.Trace:
    """The rollout's task rewards, as ``Rollout.close`` runs them: a failure is the trace's."""
    trace = trace_of(task, reply)
    try:
        async with boundary(TaskError, "scoring"):
            await task.score(trace)
    except Exception as error:  # verifiers records every scoring failure on the trace
        trace.record_error(error)
        trace.ok = False
    return trace


async def score_group(env: RubricGroupEnv, task: vf.Task, replies: list[str]) -> vf.Episode:
    """The group's rewards, as ``Env.run_episode`` runs ``finalize``: a failure is the
    episode's."""
    episode = vf.Episode(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        traces=[trace_of(task.defer_scoring(), reply) for reply in replies],
    )
    try:
        async with boundary(EnvError, f"{type(env).__name__}.finalize()"):
            await env.finalize(task, episode)
    except Exception as error:  # verifiers records every finalize failure on the episode
        episode.errors.append(vf.Error(type=type(error).__name__, message=str(error)))
        return episode
    episode.ok = all(trace.ok for trace in episode.traces)
    return episode


def summary(trace: vf.Trace) -> dict[str, Any]:
    return {
        "ok": trace.ok,
        "reward": trace.reward if trace.ok else None,
        "rewards": {k: (v.score if v is not None else None) for k, v in trace.rewards.items()},
        "error": trace.last_error.message if trace.last_error else None,
        "rubricsvc": trace.info.get("rubricsvc"),
    }


async def main(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rollouts", type=Path)
    parser.add_argument("--tasks", type=Path, default=None)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--judge", default="embedded")
    parser.add_argument("--aggregation", default="rar")
    parser.add_argument("--source", default="verifiers")
    parser.add_argument("--groups", action="store_true")
    args = parser.parse_args(argv)
    settings = RubricsvcSettings(
        base_url=args.base_url, judge=args.judge, aggregation=args.aggregation, source=args.source
    )
    config = RubricTasksetConfig(id="rubric-env", task=RubricTaskConfig(rubricsvc=settings))
    if args.tasks is not None:
        config.path = args.tasks
    tasks = {task.data.prompt_id: task for task in RubricTaskset(config)}
    rollouts = [
        json.loads(line)
        for line in args.rollouts.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    traces = await asyncio.gather(
        *(score_rollout(tasks[r["prompt_id"]], r["reply"]) for r in rollouts)
    )
    answer: dict[str, Any] = {"rollouts": [summary(t) for t in traces]}
    if args.groups:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for rollout in rollouts:
            groups[rollout["group"]].append(rollout)
        env = RubricGroupEnv(RubricGroupEnvConfig(taskset=config, n=2))
        answer["groups"] = {}
        for name, members in groups.items():
            task = tasks[members[0]["prompt_id"]]
            episode = await score_group(env, task, [m["reply"] for m in members])
            answer["groups"][name] = {
                "ok": episode.ok,
                "error": episode.last_error.message if episode.last_error else None,
                "rollouts": [summary(t) for t in episode.traces],
            }
    return answer


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))))
