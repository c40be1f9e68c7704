"""A recorded run re-runs to the digit: the over-optimization lab's evolving-pool arm (evolving
rubrics with the scripted pool generator, trainer/overopt_pool.py), three GRPO steps, twice, in
separate processes with different ``PYTHONHASHSEED``, so that anything ordered by a string's
hash (a set of criteria, a dict of proposals) would change what the second run judges.

The policy and the judge are tiny random models of the embedded model's architecture
(tests/tiny_model.py): what is under test is that nothing in the loop depends on the process,
not what the model says. ``rubricsvc train diff`` does the comparison, as a user re-running a
recorded run would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_runner import EXAMPLES, run_cli
from tests.requirements import require_module
from tests.tiny_model import add_tiny_judge, tiny_model_dir

pytestmark = [pytest.mark.model, pytest.mark.slow]

OVEROPT = EXAMPLES / "overopt"
REPO = EXAMPLES.parent


def _config(tiny: Path, output_dir: Path) -> dict[str, Any]:
    pool_options = {
        "pool": str(OVEROPT / "evolving_pool.yaml"),
        "tasks": str(OVEROPT / "tasks.yaml"),
    }
    return {
        "name": "evolving-pool-s0",
        "group": "evolving-pool",
        "policy": str(tiny),
        "prompts": ["overopt-sleep", "overopt-running"],
        "reward": {
            "judge": "tiny",
            "mode": "criterion-prob",
            "rubric": "{prompt_id}/proxy",
            "include_drafts": True,
            # The lab's evolving-pool settings (examples/overopt/run.sh).
            "evolution": {
                "every": 1,
                "max_new": 3,
                "max_active": 5,
                "prune_tolerance": 0.0,
                "generator": {
                    "backend": "overopt-pool",
                    "backend_options": pool_options,
                    "category_weights": {
                        "essential": 1,
                        "important": 1,
                        "optional": 1,
                        "pitfall": -1,
                    },
                },
            },
        },
        "grpo": {
            "mask_truncated_completions": False,
            "num_generations": 4,
            "per_device_train_batch_size": 8,
            "max_completion_length": 12,
            "learning_rate": 5.0e-5,
            "max_steps": 3,
            "seed": 0,
        },
        "monitors": {
            "gold": {
                "scorer": {"judge": "tiny", "rubric": "{prompt_id}/gold", "include_drafts": True},
                "prompts": ["overopt-stress"],
                "every": 3,
            }
        },
        "samples_per_step": 8,
        "threads": 1,
        "output_dir": str(output_dir),
    }


@pytest.mark.slow(seconds=30)
def test_an_evolving_pool_run_re_runs_to_the_digit_under_another_hash_seed(
    sqlite_url: str, tmp_path: Path
) -> None:
    require_module("trl", "trainer")
    tiny = tiny_model_dir()
    add_tiny_judge(sqlite_url, tmp_path, "tiny")
    assert (
        run_cli("rubrics", "add", str(OVEROPT / "rubrics.yaml"), database_url=sqlite_url).code == 0
    )
    runs = []
    for hash_seed in ("1", "2"):
        work = tmp_path / f"hash-{hash_seed}"
        work.mkdir()
        database = work / "run.sqlite"
        shutil.copy(sqlite_url.removeprefix("sqlite:///"), database)
        config = work / "train.yaml"
        config.write_text(yaml.safe_dump(_config(tiny, work / "runs")))
        env = {
            **os.environ,
            "PYTHONHASHSEED": hash_seed,
            "RUBRICSVC_DATABASE_URL": f"sqlite:///{database}",
            "RUBRICSVC_PLUGINS": "trainer.overopt_pool",
        }
        command = [sys.executable, "-m", "rubricsvc", "train", str(config)]
        runs.append(
            subprocess.Popen(
                command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        )
    for process in runs:
        output, _ = process.communicate(timeout=900)
        assert process.returncode == 0, output.decode()[-3000:]
    first, second = (tmp_path / f"hash-{s}" / "runs" / "evolving-pool-s0" for s in ("1", "2"))

    metrics = [json.loads(line) for line in (first / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    # The evolving path ran: the pool's criteria were proposed, judged and kept.
    assert sum(m.get("evolution/new", 0) for m in metrics) > 0
    environments = [json.loads((run / "environment.json").read_text()) for run in (first, second)]
    assert [e["pythonhashseed"] for e in environments] == ["1", "2"]

    result = run_cli("train", "diff", str(first), str(second), database_url=sqlite_url)
    assert result.code == 0, result.stdout
    assert "identical to the digit: 3 records of metrics.jsonl" in result.stdout
    assert "the same processor, kernels, threads and versions" in result.stdout
