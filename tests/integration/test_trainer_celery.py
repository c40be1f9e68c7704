"""Rewards scored by Celery workers: a real worker process, Redis and PostgreSQL. The judge is
the scripted one behind the fault injector, since the test is about the path, not the model."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

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

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

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
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, url],
            env=cluster.env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
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
