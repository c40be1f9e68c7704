"""What `rubricsvc judges distill` prints of its gate's figures within criteria."""

from __future__ import annotations

from typing import Any

from rubricsvc.cli.context import console
from rubricsvc.cli.distill import _print


def _report(within: dict[str, Any] | None, gated: bool) -> dict[str, Any]:
    judge = {
        "judge": "j",
        "n_judged": 8,
        "n_labelled": 8,
        "agreement": 0.75,
        "agreement_ci": [0.5, 0.9],
        "kappa": 0.5,
        "kappa_ci": [0.1, 0.8],
    }
    return {
        "judge": "student",
        "config_hash": "0" * 64,
        "run_dir": "/tmp/run",
        "training": {"examples": 10, "left_out": 0, "steps": 2, "seconds": 3.0},
        "gate": {
            "base": judge,
            "student": judge,
            "labels": "held-out",
            "gain": 0.1,
            "gain_ci": [0.0, 0.2],
            "within_criteria": within,
            "gated_within_criteria": gated,
            "decision": "rejected",
            "reasons": ["a reason"],
        },
    }


def _printed(report: dict[str, Any]) -> str:
    with console.capture() as captured:
        _print(report)
    return " ".join(captured.get().split())


def test_the_within_criteria_line_names_its_labels_criteria_and_prompts() -> None:
    within = {
        "criteria": 3,
        "labels": 24,
        "prompts": 2,
        "base_agreement": 0.625,
        "student_agreement": 0.875,
        "gain": 0.25,
        "gain_ci": [0.125, 0.5],
    }
    printed = _printed(_report(within, gated=True))
    assert (
        "within criteria (24 labels of the 3 criteria that some held-out completions meet and "
        "others do not, from 2 prompts): base 0.625, student 0.875, gain 0.250 [0.125, 0.500]"
    ) in printed
    assert "(not gated)" not in printed
    # A report stored before the prompts were counted still prints, without them.
    older = {key: value for key, value in within.items() if key != "prompts"}
    printed = _printed(_report(older, gated=False))
    assert "meet and others do not): base 0.625" in printed and "(not gated)" in printed
    # No contrasted label: no line.
    assert "within criteria" not in _printed(_report({"labels": 0}, gated=True))


def test_the_students_coverage_of_the_labels_is_printed_against_its_floor() -> None:
    report = _report(None, gated=False)
    report["gate"]["student"] = {**report["gate"]["student"], "n_judged": 6}
    report["gate"]["min_coverage"] = 0.95
    printed = _printed(report)
    assert (
        "student's verdicts cover 0.750 of the held-out labels (6/8; min_coverage 0.95)" in printed
    )
    # A report stored before the gate had a floor prints without the line.
    assert "verdicts cover" not in _printed(_report(None, gated=False))


def test_a_lora_students_adapter_size_is_printed_and_a_full_students_is_not() -> None:
    report = _report(None, gated=False)
    assert "adapter" not in _printed(report)
    report["training"] = {**report["training"], "adapter_bytes": 2_345_678, "model_dir": "/m"}
    assert "LoRA adapter: 2.3 MB in /m (served on the base model)" in _printed(report)
