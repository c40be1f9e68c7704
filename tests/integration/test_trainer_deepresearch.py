"""GRPO in the deep-research environment, end to end on CPU: `rubricsvc train` runs TRL's own
GRPOTrainer with ``environment_factory`` on examples/deepresearch (tiny random models of the
embedded model's architecture as policy and judge, tests/tiny_model.py: the rewards' plumbing is
under test, not what either says; a real migrated SQLite database), and each reward
it logged is what the same rollout gets when stored with `rubricsvc completions add` and scored
with `rubricsvc score`. Kept as small as a run can be: one question, two rollouts a step, two
steps, short generations, one torch thread."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_runner import run_cli
from tests.helpers import approve_rubrics
from tests.requirements import require_module
from tests.tiny_model import add_tiny_judge, tiny_model_dir
from trainer.agent_reward import agent_reward
from trainer.config import RewardWeights

pytestmark = [pytest.mark.model, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "deepresearch"
TASK = "dr-loop-exits"
JUDGE = "tiny"


def _rubrics(task: str) -> list[dict[str, Any]]:
    document = yaml.safe_load((EXAMPLE / "rubrics.yaml").read_text(encoding="utf-8"))
    return [r for r in document["rubrics"] if r["name"].startswith(f"{task}/")]


def _scores(sqlite_url: str, rubric: str) -> dict[str, float | None]:
    """`rubricsvc score` of the replayed completions against ``rubric``, by external id."""
    result = run_cli(
        "score",
        "--judge", JUDGE,
        "--mode", "criterion-prob",
        "--rubric", rubric,
        "--source", "replay",
        "--include-drafts",
        "--json",
        database_url=sqlite_url,
        timeout=900,
    )  # fmt: skip
    assert result.code == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    return {s["completion_external_id"]: s["value"] for s in report["scores"]}


def test_trls_grpo_trainer_in_the_environment_logs_the_rewards_rubricsvc_score_gives(
    sqlite_url: str, tmp_path: Path
) -> None:
    require_module("trl", "trainer")
    require_module("bm25s", "trainer")
    model_dir = tiny_model_dir()
    approve_rubrics(sqlite_url, *_rubrics(TASK))
    add_tiny_judge(sqlite_url, tmp_path, JUDGE)
    config = {
        "name": "agent",
        "policy": str(model_dir),
        "prompts": [TASK],
        "environment": "deepresearch",
        "agent": {
            "options": {"corpus": str(EXAMPLE / "corpus.jsonl"), "tool_budget": 2},
        },
        "reward": {"judge": JUDGE, "mode": "criterion-prob", "rubric": "{prompt_id}/proxy"},
        "grpo": {
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "max_completion_length": 24,
            "mask_truncated_completions": False,
            "learning_rate": 5e-5,
            "max_steps": 2,
        },
        "output_dir": str(tmp_path / "runs"),
        "threads": 1,
    }
    config_file = tmp_path / "train.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")

    result = run_cli("train", str(config_file), database_url=sqlite_url, timeout=1500)
    assert result.code == 0, result.stderr[-3000:]
    assert "environment='deepresearch'" in result.stdout

    run = tmp_path / "runs" / "agent"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    for name in (
        "agent/tool_call_rate",
        "agent/search_turns",
        "agent/documents_opened",
        "agent/citation_precision",
        "reward/rubric",
        "reward/format",
    ):
        assert all(name in m for m in metrics), name
    assert {"tools.png", "components.png"} <= {p.name for p in (run / "plots").glob("*.png")}
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "## Tool use (deepresearch)" in report and "agent/tool_call_rate" in report

    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and all("trajectory" in s for s in samples)
    # Every rollout stored again, as `rubricsvc completions add` takes it, under a source of
    # its own, and scored from the command line against the same two rubrics.
    records = [
        {
            "external_id": f"replay-{n}",
            "prompt_external_id": TASK,
            "source": "replay",
            "text": s["completion"],
            "trajectory": s["trajectory"],
            **({"documents": s["documents"]} if s["documents"] else {}),
        }
        for n, s in enumerate(samples)
    ]
    replay = tmp_path / "replay.jsonl"
    replay.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    added = run_cli("completions", "add", str(replay), database_url=sqlite_url)
    assert added.code == 0, added.stderr[-2000:]
    proxy = _scores(sqlite_url, f"{TASK}/proxy")
    citations = _scores(sqlite_url, f"{TASK}/citations")
    for n, sample in enumerate(samples):
        key = f"replay-{n}"
        expected, parts = agent_reward(
            proxy[key], citations[key], sample["completion"], sample["trajectory"],
            RewardWeights(), target_searches=2,
        )  # fmt: skip
        assert sample["components"] == pytest.approx(asdict(parts), abs=1e-9)
        assert sample["components"]["rubric"] == pytest.approx(proxy[key], abs=1e-9)
        assert sample["components"]["citations"] == pytest.approx(citations[key], abs=1e-9)
        assert sample["reward"] == pytest.approx(expected, abs=1e-9), sample
    # What TRL logged as the step's mean reward is the mean of those rewards.
    for step in (1, 2):
        step_rewards = [s["reward"] for s in samples if s["step"] == step]
        logged = next(m for m in metrics if m["step"] == step)
        assert logged["reward"] == pytest.approx(sum(step_rewards) / len(step_rewards), abs=1e-6)
