"""The promotion gate's arithmetic and the split's parsing, on numbers worked by hand."""

from __future__ import annotations

import pytest

from rubricsvc.distill.examples import Target, parse_split, split_by_prompt
from rubricsvc.distill.gate import contrasted, decide, paired_gain, within_criteria
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
    assert decide(0.75, [0.02, 0.2], settings, coverage=1.0)[0] == JudgeGateStatus.APPROVED
    status, reasons = decide(0.75, [-0.01, 0.2], settings, coverage=1.0)
    assert status == JudgeGateStatus.REJECTED and "gain over the base" in reasons[0]
    status, reasons = decide(0.65, [0.05, 0.2], settings, coverage=1.0)
    assert status == JudgeGateStatus.REJECTED and "below min_agreement 0.7" in reasons[0]
    status, reasons = decide(None, None, settings, coverage=1.0)
    assert status == JudgeGateStatus.REJECTED and len(reasons) == 2


def test_an_approval_says_what_was_checked_even_with_a_negative_min_gain() -> None:
    # A min_gain below 0 lets through a student slightly worse than the base: its approval
    # must not claim that it beats the base model.
    settings = DistillSettings(min_agreement=0.6, min_gain=-0.1)
    status, reasons = decide(0.65, [-0.05, 0.03], settings, coverage=1.0)
    assert status == JudgeGateStatus.APPROVED
    assert reasons == [
        "agreement 0.650 reaches min_agreement 0.6; the gain over the base model (95% "
        "interval [-0.050, 0.030]) is above min_gain -0.1; its verdicts cover 1.000 of the "
        "held-out labels (min_coverage 0.95)"
    ]


def _on(criterion: int, completion: int, label: float, judged: float) -> PointwiseObservation:
    return PointwiseObservation(completion // 2, completion, criterion, label, judged, 100)


def test_within_criteria_keeps_only_criteria_met_by_some_completions_and_not_others() -> None:
    # Criterion 1 is met by completions 0 and 2 only; criterion 2 by none; criterion 3 by all.
    labels = {(1, c): float(c % 2 == 0) for c in range(4)}
    labels |= {(2, c): 0.0 for c in range(4)} | {(3, c): 1.0 for c in range(4)}
    # The base answers every criterion "met"; the student answers each as it was labelled,
    # except that it calls completion 3 met on criterion 1.
    base = [_on(k, c, label, 1.0) for (k, c), label in labels.items()]
    student = [
        _on(k, c, label, 1.0 if (k, c) == (1, 3) else label) for (k, c), label in labels.items()
    ]
    assert {(o.criterion_id, o.completion_id) for o in contrasted(student)} == {
        (1, c) for c in range(4)
    }
    within = within_criteria(student, base, EvaluationOptions(resamples=200))
    assert (within["criteria"], within["labels"], within["prompts"]) == (1, 4, 2)
    # On criterion 1 the base is right on completions 0 and 2, the student on 0, 1 and 2.
    assert within["base_agreement"] == 0.5 and within["student_agreement"] == 0.75
    assert within["gain"] == pytest.approx(0.25)
    # Overall the gain is larger: criterion 2 (never met) is where the base is always wrong
    # and answering "not met" whatever the text says is always right.
    assert paired_gain(student, base, EvaluationOptions(resamples=200))[0] == pytest.approx(5 / 12)


def test_the_gate_within_criteria_refuses_labels_without_a_contrast() -> None:
    gated = DistillSettings(min_agreement=0.7, min_gain=0.0, within_criteria=True)
    # Every criterion one-valued: a judge that ignores the completion matches every label.
    none = {"criteria": 0, "labels": 0, "gain": None, "gain_ci": None}
    status, reasons = decide(1.0, [0.1, 0.3], gated, none, coverage=1.0)
    assert status == JudgeGateStatus.REJECTED and "no held-out criterion" in reasons[0]
    # Without within_criteria the same figures pass: the overall gain is all it checks.
    assert decide(1.0, [0.1, 0.3], DistillSettings(min_agreement=0.7), none, coverage=1.0)[0] == (
        JudgeGateStatus.APPROVED
    )
    flat = {"criteria": 2, "labels": 12, "gain": 0.0, "gain_ci": [-0.2, 0.2]}
    status, reasons = decide(0.9, [0.1, 0.3], gated, flat, coverage=1.0)
    assert status == JudgeGateStatus.REJECTED
    assert reasons == [
        "within criteria (the 12 labels of the 2 held-out criteria that some completions meet "
        "and others do not), the gain over the base model (95% interval [-0.200, 0.200]) is "
        "not above min_gain 0.0"
    ]
    better = {"criteria": 2, "labels": 12, "gain": 0.3, "gain_ci": [0.05, 0.5]}
    status, reasons = decide(0.9, [0.1, 0.3], gated, better, coverage=1.0)
    assert status == JudgeGateStatus.APPROVED
    assert reasons[0].endswith(
        ", and within criteria (12 labels of 2 criteria) too ([0.050, 0.500]); its verdicts "
        "cover 1.000 of the held-out labels (min_coverage 0.95)"
    )


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


def test_the_gate_refuses_a_student_whose_verdicts_cover_too_few_labels() -> None:
    # Right on every label it answered, better than the base there: a student that failed on
    # the hard items looks perfect where it answered.
    settings = DistillSettings(min_agreement=0.7, min_gain=0.0)
    assert settings.min_coverage == 0.95
    status, reasons = decide(1.0, [0.2, 0.4], settings, coverage=0.6)
    assert status == JudgeGateStatus.REJECTED
    assert reasons == [
        "the student's verdicts cover 0.600 of the held-out labels, below min_coverage 0.95: "
        "its agreement is measured only where it answered"
    ]
    assert decide(1.0, [0.2, 0.4], settings, coverage=None)[0] == JudgeGateStatus.REJECTED
    # At the floor it passes; a lower floor lets the same student through.
    assert decide(1.0, [0.2, 0.4], settings, coverage=0.95)[0] == JudgeGateStatus.APPROVED
    lenient = DistillSettings(min_agreement=0.7, min_gain=0.0, min_coverage=0.5)
    assert decide(1.0, [0.2, 0.4], lenient, coverage=0.6)[0] == JudgeGateStatus.APPROVED
