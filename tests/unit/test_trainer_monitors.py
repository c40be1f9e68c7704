"""The trainer's pure parts: the divergence rule, saturation, repetition, config errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubricsvc.errors import ValidationFailed
from rubricsvc.scoring.rewards import RewardResult
from trainer.config import TrainConfig, load_config
from trainer.monitors import SaturationTracker, diverging, slope
from trainer.rewards import criterion_pass_rates, reward_requests
from trainer.textstats import repeated_ngram_fraction, text_stats


def test_slope_is_the_least_squares_slope_per_evaluation() -> None:
    assert slope([1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert slope([3.0, 1.0, 2.0]) == pytest.approx(-0.5)
    assert slope([5.0]) == 0.0


def test_divergence_needs_training_up_and_gold_down_over_the_whole_window() -> None:
    assert diverging([0.1, 0.2, 0.3], [0.5, 0.4, 0.3], window=3)
    assert not diverging([0.1, 0.2, 0.3], [0.3, 0.4, 0.5], window=3)  # both rise: learning
    assert not diverging([0.3, 0.2, 0.1], [0.5, 0.4, 0.3], window=3)  # both fall
    assert not diverging([0.2, 0.3], [0.4, 0.3], window=3)  # too few evaluations
    # Only the last `window` evaluations count: an old divergence is forgotten.
    assert not diverging([0.1, 0.2, 0.3, 0.3, 0.4], [0.5, 0.4, 0.3, 0.4, 0.5], window=3)
    # A minimum slope ignores small wobbles.
    assert not diverging([0.10, 0.11, 0.12], [0.50, 0.49, 0.48], window=3, min_slope=0.05)


def test_a_criterion_saturates_after_enough_steps_at_the_threshold() -> None:
    tracker = SaturationTracker(threshold=0.9, steps=3)
    assert tracker.update({"criteria/a": 1.0, "criteria/b": 0.5}) == []
    assert tracker.update({"criteria/a": 0.95, "criteria/b": 1.0}) == []
    assert tracker.update({"criteria/a": 0.9, "criteria/b": 1.0}) == ["criteria/a"]
    assert tracker.update({"criteria/a": 1.0, "criteria/b": 1.0}) == ["criteria/b"]
    assert tracker.update({"criteria/a": 0.2}) == []
    assert tracker.saturated == {"criteria/b"}


def test_repetition_counts_repeated_ngrams() -> None:
    assert repeated_ngram_fraction("the cat sat on the mat", 3) == 0.0
    assert repeated_ngram_fraction("go go go go go", 3) == 1.0
    assert repeated_ngram_fraction("a b c a b c", 3) == pytest.approx(2 / 4)
    stats = text_stats(["one two three", "one two three four five"], 3)
    assert stats["text/words"] == 4.0
    assert stats["text/repeated_3gram_fraction"] == 0.0


def test_reward_requests_use_the_prompt_id_column_else_the_prompt() -> None:
    prompts = [[{"role": "user", "content": "Hi?"}], "Plain prompt"]
    completions = [[{"role": "assistant", "content": "Hello"}], "Text"]
    by_id = reward_requests(prompts, completions, ["p-1", None])
    assert (by_id[0].prompt_id, by_id[0].completion) == ("p-1", "Hello")
    assert (by_id[1].prompt_id, by_id[1].prompt, by_id[1].completion) == (
        None,
        "Plain prompt",
        "Text",
    )


def test_pass_rates_leave_failed_judgments_out() -> None:
    results = [
        RewardResult(1.0, "ok", criteria=[{"text": "c", "value": 1.0, "status": "ok"}]),
        RewardResult(0.0, "ok", criteria=[{"text": "c", "value": 0.2, "status": "ok"}]),
        RewardResult(None, "masked", criteria=[{"text": "c", "value": None, "status": "failed"}]),
    ]
    assert criterion_pass_rates(results) == {"c": 0.5}


def test_the_grpo_defaults_are_the_converged_ones() -> None:
    grpo = TrainConfig(prompts=["p"]).grpo
    assert grpo.beta == 0.0
    assert grpo.mask_truncated_completions is True
    assert grpo.loss_type == "dapo"
    assert grpo.epsilon_high == 0.28 > grpo.epsilon
    assert grpo.scale_rewards == "group"
    assert grpo.num_generations >= 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prompts: []\n", "prompts: List should have at least 1 item"),
        ("prompts: [p]\ngrpo: {num_generations: 3}\n", "must be a multiple of num_generations"),
        (
            "prompts: [p]\ngrpo: {beta: -1}\n",
            "grpo.beta: Input should be greater than or equal to 0",
        ),
        ("prompts: [p]\nreward: {via: http}\n", "reward: via http needs base_url"),
        ("prompts: [p]\nlearning_rate: 1\n", "learning_rate: Extra inputs are not permitted"),
        ("- not a mapping\n", "expected a mapping"),
    ],
)
def test_config_errors_are_one_line_and_name_the_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValidationFailed) as raised:
        load_config(path)
    assert message in str(raised.value)
    assert str(raised.value).startswith(f"{path}: ")
    assert "\n" not in str(raised.value)


def test_relative_output_dir_is_relative_to_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "train.yaml"
    path.parent.mkdir()
    path.write_text("prompts: [p]\noutput_dir: ../runs\nname: first\n", encoding="utf-8")
    config = load_config(path, {"name": "second"})
    assert config.run_dir == tmp_path / "conf" / ".." / "runs" / "second"
