"""Reward groups behind `rubricsvc serve --workers 2`, a slow judge and a killed worker, driven
by OpenRLHF's own reward client (with its retries) and verl's adapter (uid groups).

Four prompts' groups of 4 are sent by OpenRLHF's ``SingleTurnAgentExecutor`` client, one
rollout per request, and four uid groups of 4 of one prompt by ``compute_score_async``
(verl's reward loop's function, over HTTP), all at once. The judge takes 1.5 s per batch. A
second into it one server worker is killed (SIGKILL): its connections drop, the clients
send again, and whatever that worker was judging is rolled back. Every rollout must be
answered with its own reward, every group hold exactly its rollouts (a retry never becomes a
member of its own), and every group be stored as judged once.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from rubricsvc.apikeys import create_key
from rubricsvc.db import make_engine, session_scope, upgrade
from rubricsvc.models import RewardGroupMember
from tests.helpers import approve_rubrics
from tests.integration.test_reward_groups_slow import slow_judge, times_judged
from tests.integration.test_trainer_rewards import _openrlhf_agent
from tests.servers import RubricsvcServer

SIZE = 4
PROMPTS = [f"gr-storm-{n}" for n in range(4)]
QUESTION = "Describe a storm."


def _rubric(external_id: str) -> dict[str, Any]:
    return {
        "name": f"gr/{external_id}",
        "prompt": {"external_id": external_id, "text": f"{QUESTION} ({external_id})"},
        "criteria": [{"text": "Mentions the wind", "weight": 1}],
    }


def _texts(group: str) -> list[str]:
    """Two rollouts that say "howl" (likely Yes), two that do not, each unique."""
    return [
        f"The wind {group}/{n} howled." if n % 2 == 0 else f"Calm {group}/{n}." for n in range(SIZE)
    ]


def _workers(supervisor: int) -> list[int]:
    """The server's worker processes: the supervisor's children that run the app."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == supervisor and b"resource_tracker" not in command:
            found.append(int(entry.name))
    return sorted(found)


@pytest.mark.slow  # 5-20 s here: left out of the inner loop (make test-fast), run by make test
@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_groups_hold_under_a_slow_judge_two_workers_and_a_killed_one(
    database: str,
    migrated_sqlite_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if database == "postgres":
        url = request.getfixturevalue("make_postgres_database")()
        upgrade(url)
    else:
        path = tmp_path / "served.sqlite"
        path.write_bytes(migrated_sqlite_template.read_bytes())
        url = f"sqlite:///{path}"
    record = tmp_path / "judged.jsonl"
    approve_rubrics(url, *[_rubric(p) for p in PROMPTS], judges=[slow_judge(record, delay=1.5)])
    engine = make_engine(url)
    with session_scope(engine) as session:
        key = create_key(session, "trainer", ["score"]).secret
    monkeypatch.setenv("RUBRICSVC_REWARD_API_KEY", key)
    server = RubricsvcServer(
        url,
        log_path=tmp_path / "serve.log",
        env={"RUBRICSVC_BROKER_URL": "", "RUBRICSVC_API_REWARD_GROUP_TIMEOUT_S": "120"},
        args=("--workers", "2"),
    )
    server.start()
    agent = _openrlhf_agent(monkeypatch)
    from trainer.adapters.verl import compute_score_async

    openrlhf = {p: _texts(p) for p in PROMPTS}
    verl = {f"uid-{n}": _texts(f"uid-{n}") for n in range(4)}
    executor = agent.SingleTurnAgentExecutor(
        remote_rm_url=f"{server.base_url}/v1/openrlhf/reward?api_key={key}"
        f"&judge=slow-judge&group_size={SIZE}"
    )

    async def one_openrlhf(label: str, text: str) -> float:
        (answer,) = await executor._fetch_rewards_via_http([QUESTION + text], [QUESTION], [label])
        return float(answer["rewards"][0])

    async def one_verl(uid: str, text: str) -> float:
        answer = await compute_score_async(
            "storms",
            text,
            PROMPTS[0],
            {"uid": uid},
            judge="slow-judge",
            via="http",
            base_url=server.base_url,
            group_size=SIZE,
        )
        return float(answer["score"])

    async def everything() -> list[float]:
        runs = [one_openrlhf(p, t) for p, texts in openrlhf.items() for t in texts]
        runs += [one_verl(u, t) for u, texts in verl.items() for t in texts]
        return list(await asyncio.gather(*runs))

    killed: list[int] = []

    def kill_one_worker() -> None:
        time.sleep(1.0)  # the first groups are being judged, the rest wait
        victim = _workers(server.process.pid)[0]  # type: ignore[union-attr]
        os.kill(victim, signal.SIGKILL)
        killed.append(victim)

    killer = threading.Thread(target=kill_one_worker)
    started = time.monotonic()
    try:
        killer.start()
        rewards = asyncio.run(everything())
        seconds = time.monotonic() - started
        killer.join()
    finally:
        server.stop()
    assert len(killed) == 1  # while the rollouts were in flight
    # No request was answered with an error (the clients' retries would hide one): the
    # requests the killed worker held were cut off, not answered.
    answered = re.findall(r'"POST [^"]+ HTTP/1\.1" (\d{3})', server.log_path.read_text())
    assert answered and set(answered) == {"200"}, sorted(set(answered))
    texts = [t for texts in [*openrlhf.values(), *verl.values()] for t in texts]
    # Every rollout answered with its own reward: "howled" likely Yes, the others not.
    for text, reward in zip(texts, rewards, strict=True):
        assert (reward > 0.5) == ("howled" in text), (text, reward)
    groups = [set(t) for t in [*openrlhf.values(), *verl.values()]]
    try:
        with session_scope(engine) as session:
            stored = session.execute(
                select(RewardGroupMember.request, RewardGroupMember.batch, RewardGroupMember.answer)
            ).all()
    finally:
        engine.dispose()
    # One row per rollout (no retry stored as a rollout), each answered, in one batch per group
    # that holds exactly that group's rollouts.
    assert sorted(r["completion"] for r, _, _ in stored) == sorted(texts)
    assert all(answer is not None and "error" not in answer for _, _, answer in stored)
    by_batch: dict[str, set[str]] = {}
    for asked, batch, _ in stored:
        by_batch.setdefault(batch, set()).add(asked["completion"])
    assert sorted(map(sorted, by_batch.values())) == sorted(map(sorted, groups))
    # Judged once each; a group the killed worker was judging was rolled back and judged
    # again, every member alike.
    again = 0
    for group in groups:
        counts = {times_judged(record, text) for text in group}
        assert counts in ({1}, {2}), (group, counts)
        again += counts == {2}
    print(
        f"\n{database}: {len(groups)} groups, {len(texts)} rollouts, {seconds:.1f} s, "
        f"worker {killed[0]} killed, {again} group(s) judged again after the kill"
    )
