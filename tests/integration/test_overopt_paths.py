"""The over-optimization lab's proxy reward through each path a run can take: in process,
the HTTP API (`via: http`) and Celery workers (`via: celery`), each on a database of its own
(so no path reads another's cached judgments), all with one judge in criterion-prob on each
prompt's `{prompt_id}/proxy` rubric. The same completions get the same rewards to 1e-6. The
completions are the task set's hand-written answers to four training prompts. The judge is the
tiny one of the embedded model's architecture (tests/tiny_model.py): the paths are under test,
not its verdicts, which differ between the answers as a real judge's do."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rubricsvc import db
from tests.cli_runner import cli_ok
from tests.integration.test_trainer_rewards import running_api
from tests.tiny_model import add_tiny_judge
from tests.workers_harness import REDIS_URL, Cluster, clean_redis, redis_unavailable, require
from trainer.config import ScorerSettings, ScorerVia
from trainer.overopt import Split, load_task_set
from trainer.rewards import RubricReward

pytestmark = [pytest.mark.model, pytest.mark.postgres, pytest.mark.broker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
OVEROPT = ROOT / "examples" / "overopt"
JUDGE = "tiny"
PROXY = {"judge": JUDGE, "mode": "criterion-prob", "rubric": "{prompt_id}/proxy"}

# Run in a process of its own: the Celery app reads the broker settings when it is imported.
CELERY_SCRIPT = """
import json, sys
from trainer.config import ScorerSettings
from trainer.rewards import RubricReward
batch = json.loads(sys.argv[2])
settings = ScorerSettings(via="celery", database_url=sys.argv[1], include_drafts=True,
                          timeout=600, **batch["settings"])
print(json.dumps(RubricReward(settings)(**batch["args"])))
"""


def batch() -> dict[str, Any]:
    """The reward function's arguments for the hand-written answers to four training prompts."""
    tasks = load_task_set(OVEROPT / "tasks.yaml").split(Split.TRAIN)[:4]
    pairs = [(task, answer.text) for task in tasks for answer in task.answers]
    return {
        "prompts": [[{"role": "user", "content": task.prompt}] for task, _ in pairs],
        "completions": [text for _, text in pairs],
        "prompt_id": [task.id for task, _ in pairs],
    }


def with_lab_rubrics(url: str, folder: Path) -> str:
    """The lab's rubrics and the tiny judge in the database at ``url``."""
    cli_ok("rubrics", "add", str(OVEROPT / "rubrics.yaml"), database_url=url)
    add_tiny_judge(url, folder, JUDGE)
    return url


@pytest.fixture
def in_process(sqlite_url: str, tmp_path: Path) -> list[float | None]:
    database = with_lab_rubrics(sqlite_url, tmp_path)
    settings = ScorerSettings(database_url=database, include_drafts=True)
    return RubricReward(settings.model_copy(update=PROXY))(**batch())


@pytest.fixture
def api(
    migrated_sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    path = tmp_path / "api.sqlite"
    path.write_bytes(migrated_sqlite_template.read_bytes())
    # The lab's rubrics are unreviewed drafts: rewarding with them needs the review scope.
    database = with_lab_rubrics(f"sqlite:///{path}", tmp_path)
    with running_api(database, monkeypatch, 120, scopes=("score", "review")) as base_url:
        yield base_url


def test_the_proxy_reward_is_the_same_in_process_over_http_and_on_celery_workers(
    in_process: list[float | None],
    api: str,
    make_postgres_database: Callable[[], str],
    tmp_path: Path,
) -> None:
    assert len(in_process) == 8 and None not in in_process
    assert len(set(in_process)) > 4  # the judge tells the answers apart

    settings = ScorerSettings(via=ScorerVia.HTTP, base_url=api, include_drafts=True)
    over_http = RubricReward(settings.model_copy(update=PROXY))(**batch())
    assert over_http == pytest.approx(in_process, abs=1e-6)

    require(redis_unavailable())
    url = make_postgres_database()
    db.upgrade(url)
    with_lab_rubrics(url, tmp_path)
    cluster = Cluster(url, REDIS_URL, tmp_path)
    try:
        cluster.start_worker(JUDGE).wait_ready(timeout=300)
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                CELERY_SCRIPT,
                url,
                json.dumps({"settings": PROXY, "args": batch()}),
            ],
            env=cluster.env(),
            capture_output=True,
            text=True,
            timeout=900,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        on_workers = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        cluster.stop()
        clean_redis(cluster.broker_url, cluster.prefix)
    assert on_workers == pytest.approx(in_process, abs=1e-6)
