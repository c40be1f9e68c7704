"""Rewards scored by Celery workers: a real worker process, Redis and PostgreSQL. The judge is
the scripted one behind the fault injector, since the test is about the path, not the model."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from rubricsvc import db
from rubricsvc.db import make_engine, session_scope
from rubricsvc.models import ScoreChunk
from rubricsvc.scoring.judge_configs import ensure_judge_config
from tests.integration.test_trainer_rewards import BLUE, JUDGED, seed
from tests.requirements import require_module
from tests.workers_harness import (
    REDIS_URL,
    Cluster,
    clean_redis,
    fast_judge,
    redis_unavailable,
    require,
)

pytestmark = [pytest.mark.postgres, pytest.mark.broker, pytest.mark.slow]

require_module("celery", "workers")

# Run in a process of its own: the Celery app reads the broker settings when it is imported.
SCRIPT = """
import json, sys
from trainer.config import ScorerSettings
from trainer.rewards import RubricReward
reward = RubricReward(ScorerSettings(via="celery", judge="fast", database_url=sys.argv[1], timeout=120))
rewards = reward(
    prompts=["Write one sentence about the sea.", "Write one sentence about the sea.", "Describe a storm."],
    completions=["The blue sea.", "A grey sea, cold and wide and very deep indeed.", "The wind howls."],
    prompt_id=["tr-sea", None, "tr-judged"],
)
print(json.dumps({"rewards": rewards, "status": [r.status for r in reward.last_results]}))
"""


def _run_script(cluster: Cluster, script: str, url: str, timeout: float) -> dict[str, Any]:
    """``script`` run with the database ``url`` in a process of its own, in the cluster's
    environment, from the checkout (it imports the tests' modules); the JSON its last line
    prints."""
    proc = subprocess.run(
        [sys.executable, "-c", script, url],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_rewards_scored_by_celery_workers(
    make_postgres_database: Callable[[], str], tmp_path: Path
) -> None:
    require(redis_unavailable())
    url = make_postgres_database()
    db.upgrade(url)
    seed(url, BLUE, JUDGED)
    engine = make_engine(url)
    with session_scope(engine) as session:
        ensure_judge_config(session, fast_judge())
    engine.dispose()
    cluster = Cluster(url, REDIS_URL, tmp_path)
    try:
        worker = cluster.start_worker("fast").wait_ready()
        out = _run_script(cluster, SCRIPT, url, timeout=300)
    finally:
        cluster.stop()
        clean_redis(cluster.broker_url, cluster.prefix)
    # Checks for the sea; the scripted judge says "Yes" with probability 0.9 for the wind.
    assert out["rewards"] == pytest.approx([1.0, 0.0, 0.9])
    assert out["status"] == ["ok", "ok", "ok"]
    # The worker, not the trainer's process, judged: every chunk names the worker's process.
    engine = make_engine(url)
    with engine.connect() as conn:
        tokens = conn.scalars(select(ScoreChunk.worker)).all()
    engine.dispose()
    assert tokens and {int(str(t).split(":")[1]) for t in tokens} == {worker.pid}


GROUP_SCRIPT = """
import json, sys
from trainer.config import ScorerSettings
from trainer.rewards import RubricReward
from tests.integration.test_trainer_rewards import group_step
settings = ScorerSettings(via="celery", judge="embedded", mode="group", database_url=sys.argv[1],
                          timeout=600)
reward = RubricReward(settings)
rewards = reward(**group_step())
results = reward.last_results
print(json.dumps({"rewards": rewards, "status": [r.status for r in results],
                  "ids": [r.completion_id for r in results]}))
"""


@pytest.mark.model
def test_group_mode_rewards_scored_by_celery_workers(
    make_postgres_database: Callable[[], str], tmp_path: Path
) -> None:
    """`mode: group` through Celery: each prompt's completions stay in one chunk (chunks here
    hold 2 planned judgments, a completion's share of a group), so a worker sees the group."""
    from rubricsvc.judging.config import BUILTIN_JUDGES
    from tests.integration.test_trainer_rewards import CALM, check_group_rewards
    from tests.workers_harness import require_embedded_model

    require(redis_unavailable())
    require_embedded_model()
    url = make_postgres_database()
    db.upgrade(url)
    seed(url, JUDGED, CALM)
    engine = make_engine(url)
    with session_scope(engine) as session:  # so the worker finds the judge by name at start
        ensure_judge_config(session, BUILTIN_JUDGES["embedded"].with_mode("group"))
    engine.dispose()
    cluster = Cluster(url, REDIS_URL, tmp_path, extra_env={"RUBRICSVC_JOBS_CHUNK_JUDGMENTS": "2"})
    try:
        worker = cluster.start_worker("embedded:group").wait_ready(timeout=300)
        out = _run_script(cluster, GROUP_SCRIPT, url, timeout=900)
    finally:
        cluster.stop()
        clean_redis(cluster.broker_url, cluster.prefix)
    assert out["status"] == ["ok"] * 8
    check_group_rewards(url, out["ids"], out["rewards"])
    engine = make_engine(url)
    with engine.connect() as conn:
        chunks = conn.execute(select(ScoreChunk.completion_ids, ScoreChunk.worker)).all()
    engine.dispose()
    # One chunk per prompt, each the prompt's four completions, run by the worker.
    assert sorted(sorted(ids) for ids, _ in chunks) == sorted(
        [sorted(out["ids"][:4]), sorted(out["ids"][4:])]
    )
    assert {int(str(token).split(":")[1]) for _, token in chunks} == {worker.pid}
