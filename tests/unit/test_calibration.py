"""Calibration maps: fitting (Platt, pool-adjacent-violators), the prompt split, the figures on
held-out prompts, and a calibrated judge config (hash, mode, the executor applying the map)."""

from __future__ import annotations

import math
import random
from itertools import pairwise

import pytest
from pydantic import ValidationError

from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.backends.types import ChoiceRequest
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.calibration import CalibrationMap, logit, sigmoid
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec
from rubricsvc.judging.modes import CompletionView, CriterionView, Item, get_mode
from rubricsvc.scoring.executor import CallExecutor
from rubricsvc.validation.calibration import (
    ISOTONIC_MIN_LABELS,
    Block,
    CalibrationPoint,
    brier_score,
    calibrate,
    choose_method,
    fit_isotonic,
    fit_platt,
    method_reason,
    pool_adjacent_violators,
    split_prompts,
)
from rubricsvc.validation.metrics import expected_calibration_error

GRID = [i / 200 for i in range(201)]


# --- pool-adjacent-violators ---------------------------------------------------------------------


def test_pav_pools_the_violating_runs_as_computed_by_hand() -> None:
    # 3 > 2: pooled to 2.5; 4 > 3.5: 3.75 (weight 2), then 3.75 > 2.5: (7.5 + 2.5) / 3.
    blocks = pool_adjacent_violators([1, 3, 2, 4, 3.5, 2.5, 5])
    assert [(b.start, b.end, b.weight) for b in blocks] == [
        (0, 1, 1),
        (1, 3, 2),
        (3, 6, 3),
        (6, 7, 1),
    ]
    assert [b.value for b in blocks] == pytest.approx([1, 2.5, 10 / 3, 5])


def test_pav_weighs_its_inputs() -> None:
    # (0.8 * 3 + 0.2 * 1) / 4 = 0.65
    assert pool_adjacent_violators([0.8, 0.2], [3, 1]) == [Block(0, 2, pytest.approx(0.65), 4)]
    assert pool_adjacent_violators([]) == []
    increasing = pool_adjacent_violators([0.1, 0.1, 0.4])  # ties are no violation
    assert [b.value for b in increasing] == [0.1, 0.1, 0.4]


def test_isotonic_breakpoints_are_block_means_over_distinct_probabilities() -> None:
    # By distinct p: 0.2 -> 1/2 (2 labels), 0.6 -> 0/2, 0.9 -> 1/1. 0.5 > 0 pools 0.2 and 0.6:
    # x = (0.2 * 2 + 0.6 * 2) / 4 = 0.4, y = 1 / 4.
    fitted = fit_isotonic([0.2, 0.6, 0.2, 0.9, 0.6], [1, 0, 0, 1, 0])
    assert fitted.method == "isotonic"
    assert fitted.params["x"] == pytest.approx([0.4, 0.9])
    assert fitted.params["y"] == pytest.approx([0.25, 1.0])
    assert fitted.apply(0.1) == pytest.approx(0.25)  # flat outside the breakpoints
    assert fitted.apply(0.65) == pytest.approx(0.625)  # halfway between them
    assert fitted.apply(1.0) == 1.0


# --- Platt ---------------------------------------------------------------------------------------


def test_platt_recovers_a_known_sigmoid() -> None:
    rng = random.Random(7)
    a, b = 2.0, -0.5
    probs = [rng.uniform(0.01, 0.99) for _ in range(20000)]
    outcomes = [float(rng.random() < sigmoid(a * logit(p) + b)) for p in probs]
    fitted = fit_platt(probs, outcomes, smooth=False)
    assert fitted.params["a"] == pytest.approx(a, abs=0.1)
    assert fitted.params["b"] == pytest.approx(b, abs=0.08)
    smoothed = fit_platt(probs, outcomes)  # Platt's targets barely move a large fit
    assert smoothed.params["a"] == pytest.approx(fitted.params["a"], abs=0.01)


def test_platt_stays_monotone_and_finite() -> None:
    # The judge's probabilities run against the labels: the best monotone map is the rate.
    against = fit_platt([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0], smooth=False)
    assert against.params["a"] == 0.0
    assert against.apply(0.05) == pytest.approx(0.5) == against.apply(0.95)
    # One class only, or perfectly separated: Platt's targets keep the map finite.
    for outcomes in ([1.0] * 4, [0.0, 0.0, 1.0, 1.0]):
        fitted = fit_platt([0.1, 0.2, 0.8, 0.9], outcomes)
        assert all(math.isfinite(float(v)) for v in fitted.params.values())  # type: ignore[arg-type]
    constant = fit_platt([0.3, 0.3, 0.3], [1, 0, 1])  # one probability: only the rate
    assert constant.params["a"] == 0.0


@pytest.mark.parametrize(
    "calibration",
    [
        CalibrationMap(method="platt", params={"a": 0.4, "b": 1.3}),
        CalibrationMap(method="platt", params={"a": 3.0, "b": -2.0}),
        CalibrationMap(method="platt", params={"a": 0.0, "b": 0.7}),
        CalibrationMap(method="isotonic", params={"x": [0.5], "y": [0.3]}),
        CalibrationMap(method="isotonic", params={"x": [0.1, 0.4, 0.7], "y": [0.0, 0.2, 1.0]}),
    ],
)
def test_apply_is_monotone_and_a_probability(calibration: CalibrationMap) -> None:
    mapped = [calibration.apply(p) for p in GRID]
    assert all(0.0 <= v <= 1.0 for v in mapped)
    assert all(a <= b for a, b in pairwise(mapped))


def test_a_map_that_is_not_monotone_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least 0"):
        CalibrationMap(method="platt", params={"a": -1.0, "b": 0.0})
    with pytest.raises(ValidationError, match="non-decreasing"):
        CalibrationMap(method="isotonic", params={"x": [0.1, 0.5], "y": [0.6, 0.2]})
    with pytest.raises(ValidationError, match="strictly increasing"):
        CalibrationMap(method="isotonic", params={"x": [0.5, 0.5], "y": [0.2, 0.6]})
    with pytest.raises(ValidationError, match="params a and b"):
        CalibrationMap(method="platt", params={"a": 1.0})
    with pytest.raises(ValidationError, match="Extra inputs"):
        CalibrationMap.model_validate({"method": "platt", "params": {"a": 1, "b": 0}, "n": 3})


def test_the_method_is_chosen_by_the_fit_labels() -> None:
    assert choose_method(ISOTONIC_MIN_LABELS - 1) == "platt"
    assert choose_method(ISOTONIC_MIN_LABELS) == "isotonic"
    assert "fewer than 1000" in method_reason("platt", 200, "auto")
    assert "asked for" in method_reason("isotonic", 200, "isotonic")


# --- the split and the figures -------------------------------------------------------------------


def test_the_split_is_by_distinct_prompt_and_deterministic() -> None:
    ids = [p for p in range(40) for _ in range(3)]  # each prompt three times
    fit, held = split_prompts(ids, 0.25, seed=3)
    assert not set(fit) & set(held)
    assert sorted(fit + held) == list(range(40))
    assert len(held) == 10
    assert split_prompts(list(reversed(ids)), 0.25, seed=3) == (fit, held)  # order: no matter
    assert split_prompts(ids, 0.25, seed=4) != (fit, held)
    assert split_prompts([1, 2], 0.01, seed=0)[1] != []  # at least one on each side
    with pytest.raises(ValueError, match="at least 2"):
        split_prompts([5, 5, 5], 0.5, seed=0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        split_prompts(ids, 1.0, seed=0)


def _miscalibrated(prompts: int, per_prompt: int, seed: int) -> list[CalibrationPoint]:
    """A judge that says p where the truth is p^3: far too confident that criteria are met."""
    rng = random.Random(seed)
    points = []
    for prompt in range(prompts):
        for _ in range(per_prompt):
            p = rng.random()
            points.append(CalibrationPoint(prompt, p, float(rng.random() < p**3)))
    return points


@pytest.mark.parametrize("method", ["platt", "isotonic", "auto"])
def test_calibrating_lowers_the_held_out_error(method: str) -> None:
    points = _miscalibrated(prompts=150, per_prompt=10, seed=1)
    result = calibrate(points, method=method, holdout=0.5, seed=0, resamples=200)  # type: ignore[arg-type]
    held = set(result.held_out_prompts)
    assert not held & set(result.fit_prompts)
    assert result.n_held_out == sum(1 for p in points if p.prompt_id in held)
    assert result.n_fit + result.n_held_out == len(points)
    assert result.method == (choose_method(result.n_fit) if method == "auto" else method)
    before, after = result.before, result.after
    assert before.ece is not None and after.ece is not None
    assert before.ece > 0.15 and after.ece < before.ece / 2
    assert after.brier is not None and before.brier is not None and after.brier < before.brier
    # Recomputed by hand on the held-out points only.
    held_points = [p for p in points if p.prompt_id in held]
    raw = [p.prob for p in held_points]
    labels = [p.label for p in held_points]
    assert before.ece == pytest.approx(expected_calibration_error(raw, labels))
    mapped = [result.calibration.apply(p) for p in raw]
    assert after.ece == pytest.approx(expected_calibration_error(mapped, labels))
    assert sum(b.count for b in after.bins) == len(held_points)
    assert result.ece_change == pytest.approx(after.ece - before.ece)
    assert result.ece_change_interval is not None and result.ece_change_interval[1] < 0


def test_brier_score() -> None:
    assert brier_score([1.0, 0.0, 0.5], [1, 0, 1]) == pytest.approx(0.25 / 3)
    assert brier_score([], []) is None


# --- the calibrated judge ------------------------------------------------------------------------

PLATT = CalibrationMap(method="platt", params={"a": 0.5, "b": -1.0})


def test_calibration_is_hashed_only_when_set() -> None:
    plain = BUILTIN_JUDGES["embedded"]
    assert "calibration" not in plain.hashed_settings()
    calibrated = JudgeSpec.model_validate({**plain.model_dump(), "calibration": PLATT})
    assert calibrated.hashed_settings()["calibration"] == PLATT.model_dump()
    assert calibrated.config_hash() != plain.config_hash()
    other = CalibrationMap(method="platt", params={"a": 0.5, "b": -1.1})
    assert JudgeSpec.model_validate({**plain.model_dump(), "calibration": other}).config_hash() != (
        calibrated.config_hash()
    )
    stored = JudgeSpec.model_validate(calibrated.model_dump(mode="json"))  # as a row keeps it
    assert stored.config_hash() == calibrated.config_hash()
    assert stored.calibration == PLATT


def test_only_a_probability_mode_can_be_calibrated() -> None:
    with pytest.raises(ValidationError, match="mode criterion-text does not give"):
        JudgeSpec(name="t", mode="criterion-text", calibration=PLATT)
    calibrated = JudgeSpec(name="p", mode="criterion-prob", calibration=PLATT)
    with pytest.raises(ValidationFailed, match="calibrated for criterion-prob"):
        calibrated.with_mode("criterion-text")
    with pytest.raises(ValidationError, match="a jury takes only name and jury"):
        JudgeSpec.model_validate(
            {"name": "j", "calibration": PLATT.model_dump(), "jury": {"members": [{"name": "m"}]}}
        )


def test_the_executor_applies_the_map_and_keeps_the_judges_value() -> None:
    def probs(request: ChoiceRequest) -> dict[str, float]:
        return {"Yes": 0.8, "No": 0.2} if "first" in str(request.chat) else {"Yes": 0.3, "No": 0.7}

    spec = JudgeSpec(name="p", backend="scripted", calibration=PLATT)
    mode = get_mode(spec.mode)
    executor = CallExecutor(
        lambda: ScriptedBackend(probs=probs), spec, mode.calls, spec.prompt_template()
    )
    completion = CompletionView(1, [{"role": "user", "content": "Hi"}], "Hello")
    items = [
        Item(key, CriterionView(n, f"the {key} criterion", None, 1.0, {"type": "binary"}))
        for n, key in enumerate(("first", "second"), start=1)
    ]
    results = executor.run([(completion, items)])
    for key, judge_value, label in (("first", 0.8, "yes"), ("second", 0.3, "no")):
        verdict = results[key].verdict
        assert verdict is not None
        assert verdict.detail["uncalibrated"] == pytest.approx(judge_value)
        assert verdict.value == pytest.approx(PLATT.apply(judge_value))
        assert verdict.label == label  # as the judge gave it
        assert "p_yes" in verdict.detail
