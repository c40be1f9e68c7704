"""The promotion gate's arithmetic and the split's parsing, on numbers worked by hand."""

from __future__ import annotations

import pytest

from rubricsvc.distill.examples import Target, parse_split, split_by_prompt
from rubricsvc.distill.gate import decide, paired_gain
from rubricsvc.distill.training import DistillSettings
from rubricsvc.errors import ValidationFailed
from rubricsvc.models import JudgeGateStatus
from rubricsvc.validation.evaluation import EvaluationOptions, PointwiseObservation


def _obs(prompt: int, item: int, label: float, judged: float | None) -> PointwiseObservation:
    return PointwiseObservation(prompt, item, item, label, judged, 100)


def test_the_gain_is_paired_on_the_items_both_judged() -> None:
    labels = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    # The student is right on all six; the base on items 0 and 1 only; item 5 the base failed.
    student = [_obs(i // 2, i, label, label) for i, label in enumerate(labels)]
    base = [
        _obs(i // 2, i, label, label if i < 2 else 1.0 - label) for i, label in enumerate(labels)
    ]
    base[5] = _obs(2, 5, 0.0, None)
    gain, interval = paired_gain(student, base, EvaluationOptions(resamples=500))
    assert gain == pytest.approx(3 / 5)  # five items both judged; the student wins three more
    assert interval is not None and 0.0 <= interval[0] <= gain <= interval[1] <= 1.0


def test_the_gate_needs_the_agreement_and_a_gain_beyond_chance() -> None:
    settings = DistillSettings(min_agreement=0.7, min_gain=0.0)
    assert decide(0.75, [0.02, 0.2], settings)[0] == JudgeGateStatus.APPROVED
    status, reasons = decide(0.75, [-0.01, 0.2], settings)
    assert status == JudgeGateStatus.REJECTED and "gain over the base" in reasons[0]
    status, reasons = decide(0.65, [0.05, 0.2], settings)
    assert status == JudgeGateStatus.REJECTED and "below min_agreement 0.7" in reasons[0]
    status, reasons = decide(None, None, settings)
    assert status == JudgeGateStatus.REJECTED and len(reasons) == 2


def test_an_approval_says_what_was_checked_even_with_a_negative_min_gain() -> None:
    # A min_gain below 0 lets through a student slightly worse than the base: its approval
    # must not claim that it beats the base model.
    settings = DistillSettings(min_agreement=0.6, min_gain=-0.1)
    status, reasons = decide(0.65, [-0.05, 0.03], settings)
    assert status == JudgeGateStatus.APPROVED
    assert reasons == [
        "agreement 0.650 reaches min_agreement 0.6; the gain over the base model (95% "
        "interval [-0.050, 0.030]) is above min_gain -0.1"
    ]


def test_the_split_is_by_prompt_and_never_leaves_a_side_empty() -> None:
    assert parse_split("prompt:0.8") == 0.8
    for bad, words in (
        ("prompt:1.0", "test side empty"),
        ("prompt:0", "training side empty"),
        ("completion:0.8", "expected prompt:SHARE"),
        ("prompt:x", "expected prompt:SHARE"),
    ):
        with pytest.raises(ValidationFailed, match=words):
            parse_split(bad)
    targets = [Target(p, 10 * p + c, c, 1.0) for p in range(10) for c in range(3)]
    split = split_by_prompt(targets, 0.8, seed=3)
    assert {t.prompt_id for t in split.train}.isdisjoint({t.prompt_id for t in split.test})
    assert len(split.test_prompts) == 2 and len(split.train) + len(split.test) == len(targets)
    # The same prompts and seed give the same split, whatever order the targets come in.
    assert split_by_prompt(targets[::-1], 0.8, seed=3).test_prompts == split.test_prompts
    with pytest.raises(ValidationFailed, match="test side would be empty"):
        split_by_prompt(targets[:3], 0.8, seed=0)
