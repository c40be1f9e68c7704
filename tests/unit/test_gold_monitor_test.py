"""The gold monitor's test rule: it fires when the training score rises while gold falls beyond
their noise, not on drift alone (gold falling while the training score does not rise, as
under random rewards), and a run's logs decide it again exactly as the live monitor did."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from tests.unit.test_train_report import FixedScorer
from trainer.monitors import GoldMonitor, per_test_level
from trainer.recording import RecordingReward
from trainer.report import read_run, run_report
from trainer.rewards import RubricReward
from trainer.rundir import ALARMS, GOLD, RunDirectory

PROMPTS = [f"p{i}" for i in range(6)]
HELD_OUT = ["h0", "h1", "h2", "h3"]


class StepState:
    def __init__(self, step: int) -> None:
        self.global_step = step


def _run(
    root: Path, proxy_per_step: float, gold_per_step: float, steps: int = 30, every: int = 5
) -> tuple[RunDirectory, GoldMonitor]:
    """A run's logs made by the live parts (RecordingReward, GoldMonitor), with scorers that
    read each completion's score from its text: proxy and gold move by the given amounts per
    step, with noise that a step's completions share and their own."""
    run = RunDirectory(root / "run")
    run.write_config(
        {
            "name": "run",
            "grpo": {"max_steps": steps},
            "monitors": {"gold": {"alpha": 0.05, "every": every, "window": 3}},
        },
        {},
    )
    monitor = GoldMonitor(FixedScorer(), FixedScorer(), window=3, alpha=0.05, looks=steps // every)
    # Both scorers read the first number of a completion; gold reads it shifted by the gap
    # the drift puts between them, so the texts carry the proxy and gold moves at once.
    chance = random.Random(7)
    recording = RecordingReward(RubricReward(scorer=FixedScorer()), run, monitor=monitor)
    for step in range(0, steps + 1):
        if step:
            prompts = chance.sample(PROMPTS, 2) * 4
            shock = chance.gauss(0, 0.03)
            proxy = [0.4 + proxy_per_step * step + shock + chance.gauss(0, 0.05) for _ in prompts]
            gold = [0.5 + gold_per_step * step + shock + chance.gauss(0, 0.05) for _ in prompts]
            recording.gold = _TextPairScorer(gold)
            recording(
                prompts,
                [f"{value} words" for value in proxy],
                prompt_id=prompts,
                trainer_state=StepState(step - 1),
            )
        if step % every == 0:
            monitor.gold = _TextPairScorer(
                [0.5 + gold_per_step * step + chance.gauss(0, 0.02) for _ in HELD_OUT]
            )
            point = monitor.evaluate(
                step,
                HELD_OUT,
                [f"{0.4 + proxy_per_step * step + chance.gauss(0, 0.02)} x" for _ in HELD_OUT],
            )
            run.append(GOLD, point.to_json())
            if point.alarm:
                run.append(ALARMS, {"step": step, "kind": "gold_divergence", "message": "-"})
    return run, monitor


class _TextPairScorer(FixedScorer):
    """Gives the i-th completion of a call the i-th of ``values`` (gold, set per call)."""

    def __init__(self, values: list[float]) -> None:
        super().__init__()
        self.values = values

    def score(self, requests):  # type: ignore[no-untyped-def]
        from rubricsvc.scoring.rewards import RewardResult

        return [RewardResult(v, "ok", 1.0) for v, _ in zip(self.values, requests, strict=True)]


def test_the_level_of_each_test_spreads_alpha_over_a_runs_looks() -> None:
    assert per_test_level(0.05, 8) == pytest.approx(0.05 / 16)
    assert per_test_level(0.05, 0) == pytest.approx(0.025)


def test_it_fires_when_the_training_score_rises_while_gold_falls(tmp_path: Path) -> None:
    _run_dir, monitor = _run(tmp_path, proxy_per_step=0.01, gold_per_step=-0.01)
    fired = [p for p in monitor.points if p.alarm]
    assert fired, [p.tests for p in monitor.points]
    training = [t for t in fired[-1].tests if t["source"] == "training"]
    assert training and training[0]["fires"]
    assert training[0]["proxy_slope"] > 0 > training[0]["gold_slope"]
    assert max(training[0]["proxy_p"], training[0]["gold_p"]) < training[0]["level"]


def test_it_stays_quiet_when_gold_falls_but_the_training_score_does_not_rise(
    tmp_path: Path,
) -> None:
    # Drift: what random rewards do to a small policy. Gold falls clearly; proxy is flat.
    _run_dir, monitor = _run(tmp_path, proxy_per_step=0.0, gold_per_step=-0.01)
    assert not any(p.alarm for p in monitor.points)
    last = {t["source"]: t for t in monitor.points[-1].tests}
    assert last["training"]["gold_p"] < last["training"]["level"]  # gold's fall is seen
    assert last["training"]["proxy_p"] > last["training"]["level"]  # proxy's rise is not


def test_a_runs_logs_decide_the_test_again_as_the_live_monitor_did(tmp_path: Path) -> None:
    run_dir, monitor = _run(tmp_path, proxy_per_step=0.01, gold_per_step=-0.01)
    record = read_run(run_dir.path)
    replayed = record.replayed_tests()
    assert replayed == [(p.step, p.tests) for p in monitor.points]
    assert record.test_alarms() == [p.step for p in monitor.points if p.alarm]
    assert "fires at step" in run_report(record)


RECORDED = Path(__file__).resolve().parents[2] / "docs" / "overopt" / "runs"


def _same(replayed: object, logged: object) -> bool:
    """Equal, floats to 1e-9 of each other (or both within 1e-15 of 0). The runs were logged
    on another machine: a slope's last bits follow the CPU's vector width in numpy's sums (a
    gold slope of 0.0 was logged as -2.8e-19), while every p-value, decision and count must
    come out the same."""
    if isinstance(replayed, float) and isinstance(logged, float):
        return math.isclose(replayed, logged, rel_tol=1e-9, abs_tol=1e-15)
    if isinstance(replayed, dict) and isinstance(logged, dict):
        return replayed.keys() == logged.keys() and all(
            _same(replayed[k], logged[k]) for k in replayed
        )
    if isinstance(replayed, list | tuple) and isinstance(logged, list | tuple):
        return len(replayed) == len(logged) and all(
            _same(a, b) for a, b in zip(replayed, logged, strict=True)
        )
    return replayed == logged


def test_the_recorded_lab_runs_logs_decide_the_test_as_their_live_monitor_did() -> None:
    """docs/overoptimization.md reads the monitor's test from the committed runs' logs: the
    replay gives, at every held-out evaluation, the tests the live monitor logged (every
    p-value, decision and count exactly; slopes to their last bits: ``_same``), and no
    random-reward control alarms."""
    runs = sorted(path.parent for path in RECORDED.glob("*/config.yaml"))
    assert len(runs) == 8, runs  # four settings, two seeds
    for path in runs:
        record = read_run(path)
        logged = [(int(row["step"]), row.get("tests", [])) for row in record.gold_rows]
        assert _same(record.replayed_tests(), logged), path.name
        assert len(logged) == 9 and any(tests for _, tests in logged), path.name
        if record.config.get("random_rewards"):
            assert record.test_alarms() == [], path.name
