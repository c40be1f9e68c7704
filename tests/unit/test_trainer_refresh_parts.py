"""The parts of a judge refresh that need no model: its settings' errors, the labels a
labeller's results give the reward's criteria, the buffer of recent completions, and the
report's refresh table with the agreement before and after. The refresh itself, on the real
model and TRL, is tests/integration/test_trainer_refresh.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rubricsvc.distill.training import DistillSettings
from rubricsvc.errors import ValidationFailed
from rubricsvc.scoring.rewards import RewardResult
from trainer.agreement import agreement_change
from trainer.config import load_config
from trainer.refresh import RecentCompletion, RecentCompletions, label_balance, labels_from
from trainer.refresh_report import refresh_section

BASE: dict[str, Any] = {
    "prompts": ["p"],
    "grpo": {"max_steps": 20},
    "monitors": {"gold": {"scorer": {"rubric": "{prompt_id}/gold"}, "prompts": ["h"]}},
}


def _load(tmp_path: Path, refresh: dict[str, Any], **changes: Any) -> Any:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes, "refresh": refresh}), encoding="utf-8")
    return load_config(path)


@pytest.mark.parametrize(
    ("refresh", "changes", "said"),
    [
        ({"every": 20, "labeller": "gold"}, {}, "refresh.every (20) is not below grpo.max_steps"),
        ({"every": 5, "labeller": "gold"}, {"monitors": {}}, "configure monitors.gold"),
        (
            {"every": 5, "labeller": {"judge": "embedded"}},
            {},
            "'embedded' is the reward's own judge",
        ),
        (
            {"every": 5, "labeller": "gold"},
            {"reward": {"via": "http", "base_url": "http://x"}},
            "refresh needs reward.via: inprocess",
        ),
        (
            {"every": 5, "labeller": "gold", "training": {"min_gain": 0.1}},
            {},
            "min_gain: the gate's settings go in refresh.gate",
        ),
        ({"every": 5, "labeller": "gold", "training": {"epochs": 0}}, {}, "epochs"),
        ({"every": 5, "labeller": {"labels": "set-{run}"}}, {}, "only placeholder"),
        ({"every": 5, "labeller": "people"}, {}, "refresh.labeller"),
        ({"every": 5, "labeller": "gold", "gate": {"split": 1.0}}, {}, "refresh.gate.split"),
    ],
)
def test_refresh_settings_that_cannot_work_are_refused_in_one_line(
    tmp_path: Path, refresh: dict[str, Any], changes: dict[str, Any], said: str
) -> None:
    with pytest.raises(ValidationFailed) as refused:
        _load(tmp_path, refresh, **changes)
    message = str(refused.value)
    assert said in message and "\n" not in message


def test_refresh_settings_reach_the_distillation_with_the_gate_and_threads(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        {
            "every": 5,
            "labeller": {"labels": "people/{step}"},
            "gate": {"min_agreement": 0.6, "min_gain": 0.05},
            "training": {"max_steps": 3, "trainable_layers": 2},
        },
        threads=1,
    )
    settings = config.refresh.distill_settings(config.threads)
    assert (settings.max_steps, settings.trainable_layers, settings.threads) == (3, 2, 1)
    assert (settings.min_agreement, settings.min_gain) == (0.6, 0.05)
    # A refresh's gate measures the gain within criteria unless told not to (a plain
    # `judges distill` does not: DistillSettings' default).
    assert settings.within_criteria is True and DistillSettings().within_criteria is False
    assert config.refresh.labeller_name() == "label set people/{step}"
    off = _load(tmp_path, {"every": 5, "labeller": "gold", "gate": {"within_criteria": False}})
    assert off.refresh.distill_settings(None).within_criteria is False


def test_a_refresh_gates_on_the_students_coverage_of_the_labels(tmp_path: Path) -> None:
    default = _load(tmp_path, {"every": 5, "labeller": "gold"})
    assert default.refresh.distill_settings(None).min_coverage == 0.95
    floor = _load(tmp_path, {"every": 5, "labeller": "gold", "gate": {"min_coverage": 0.8}})
    assert floor.refresh.distill_settings(None).min_coverage == 0.8
    with pytest.raises(ValidationFailed, match="min_coverage: the gate's settings go in"):
        _load(tmp_path, {"every": 5, "labeller": "gold", "training": {"min_coverage": 0.5}})


def _result(completion_id: int, criteria: list[tuple[str, str, float | None]]) -> RewardResult:
    entries = [
        {"criterion_id": 100 + n, "text": text, "status": status, "value": value}
        for n, (text, status, value) in enumerate(criteria)
    ]
    return RewardResult(0.5, "ok", 1.0, completion_id=completion_id, criteria=entries)


def test_the_labeller_labels_the_rewards_criteria_by_text_and_only_what_it_decided() -> None:
    item = RecentCompletion(
        1, "p", 7, "text", ((1, "Says hello"), (2, "Is short"), (3, "Is short"), (4, "Cites"))
    )
    gold = _result(
        99,
        [
            ("Is short", "check", 1.0),
            ("Says hello", "check", 0.0),
            ("Is short", "check", 0.0),
            ("Cites", "failed", None),  # a failed judgment labels nothing
        ],
    )
    assert labels_from([item], [gold]) == {(7, 1): 0.0, (7, 2): 1.0, (7, 3): 0.0}
    worst = _result(99, [("Says hello", "unjudgeable", 0.0)])  # charged, not decided
    assert labels_from([item], [worst]) == {}


def test_the_label_balance_counts_criteria_every_completion_gave_one_value() -> None:
    # Criterion 1 is met by one completion of two, 2 by none, 3 by both.
    labels = {(10, 1): 1.0, (11, 1): 0.0, (10, 2): 0.0, (11, 2): 0.2, (10, 3): 0.9, (11, 3): 0.5}
    assert label_balance(labels) == {"met_share": 0.5, "criteria": 3, "one_valued_criteria": 2}
    assert label_balance({(10, 1): 0.0, (11, 1): 0.0}) == {
        "met_share": 0.0,
        "criteria": 1,
        "one_valued_criteria": 1,
    }
    assert label_balance({}) == {"met_share": 0.0, "criteria": 0, "one_valued_criteria": 0}


def test_the_buffer_keeps_the_latest_distinct_completions_with_a_prompt_and_a_row() -> None:
    recent = RecentCompletions(3)
    hello = [("Says hello", "ok", 0.4)]
    recent(
        1,
        ["p", "p", None],
        ["a", "b", "c"],
        [_result(1, hello), _result(2, hello), _result(3, hello)],
    )
    recent(2, ["p", "q"], ["b", "d"], [_result(2, hello), _result(4, hello)])
    recent(3, ["q"], ["e"], [RewardResult(None, "no_rubric", 0.0)])  # stored nowhere: skipped
    latest = recent.latest()
    assert [(c.step, c.completion_id) for c in latest] == [(1, 1), (2, 2), (2, 4)]
    assert latest[0].criteria == ((100, "Says hello"),)


def _sample(step: int, prompt: str, proxy: float, gold: float) -> dict[str, Any]:
    return {"step": step, "prompt_id": prompt, "rubric_reward": proxy, "gold_reward": gold}


def test_the_report_lists_each_refresh_with_the_agreement_before_and_after() -> None:
    # Before the refresh at step 2 the proxy orders every group against gold; after, with it.
    against = [_sample(s, p, 1 - g, g) for s in (1, 2) for p in "ab" for g in (0.0, 1.0)]
    along = [_sample(s, p, g, g) for s in (3, 4) for p in "ab" for g in (0.0, 1.0)]
    change = agreement_change(against, along)
    assert (change.before.agreement, change.after.agreement, change.difference) == (0.0, 1.0, 1.0)
    assert change.interval == (1.0, 1.0)

    refresh = {
        "step": 2,
        "labels": 16,
        "completions": 8,
        "prompts": 2,
        "label_balance": {"met_share": 0.25, "criteria": 4, "one_valued_criteria": 3},
        "split": {"test_prompts": 1, "test_targets": 8},
        "gate": {
            "base": {"agreement": 0.5, "agreement_ci": [0.25, 0.75]},
            "student": {"agreement": 0.75, "agreement_ci": [0.5, 1.0]},
            "gain": 0.25,
            "gain_ci": [0.1, 0.4],
        },
        "decision": "approved",
        "reasons": ["agreement 0.750 reaches 0.7 and beats the base model"],
        "swapped": True,
        "judge_after": {"judge": "run-refresh-2", "config_hash": "abcdef0123456789"},
        "seconds": {"total": 41.3},
    }
    lines = refresh_section([refresh], against + along)
    row = next(line for line in lines if line.startswith("| 2 |"))
    assert row == (
        "| 2 | 16 (8, 2) | 3 of 4, 0.25 | 1, 8 | 0.50 [0.25, 0.75] | 0.75 [0.50, 1.00] "
        "| +0.25 [+0.10, +0.40] | approved | yes | run-refresh-2 (abcdef012345) "
        "| 0.00 [0.00, 0.00] / 1.00 [1.00, 1.00] | +1.00 [+1.00, +1.00] | 41 s |"
    )
    # A run logged before refreshes recorded their labels' balance shows none.
    older = {key: value for key, value in refresh.items() if key != "label_balance"}
    row = next(line for line in refresh_section([older], along) if line.startswith("| 2 |"))
    assert row.startswith("| 2 | 16 (8, 2) | - | 1, 8 |")
    skipped = {"step": 4, "skipped": "no label set named 'people/4'", "judge_after": {}}
    lines = refresh_section([refresh, skipped], against + along)
    assert any("skipped: no label set named 'people/4'" in line for line in lines)
    assert refresh_section([], against) == []
