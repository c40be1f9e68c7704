"""GRPO on TRL with rubric rewards, end to end on CPU: a real migrated SQLite database, real TRL,
and as policy a tiny random model of SmolLM2-135M-Instruct's architecture and tokenizer
(tests/tiny_model.py): these tests are about the loop, not what the policy says. The judge is
the tiny one where only a criterion's verdict is needed, the embedded SmolLM2-135M where its
text must parse (group mode's rankings) or the API serves it. Kept small (short completions,
few steps, one torch thread: on a busy 2-core machine one thread is several times faster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_runner import run_cli
from tests.helpers import check_criterion
from tests.integration.test_trainer_rewards import seed
from tests.requirements import require_module
from tests.tiny_model import add_tiny_judge, tiny_model_dir

pytestmark = [pytest.mark.model, pytest.mark.slow]

HELLO = {"type": "contains", "text": "hello"}
GREETING: dict[str, Any] = {
    "name": "grpo/greet",
    "prompt": {"external_id": "grpo-greet", "text": "Say hello to a friend in a few words."},
    "criteria": [
        check_criterion("Uses the word hello", HELLO, weight=2),
        {"text": "The reply is a friendly greeting", "weight": 1},  # the model judges this one
    ],
}
HELD_OUT: dict[str, Any] = {
    "name": "grpo/held-out",
    "prompt": {"external_id": "grpo-team", "text": "Greet your team in a few words."},
    "criteria": [check_criterion("Uses the word hello", HELLO)],
}
STORM: dict[str, Any] = {
    "name": "grpo/storm",
    "prompt": {"external_id": "grpo-storm", "text": "Describe a storm in a few words."},
    "criteria": [{"text": "Mentions the wind", "weight": 1}],
}


def _load_weights(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    weights: dict[str, Any] = {}
    for path in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(path)))
    return weights


def test_rubricsvc_train_runs_grpo_and_the_policy_changes(sqlite_url: str, tmp_path: Path) -> None:
    """The loop, not what the models say: tiny random models of the embedded model's
    architecture as policy and judge (tests/tiny_model.py), whose replies end at varied lengths
    and whose verdicts differ between them, so the rewards of a group differ."""
    require_module("trl", "trainer")
    model_dir = tiny_model_dir()
    seed(sqlite_url, GREETING, HELD_OUT)
    judge = add_tiny_judge(sqlite_url, tmp_path)
    config = {
        "name": "five",
        "policy": str(model_dir),
        "prompts": ["grpo-greet"],
        "reward": {"judge": judge},  # the tiny judge judges the judge criterion
        "grpo": {
            "num_generations": 4,
            "per_device_train_batch_size": 4,
            "max_completion_length": 16,
            "learning_rate": 5e-5,
            "max_steps": 5,
        },
        "monitors": {
            "gold": {
                # Each prompt's own rubric: grpo/held-out for the held-out prompt and, for the
                # training completions scored every step, the training rubric itself.
                "scorer": {"judge": judge},
                "prompts": ["grpo-team"],
                "every": 5,
            }
        },
        "output_dir": str(tmp_path / "runs"),
        "save_policy": True,
        "threads": 1,
    }
    config_file = tmp_path / "train.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")

    result = run_cli("train", str(config_file), database_url=sqlite_url, timeout=1500)
    assert result.code == 0, result.stderr[-3000:]
    assert "beta=0.0" in result.stdout and "epsilon_high=0.28" in result.stdout
    # The reward, its monitors and the gold scorer name one judge: its model is loaded once.
    assert "judge models loaded in this process: 1" in result.stdout + result.stderr, result.stdout[
        -600:
    ]

    run = tmp_path / "runs" / "five"
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["grpo"]["loss_type"] == "dapo" and resolved["grpo"]["beta"] == 0.0
    trl_args = json.loads((run / "grpo_args.json").read_text())
    assert trl_args["mask_truncated_completions"] is True and trl_args["scale_rewards"] == "group"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5]
    assert all("rubric/reward" in m and "text/words" in m for m in metrics)
    # Gold scores the training completions every step too (monitors.gold.train_every: 1): the
    # same judge and rubric as the reward here, so the very completions get the same mean.
    assert [m["gold/train_reward"] for m in metrics] == pytest.approx(
        [m["rubric/reward"] for m in metrics], abs=1e-9
    )
    assert any("criteria/The reply is a friendly greeting" in m for m in metrics)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in samples} == {1, 2, 3, 4, 5}
    assert all(s["prompt_id"] == "grpo-greet" and s["completion"] is not None for s in samples)
    gold = [json.loads(line) for line in (run / "gold.jsonl").read_text().splitlines()]
    assert [g["step"] for g in gold] == [0, 5]
    plots = {p.name for p in (run / "plots").glob("*.png")}
    assert {"reward.png", "length.png", "criteria.png", "gold.png"} <= plots
    report = (run / "report.md").read_text(encoding="utf-8")
    assert (run / "curves.png").stat().st_size > 10_000
    assert "| start | 0 |" in report and "| end | 5 |" in report

    before, after = _load_weights(model_dir), _load_weights(run / "policy")
    changed = [
        name
        for name, tensor in before.items()
        if name in after and not bool((after[name].float() == tensor.float()).all())
    ]
    assert changed, "no parameter of the policy changed in 5 GRPO steps"


def test_a_masked_score_reaches_trl_as_none_and_is_left_out_of_the_loss(
    sqlite_url: str, tmp_path: Path
) -> None:
    require_module("trl", "trainer")
    import pandas as pd
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trainer.config import ScorerSettings
    from trainer.rewards import AsyncRubricReward

    model_dir = tiny_model_dir()  # the policy: what it says is not under test
    seed(sqlite_url, GREETING, STORM)
    torch.set_num_threads(1)
    # The judge of this run always fails: the storm rubric (a judged criterion only) is
    # masked; the greeting rubric keeps its check, so its coverage stays above the floor.
    # The async form, so TRL's async reward path (its own event loop thread) is exercised too.
    reward = AsyncRubricReward(
        ScorerSettings(database_url=sqlite_url, judge="always-fails", min_coverage=0.5)
    )
    seen: list[list[float | None]] = []

    async def recording(prompts: Any, completions: Any, **kwargs: Any) -> list[float | None]:
        rewards = await reward(prompts, completions, **kwargs)
        seen.append(rewards)
        return rewards

    def run(prompt_ids: list[str], name: str) -> GRPOTrainer:
        rows = [
            {"prompt": [{"role": "user", "content": p}], "prompt_id": pid}
            for pid, p in [
                ("grpo-greet", GREETING["prompt"]["text"]),
                ("grpo-storm", STORM["prompt"]["text"]),
            ]
            if pid in prompt_ids
        ]
        args = GRPOConfig(
            output_dir=str(tmp_path / name),
            num_generations=4,
            per_device_train_batch_size=4 * len(rows),
            max_completion_length=8,
            max_steps=1,
            learning_rate=1e-4,
            beta=0.0,
            loss_type="dapo",
            # Truncated completions stay in the loss here, so a zero loss below comes from
            # the masked rewards alone.
            mask_truncated_completions=False,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            # As `rubricsvc train` on CPU (TRL's defaults are bfloat16 and checkpointing).
            bf16=False,
            gradient_checkpointing=False,
            log_completions=True,  # TRL writes each sample's reward and advantage
            num_completions_to_print=0,
            disable_tqdm=True,
            seed=0,
        )
        trainer = GRPOTrainer(
            model=str(model_dir),
            reward_funcs=[recording],
            args=args,
            train_dataset=Dataset.from_list(rows),
        )
        trainer.train()
        return trainer

    mixed = run(["grpo-greet", "grpo-storm"], "mixed")
    table = pd.read_parquet(next((tmp_path / "mixed" / "completions").glob("*.parquet")))
    storm = table[table["prompt"].astype(str).str.contains("storm")]
    greet = table[~table["prompt"].astype(str).str.contains("storm")]
    assert len(storm) == len(greet) == 4
    assert sum(r is None for r in seen[0]) == 4  # None went to TRL, not a zero
    assert storm["recording"].isna().all()  # TRL kept it as "no reward"
    assert (storm["advantage"] == 0.0).all()  # no advantage: it moves nothing
    assert greet["recording"].notna().all()
    assert mixed.state.log_history[0]["rewards/recording/mean"] == pytest.approx(
        sum(greet["recording"]) / 4
    )

    # Only masked samples: the loss is exactly zero and no parameter moves.
    before = {n: p.detach().clone() for n, p in initial_parameters(model_dir).items()}
    masked_only = run(["grpo-storm"], "masked")
    summary = masked_only.state.log_history[-1]
    assert summary["rubric/masked_fraction"] == 1.0 and summary["reward"] is None
    assert summary["train_loss"] == 0.0
    after = dict(masked_only.model.named_parameters())
    assert all(torch.equal(before[n], after[n].detach()) for n in before)


def initial_parameters(model_dir: Path) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    return dict(AutoModelForCausalLM.from_pretrained(str(model_dir)).named_parameters())


def test_rubricsvc_train_rewards_a_step_with_group_mode(sqlite_url: str, tmp_path: Path) -> None:
    """One config line, `mode: group`: each step's generations of a prompt are judged as one
    group, and TRL gets the group's scores as rewards."""
    require_module("trl", "trainer")
    from sqlalchemy import select

    from rubricsvc.judging.config import JudgeSpec
    from rubricsvc.models import Completion, JudgeConfig, Judgment, Score
    from tests.helpers import read_database

    model_dir = tiny_model_dir()  # the policy: what it says is not under test
    seed(sqlite_url, GREETING)
    config = {
        "name": "group",
        "policy": str(model_dir),
        "prompts": ["grpo-greet"],
        "reward": {"judge": "embedded", "mode": "group"},
        "grpo": {
            "num_generations": 4,
            "per_device_train_batch_size": 4,
            "max_completion_length": 8,
            "max_steps": 1,
        },
        "output_dir": str(tmp_path / "runs"),
        "threads": 1,
    }
    config_file = tmp_path / "train.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = run_cli("train", str(config_file), database_url=sqlite_url, timeout=1500)
    assert result.code == 0, result.stderr[-3000:]

    run = tmp_path / "runs" / "group"
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and all(s["step"] == 1 for s in samples)

    def read(session: Any) -> tuple[dict[str, int], dict[int, float | None], list[list[int]]]:
        judge = session.scalars(
            select(JudgeConfig).where(JudgeConfig.name == "embedded:group")
        ).one()
        ids = {c.text: c.id for c in session.scalars(select(Completion))}
        scores = session.scalars(select(Score).where(Score.judge_config_id == judge.id)).all()
        judgments = session.scalars(
            select(Judgment).where(Judgment.judge_config_id == judge.id)
        ).all()
        return (
            ids,
            {s.completion_id: s.value for s in scores},
            [j.detail["order"] for j in judgments],
        )

    ids, scores, orders = read_database(sqlite_url, read)
    step = sorted({ids[s["completion"]] for s in samples})  # identical generations: one row
    assert [s["reward"] for s in samples] == [
        pytest.approx(scores[ids[s["completion"]]]) for s in samples
    ]
    assert all(s["status"] == "ok" for s in samples)
    repeats = JudgeSpec.model_fields["group_repeats"].default
    assert [sorted(order) for order in orders] == [step] * repeats  # the step's group, together


def test_trls_grpo_trainer_with_the_async_reward_over_http_gets_the_apis_rewards(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRL's GRPOTrainer awaiting ``AsyncRubricReward`` against ``rubricsvc serve`` (as a
    training run that keeps its judge on another machine would): the rewards TRL received for
    its completions are those ``/v1/rewards`` gives the same completions."""
    require_module("trl", "trainer")
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from tests.integration.test_trainer_rewards import _rewards_in_one_request, running_api
    from trainer.config import ScorerSettings, ScorerVia
    from trainer.rewards import AsyncRubricReward

    model_dir = tiny_model_dir()  # the policy: what it says is not under test
    seed(sqlite_url, GREETING)
    torch.set_num_threads(1)
    received: list[tuple[str, float | None]] = []
    with running_api(sqlite_url, monkeypatch) as api:
        reward = AsyncRubricReward(ScorerSettings(via=ScorerVia.HTTP, base_url=api))

        async def recording(prompts: Any, completions: Any, **kwargs: Any) -> list[float | None]:
            rewards = await reward(prompts, completions, **kwargs)
            texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
            received.extend(zip(texts, rewards, strict=True))
            return rewards

        args = GRPOConfig(
            output_dir=str(tmp_path / "run"),
            num_generations=4,
            per_device_train_batch_size=4,
            max_completion_length=8,
            max_steps=1,
            learning_rate=1e-4,
            beta=0.0,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            # As `rubricsvc train` on CPU (TRL's defaults are bfloat16 and checkpointing).
            bf16=False,
            gradient_checkpointing=False,
            disable_tqdm=True,
            seed=0,
        )
        rows = [{"prompt": [{"role": "user", "content": GREETING["prompt"]["text"]}],
                 "prompt_id": "grpo-greet"}]  # fmt: skip
        GRPOTrainer(
            model=str(model_dir),
            reward_funcs=[recording],
            args=args,
            train_dataset=Dataset.from_list(rows * 4),
        ).train()
        texts = [text for text, _ in received]
        direct = _rewards_in_one_request(api, "grpo-greet", texts)
    assert len(received) == 4
    assert [r for _, r in received] == pytest.approx(direct)
    assert None not in direct
