"""Reward groups under a slow judge, concurrent callers and several clients (``scoring.groups``):
waiting callers never fail for a group being judged, a group whose judging outlasts the
stale-claim bound is judged once, a masked member is filled with its group's mean, clients
never share a group, and a retry of a rollout whose caller is gone takes its row over.

The judge is scripted with a delay (seconds per batch, as a real model's) and records every
chat it is shown, so that how often each rollout was judged is counted, not assumed."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from rubricsvc.apikeys import create_key
from rubricsvc.db import make_engine, session_scope
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.models import RewardGroupMember
from rubricsvc.models.base import utcnow
from rubricsvc.scoring.group_callers import Callers
from tests.api_harness import api_client, bearer
from tests.helpers import approve_rubrics

PROMPT = "Describe a storm."
STORM = {
    "name": "gr/storm",
    "prompt": {"external_id": "gr-storm", "text": PROMPT},
    "criteria": [{"text": "Mentions the wind", "weight": 1}],
}


def slow_judge(record: Path, delay: float, name: str = "slow-judge") -> JudgeSpec:
    """A judge that takes ``delay`` seconds per batch, likely "Yes" for a response with
    "howl", and appends every chat it is shown to ``record``."""
    return JudgeSpec(
        name=name,
        backend="scripted",
        mode=VerdictMode.CRITERION_PROB,
        backend_options={"yes_if_contains": "howl", "delay": delay, "record_to": str(record)},
    )


def times_judged(record: Path, text: str) -> int:
    """How many chats the judge was shown that hold ``text``."""
    if not record.exists():
        return 0
    return sum(1 for line in record.read_text().splitlines() if text in line)


def item(text: str, group: str = "g") -> dict[str, Any]:
    return {"prompt_id": "gr-storm", "completion": text, "group": group}


def all_at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Each call on a thread of its own, all started together; their answers in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result() for future in futures]


def rows(url: str) -> list[RewardGroupMember]:
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            found = list(session.scalars(select(RewardGroupMember).order_by(RewardGroupMember.id)))
            session.expunge_all()
            return found
    finally:
        engine.dispose()


def post_one(client: TestClient, auth: dict[str, str], size: int, **body: Any) -> Callable[[], Any]:
    def call() -> Any:
        return client.post(
            "/v1/rewards",
            json={"judge": "slow-judge", "group_size": size, **body},
            headers=auth,
        )

    return call


@pytest.mark.slow  # 5-20 s here: left out of the inner loop (make test-fast), run by make test
def test_waiting_callers_of_slow_groups_on_sqlite_are_all_answered_and_never_mixed(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Two groups of 4, one rollout per request, with a judge that takes 6 s per batch (past
    SQLite's 5 s busy timeout): the second group's rollouts come while the first is judged.
    Every caller is answered 200, each group is judged once, in a batch of its own."""
    record = tmp_path / "judged.jsonl"
    approve_rubrics(sqlite_url, judges=[slow_judge(record, delay=6.0)])
    first = [f"Wind {n} howled." for n in range(4)]
    second = [f"Rain {n} fell." for n in range(4)]
    with api_client(sqlite_url, [STORM], reward_group_timeout_s=60) as (client, keys):
        auth = bearer(keys["score"])

        def late(text: str) -> Callable[[], Any]:
            def call() -> Any:
                time.sleep(2.0)  # the first group is being judged by now
                return post_one(client, auth, 4, items=[item(text)])()

            return call

        answers = all_at_once(
            [post_one(client, auth, 4, items=[item(t)]) for t in first] + [late(t) for t in second]
        )
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json()["results"][0]["group_status"] == "complete"
    for text in first + second:
        assert times_judged(record, text) == 1, text
    batches = {row.request["completion"]: row.batch for row in rows(sqlite_url)}
    assert len({batches[t] for t in first}) == 1
    assert len({batches[t] for t in second}) == 1
    assert batches[first[0]] != batches[second[0]]


def test_a_group_judged_for_longer_than_the_stale_bound_is_judged_once(
    database_url: str, tmp_path: Path
) -> None:
    """A judge that takes 3 s, a stale-claim bound of 1 s: the caller that judges the group
    still works, so its claim holds; the other caller waits for its answer."""
    record = tmp_path / "judged.jsonl"
    approve_rubrics(database_url, judges=[slow_judge(record, delay=3.0)])
    texts = ["Wind howled.", "Calm air."]
    with api_client(
        database_url, [STORM], reward_group_timeout_s=30, reward_group_stale_claim_s=1
    ) as (client, keys):
        auth = bearer(keys["score"])
        answers = all_at_once([post_one(client, auth, 2, items=[item(t)]) for t in texts])
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json()["results"][0]["group_status"] == "complete"
    assert [times_judged(record, t) for t in texts] == [1, 1]
    assert len({row.batch for row in rows(database_url)}) == 1


def test_clients_with_different_keys_never_share_a_group(database_url: str, tmp_path: Path) -> None:
    """Two keys send one rollout each of group "g" (size 2): each is a group of its own, that
    times out alone; rollouts of one key fill their group."""
    approve_rubrics(database_url, judges=[slow_judge(tmp_path / "judged.jsonl", delay=0.0)])
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        other = create_key(session, "another-client", ["score"]).secret
    engine.dispose()
    with api_client(database_url, [STORM], reward_group_timeout_s=1.5) as (client, keys):
        mine, theirs = bearer(keys["score"]), bearer(other)
        answers = all_at_once(
            [
                post_one(client, mine, 2, items=[item("Wind howled.")]),
                post_one(client, theirs, 2, items=[item("Calm air.")]),
            ]
        )
        for answer in answers:
            assert answer.status_code == 200, answer.text
            assert answer.json()["results"][0]["group_status"] == "timed_out"
        together = all_at_once(
            [post_one(client, mine, 2, items=[item(t)]) for t in ("Gale.", "Breeze.")]
        )
        assert [a.json()["results"][0]["group_status"] for a in together] == ["complete"] * 2
    batches = {row.request["completion"]: row.batch for row in rows(database_url)}
    assert batches["Wind howled."] != batches["Calm air."]
    assert batches["Gale."] == batches["Breeze."]


def test_a_masked_member_is_filled_with_its_groups_mean_not_its_prompts_history(
    database_url: str,
) -> None:
    """The prompt's history is of rewarded "howl" answers (about 0.9); a group of 4 calm
    answers (about 0.1 each), judged by a judge that fails half its calls, has members
    masked: OpenRLHF gets each of those as the mean of its group's rewards."""
    flaky = JudgeSpec(
        name="flaky-judge",
        backend="faulty",
        mode=VerdictMode.CRITERION_PROB,
        backend_options={
            "inner": "scripted",
            "failure_rate": 0.5,
            "seed": 3,
            "yes_if_contains": "howl",
        },
        retries=0,
        retry_backoff=0,
    )
    approve_rubrics(database_url, judges=[flaky])
    calm = ["Calm air.", "Still sky.", "No storm.", "Quiet sea."]
    with api_client(database_url, [STORM], reward_group_timeout_s=30) as (client, keys):
        history = client.post(
            "/v1/rewards",
            json={
                "judge": "flaky-judge",
                "items": [item(f"The wind {n} howled.", group=None) for n in range(8)],  # type: ignore[arg-type]
            },
            headers=bearer(keys["score"]),
        )
        assert history.status_code == 200, history.text
        assert any(r is not None and r > 0.5 for r in history.json()["rewards"])
        path = f"/v1/openrlhf/reward?api_key={keys['score']}&judge=flaky-judge&group_size=4"

        def openrlhf(text: str) -> Callable[[], Any]:
            def call() -> Any:
                body = {"query": [PROMPT + text], "prompts": [PROMPT], "labels": ["gr-storm"]}
                return client.post(path, json=body)

            return call

        answers = all_at_once([openrlhf(t) for t in calm])
    for answer in answers:
        assert answer.status_code == 200, answer.text
    logs = [a.json()["extra_logs"] for a in answers]
    rewards = [a.json()["rewards"][0] for a in answers]
    masked = [log["rubric_masked"] == [1.0] for log in logs]
    assert any(masked) and not all(masked), masked  # the seed gives both
    judged = [r for r, m in zip(rewards, masked, strict=True) if not m]
    group_mean = sum(judged) / len(judged)
    assert group_mean < 0.5
    for reward, is_masked in zip(rewards, masked, strict=True):
        if is_masked:
            assert reward == pytest.approx(group_mean)


def test_a_retry_of_a_rollout_whose_caller_is_gone_takes_its_row_over(
    database_url: str, tmp_path: Path
) -> None:
    """Two equal rollouts sent at once, both callers waiting, are two members of one group.
    A rollout whose caller is gone (a process that holds no lock: killed) is taken over by
    an equal request: it is answered as that member, and no second copy joins a group."""
    approve_rubrics(database_url, judges=[slow_judge(tmp_path / "judged.jsonl", delay=0.0)])
    with api_client(database_url, [STORM], reward_group_timeout_s=30) as (client, keys):
        auth = bearer(keys["score"])
        twins = all_at_once([post_one(client, auth, 2, items=[item("Gust.")]) for _ in range(2)])
        assert [a.status_code for a in twins] == [200, 200]
        assert [a.json()["results"][0]["group_status"] for a in twins] == ["complete"] * 2
        template = rows(database_url)[0]
        assert len(rows(database_url)) == 2 and len({r.batch for r in rows(database_url)}) == 1
        engine = make_engine(database_url)
        with session_scope(engine) as session:  # a caller that was killed while it waited
            session.add(
                RewardGroupMember(
                    group_key=template.group_key,
                    group_size=2,
                    request={**template.request, "completion": "Gale."},
                    created_at=utcnow() - timedelta(seconds=1),
                    caller=424242,
                )
            )
        engine.dispose()
        retried = post_one(client, auth, 2, items=[item("Gale."), item("Breeze.")])()
        assert retried.status_code == 200, retried.text
        assert [r["group_status"] for r in retried.json()["results"]] == ["complete"] * 2
    stored = rows(database_url)
    assert sorted(r.request["completion"] for r in stored) == ["Breeze.", "Gale.", "Gust.", "Gust."]
    gale = next(r for r in stored if r.request["completion"] == "Gale.")
    breeze = next(r for r in stored if r.request["completion"] == "Breeze.")
    assert gale.batch == breeze.batch and gale.caller != 424242
    assert gale.collected_at is not None


def test_a_process_is_alive_while_it_runs_and_gone_once_killed_whoever_asks_at_once(
    database_url: str,
) -> None:
    """Whether a rollout's process is gone, asked by two transactions open at once (two
    retries of one killed process's rollouts): both see it alive while it runs, both see it
    gone once it was killed."""
    script = (
        "import sys, time\n"
        "from rubricsvc.db import make_engine\n"
        "from rubricsvc.scoring.group_callers import Callers\n"
        "print(Callers(make_engine(sys.argv[1])).token(), flush=True)\n"
        "time.sleep(600)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, database_url], stdout=subprocess.PIPE, text=True
    )
    engine = make_engine(database_url)
    try:
        assert process.stdout is not None
        token = int(process.stdout.readline())
        askers = [Callers(engine), Callers(engine)]

        def both_ask() -> list[bool]:
            with session_scope(engine) as first, session_scope(engine) as second:
                return [a.alive(s, token) for a, s in zip(askers, (first, second), strict=True)]

        assert both_ask() == [True, True]
        process.kill()
        process.wait()
        deadline = time.monotonic() + 10  # PostgreSQL ends the session on the closed socket
        while (answer := both_ask()) != [False, False] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert answer == [False, False]
    finally:
        process.kill()
        process.wait()
        engine.dispose()


def test_a_process_that_draws_a_live_processs_token_draws_again(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(database_url)
    first, second = Callers(engine), Callers(engine)
    try:
        taken = first.token()
        draws = iter([taken - 1, taken % (2**31 - 2)])  # randbelow(n) + 1: ``taken``, then not
        monkeypatch.setattr(
            "rubricsvc.scoring.group_callers.secrets.randbelow", lambda _: next(draws)
        )
        drawn = second.token()
        monkeypatch.undo()
        assert drawn != taken
        with session_scope(engine) as session:  # each holds its own lock
            assert Callers(engine).alive(session, taken) and Callers(engine).alive(session, drawn)
    finally:
        first.close()
        second.close()
        engine.dispose()
