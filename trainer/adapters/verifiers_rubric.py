"""verifiers (PrimeIntellect's environments, ``verifiers==0.4``) rewarded by rubric rewards.

verifiers 0.4 scores a rollout with a task's ``@vf.reward`` methods (weighted, summed into the
trace's reward) and judges a group of rollouts in an ``Env``'s ``finalize``. This module gives
both, over rubricsvc's reward API (``POST /v1/rewards``, a ``rubricsvc serve``):

- ``RubricTask``: a ``vf.Task`` whose reward ``rubric`` is the rollout's rubric reward: its
  task's prompt (``prompt_id``, a prompt's external id, else the prompt itself) and the
  rollout's last reply, scored by the judge and aggregation of ``RubricTaskConfig.rubricsvc``
  (``RubricsvcSettings``);
- ``score_group``: a group of rollouts of one task in one request, gathered by the server as
  one group (``group_size``: for judges that compare a group, and evolving rubrics), each
  trace given its reward; an ``Env`` calls it from ``finalize`` (examples/verifiers/).

Failures follow verifiers' rule, "an invalid verdict fails the rollout, never a silent 0":
where rubricsvc masks a reward (judge or infrastructure failures below the coverage floor, or
no usable rubric) or cannot answer, ``RubricRewardUnavailable`` is raised, and verifiers
records it on the trace as a task error (per rollout; on a group, ``finalize`` fails the
episode). A failure the response provoked (it overflows the judge, or breaks it where the
judge answers without it) is charged by rubricsvc at the criteria's worst values: a reward
like any other, so a policy cannot escape its rubric by breaking the judge.

It imports nothing of the platform beyond ``trainer.retrying``: it runs in verifiers'
environment (which pins other versions of libraries the platform uses: ``make
verifiers-env`` makes ``.venv-verifiers``), with the repository on ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import httpx
import verifiers.v1 as vf
from pydantic import BaseModel, Field

from trainer.retrying import next_wait

REWARDS_ROUTE = "/v1/rewards"
REWARD_NAME = "rubric"


class RubricsvcSettings(BaseModel):
    """Where and how rewards are scored: the reward API's body fields, and the client's."""

    base_url: str = "http://127.0.0.1:8000"
    api_key_env: str | None = "RUBRICSVC_REWARD_API_KEY"  # the variable holding the key
    judge: str = "embedded"
    mode: str | None = None  # a verdict mode; None: the judge's own
    aggregation: str = "rar"
    min_coverage: float | None = Field(default=None, ge=0, le=1)  # None: the server's default
    include_drafts: bool | None = None
    rubric: str | None = None  # one rubric version (REF) for every rollout; None: the prompt's
    source: str = "verifiers"  # the stored completions' source
    timeout: float = Field(default=600.0, gt=0)  # seconds per request
    retries: int = Field(default=3, ge=0)  # after a connection error, a time-out, 429 or 5xx
    retry_backoff: float = Field(default=1.0, ge=0)


class RubricRewardUnavailable(RuntimeError):
    """rubricsvc gave no reward: the rollout must not be scored (verifiers records this as the
    rollout's error, never a 0)."""


def rollout_item(data: Any, reply: str) -> dict[str, Any]:
    """A reward item: the rollout's reply to its task's prompt (by external id when the task
    names one, else the prompt itself, found by the hash of its messages)."""
    item: dict[str, Any] = {"completion": reply}
    prompt_id = getattr(data, "prompt_id", None)
    if prompt_id:
        item["prompt_id"] = str(prompt_id)
        return item
    prompt = data.prompt
    if prompt is None:
        raise RubricRewardUnavailable("the task has neither a prompt_id nor a prompt to score")
    if isinstance(prompt, str):
        item["prompt"] = prompt
    else:
        item["prompt"] = [
            {"role": message.role, "content": vf.types.content_text(message.content)}
            for message in prompt
        ]
    return item


def body(settings: RubricsvcSettings, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {
        "items": list(items),
        "judge": settings.judge,
        "aggregation": settings.aggregation,
        "source": settings.source,
    }
    for name in ("mode", "min_coverage", "include_drafts"):
        value = getattr(settings, name)
        if value is not None:
            found[name] = value
    if settings.rubric is not None:
        for item in found["items"]:
            item.setdefault("rubric", settings.rubric)
    return found


async def request_rewards(
    settings: RubricsvcSettings,
    items: Sequence[dict[str, Any]],
    group_size: int | None = None,
) -> list[dict[str, Any]]:
    """``POST /v1/rewards`` for ``items``: one result each (``reward`` null where masked).
    Retried after what another try can fix; any other refusal raises."""
    payload = body(settings, items)
    if group_size is not None:
        payload["group_size"] = group_size
    headers = {}
    key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    url = settings.base_url.rstrip("/") + REWARDS_ROUTE
    async with httpx.AsyncClient(timeout=settings.timeout, trust_env=False) as client:
        attempt = 0
        while True:
            response = error = None
            try:
                response = await client.post(url, json=payload, headers=headers)
            except httpx.TransportError as failed:
                error = failed
            try:
                wait = next_wait(
                    url, attempt, settings.retries, settings.retry_backoff, response, error
                )
            except Exception as failed:  # the last try could not connect
                raise RubricRewardUnavailable(str(failed)) from None
            if wait is None:
                break
            await asyncio.sleep(wait)
            attempt += 1
    assert response is not None
    if response.status_code != 200:
        raise RubricRewardUnavailable(f"POST {url}: {response.status_code} {response.text[:500]}")
    results: list[dict[str, Any]] = response.json()["results"]
    if len(results) != len(items):
        raise RubricRewardUnavailable(f"POST {url}: {len(results)} results for {len(items)} items")
    return results


def reward_of(result: dict[str, Any]) -> float:
    """The result's reward, or ``RubricRewardUnavailable`` naming why there is none."""
    reward = result.get("reward")
    if reward is None:
        failures = result.get("failures") or {}
        reasons = "; ".join(result.get("reasons") or []) or "no reason given"
        raise RubricRewardUnavailable(
            f"rubricsvc masked the reward (status {result.get('status')}: {reasons}; failed "
            f"judgments by class {failures})"
        )
    return float(reward)


def record(trace: Any, result: dict[str, Any]) -> None:
    """What the reward was made of, on the trace (verifiers' scratch space ``info``)."""
    trace.info.setdefault("rubricsvc", []).append(
        {
            key: result.get(key)
            for key in ("reward", "status", "coverage", "rubric", "completion_id", "failures")
        }
    )


class RubricTaskData(vf.TaskData):  # type: ignore[misc]
    """A task whose prompt rubricsvc knows by external id (or finds by its messages)."""

    prompt_id: str | None = None


class RubricTaskConfig(vf.TaskConfig):  # type: ignore[misc]
    rubricsvc: RubricsvcSettings = RubricsvcSettings()
    weight: float = 1.0  # of the rubric reward in the trace's reward


class RubricTask(vf.Task[RubricTaskData, vf.State, RubricTaskConfig]):  # type: ignore[misc]
    """A single-reply task rewarded by its rubric: the reward ``rubric``."""

    @vf.reward  # type: ignore[untyped-decorator]
    async def rubric(self, trace: Any) -> float:
        (result,) = await request_rewards(
            self.config.rubricsvc, [rollout_item(self.data, trace.last_reply)]
        )
        record(trace, result)
        return reward_of(result)


async def score_group(
    settings: RubricsvcSettings,
    data: Any,
    traces: Sequence[Any],
    group: str,
    weight: float = 1.0,
    name: str = REWARD_NAME,
) -> list[float]:
    """Reward ``traces`` (rollouts of the task ``data``) as one group ``group``: one request,
    the server gathering them before it judges (a judge that compares a group sees them all).
    Each trace gets the reward ``name``; any reward rubricsvc masks raises before any is
    recorded (the episode fails, as verifiers' ``finalize`` rule asks: never a guess)."""
    items = [{**rollout_item(data, trace.last_reply), "group": group} for trace in traces]
    size = len(items) if len(items) >= 2 else None
    results = await request_rewards(settings, items, group_size=size)
    rewards = [reward_of(result) for result in results]
    for trace, result, reward in zip(traces, results, rewards, strict=True):
        record(trace, result)
        trace.record_reward(name, reward, weight)
    return rewards
