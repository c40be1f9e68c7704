"""Evolving rubrics behind `rubricsvc serve`, driven by OpenRLHF's own client.

OpenRLHF's ``SingleTurnAgentExecutor`` sends one rollout per request; its remote URL names the
group size and the evolution run, so the server gathers the prompt's 8 rollouts (in the
database) and judges them as one group under the run's current set, then evolves it. Every
reward must equal the in-process reward (``rubricsvc train``'s path, ``RubricReward`` with
``reward.evolution``) of the same group at the same step, on a database of its own. The
rubric is check criteria (no model), the judge scripted ("Yes" likely when the response
holds "blue"), the generator scripted: every number follows from that, as in
tests/integration/test_trainer_evolution.py.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from rubricsvc.apikeys import create_key
from rubricsvc.db import make_engine, session_scope, upgrade
from rubricsvc.models import (
    EvolutionStep,
    EvolvedCriterion,
    Origin,
    RewardGroupMember,
    RubricVersion,
)
from tests.helpers import approve_rubrics
from tests.integration.test_trainer_evolution import BLUE, BLUE_JUDGE, PROPOSAL
from tests.integration.test_trainer_rewards import _openrlhf_agent, _Policy
from tests.requirements import prepared_model_dir, require_module
from tests.servers import RubricsvcServer
from trainer.config import ScorerSettings
from trainer.rewards import RubricReward

RUN = "served-run"
EVOLUTION: dict[str, Any] = {
    "every": 1,
    "max_active": 2,
    "max_new": 3,
    "generator": {"backend": "scripted", "backend_options": {"reply": PROPOSAL}},
}
TEXTS = [
    "The sea is blue.",
    "The blue sea is calm and deep today, truly.",
    "The sea is grey.",
    "The sea is grey and cold and rough and wide today.",
    "Blue waves.",
    "A blue and silver sea under a pale and quiet sky.",
    "Grey water.",
    "The water is green.",
]


def _database(template: Path, folder: Path, name: str) -> str:
    path = folder / f"{name}.sqlite"
    shutil.copy(template, path)
    url = f"sqlite:///{path}"
    approve_rubrics(url, BLUE, judges=[BLUE_JUDGE])
    return url


def _in_process(url: str) -> list[dict[str, float]]:
    """The rewards of the same group at steps 0 and 1, by text, as the trainer computes them."""
    settings = ScorerSettings.model_validate(
        {"judge": "blue-judge", "database_url": url, "evolution": EVOLUTION}
    )
    reward = RubricReward(settings, evolution_run=RUN)
    steps = []
    for step in (0, 1):
        rewards = reward(
            prompts=[[{"role": "user", "content": "Write one sentence about the sea."}]] * 8,
            completions=TEXTS,
            prompt_id=["ev-sea"] * 8,
            trainer_state=SimpleNamespace(global_step=step),
        )
        assert all(r is not None for r in rewards)
        steps.append({t: float(r) for t, r in zip(TEXTS, rewards, strict=True) if r is not None})
    reward.evolution.close()  # type: ignore[union-attr]
    return steps


def _server(url: str, folder: Path, workers: int) -> RubricsvcServer:
    args = ("--workers", str(workers)) if workers > 1 else ()
    server = RubricsvcServer(
        url,
        log_path=folder / f"serve-{workers}.log",
        env={
            "RUBRICSVC_API_EVOLUTION": json.dumps(EVOLUTION),
            # OpenRLHF's score key may create the run: the operator named it.
            "RUBRICSVC_API_EVOLUTION_CREATORS": json.dumps(["openrlhf"]),
            "RUBRICSVC_BROKER_URL": "",
        },
        args=args,
    )
    server.start()
    return server


def _one_step(base_url: str, key: str, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The 8 rollouts sent at once by OpenRLHF's executor, one request each; each answer."""
    require_module("transformers", "transformers")
    from transformers import AutoTokenizer

    agent = _openrlhf_agent(monkeypatch)
    tokenizer = AutoTokenizer.from_pretrained(str(prepared_model_dir()))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write one sentence about the sea."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    url = (
        f"{base_url}/v1/openrlhf/reward?api_key={key}&judge=blue-judge&group_size=8&evolution={RUN}"
    )
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=url)
    params = SimpleNamespace(max_tokens=64, logprobs=None)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def all_at_once() -> list[dict[str, Any]]:
        runs = [
            executor.execute(
                prompt,
                "ev-sea",
                params,
                512,
                tokenizer,
                _Policy([*tokenizer(text=text, add_special_tokens=False)["input_ids"], end]),
            )
            for text in TEXTS
        ]
        return list(await asyncio.gather(*runs))

    return asyncio.run(all_at_once())


def _rewards(answers: list[dict[str, Any]]) -> dict[str, float]:
    for answer in answers:  # judged in a complete group, nothing masked
        assert answer["extra_logs"]["rubric_group_timed_out"] == [0.0]
        assert answer["extra_logs"]["rubric_masked"] == [0.0]
    return {text: a["reward"][0] for text, a in zip(TEXTS, answers, strict=True)}


@pytest.mark.model
@pytest.mark.parametrize(
    "how",
    [
        "one server",
        "restarted between steps",
        "two workers",
        pytest.param("one server on PostgreSQL", marks=pytest.mark.postgres),
    ],
)
def test_openrlhfs_one_rollout_requests_are_gathered_judged_and_evolved_as_the_trainer_does(
    how: str,
    migrated_sqlite_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    expected = _in_process(_database(migrated_sqlite_template, tmp_path, "in-process"))
    # Step 1 is judged under the evolved set, so its rewards differ from step 0's.
    assert expected[0] != expected[1]

    if how.endswith("PostgreSQL"):
        served = request.getfixturevalue("make_postgres_database")()
        upgrade(served)
        approve_rubrics(served, BLUE, judges=[BLUE_JUDGE])
    else:
        served = _database(migrated_sqlite_template, tmp_path, "served")
    engine = make_engine(served)
    with session_scope(engine) as session:
        key = create_key(session, "openrlhf", ["score"]).secret
    workers = 2 if how == "two workers" else 1
    server = _server(served, tmp_path, workers)
    try:
        step0 = _rewards(_one_step(server.base_url, key, monkeypatch))
        if how == "restarted between steps":
            server.stop()
            server = _server(served, tmp_path, workers)
        step1 = _rewards(_one_step(server.base_url, key, monkeypatch))
    finally:
        server.stop()
    assert step0 == pytest.approx(expected[0])
    assert step1 == pytest.approx(expected[1])

    try:
        with session_scope(engine) as session:
            # Each step's 8 rollouts were claimed together: one batch per group, judged once.
            batches = session.scalars(select(RewardGroupMember.batch)).all()
            assert len(batches) == 16 and len(set(batches)) == 2
            version = session.scalars(
                select(RubricVersion).where(RubricVersion.origin == Origin.EVOLVED)
            ).one()
            assert version.ref == f"evolved/{RUN}/prompt-1@1"
            assert version.parent is not None and version.parent.ref == "ev/blue@1"
            steps = session.scalars(select(EvolutionStep).order_by(EvolutionStep.step)).all()
            assert [s.step for s in steps] == [0, 1]
            # Step 0 grew the set from the group it read; step 1 started from the evolved set.
            assert sorted(r["text"] for r in steps[0].rollouts) == sorted(TEXTS)
            assert steps[0].version_after.ref == version.ref
            assert steps[1].version_before.ref == version.ref
            assert steps[0].generator["generator_hash"]
            grown = session.scalars(select(EvolvedCriterion)).all()
            assert {c.step_id for c in grown} == {steps[0].id}
            assert {c.text for c in grown} == {
                "Names a colour of the water",
                "Describes the waves",
                "Is one sentence long",
            }
    finally:
        engine.dispose()
