"""Aggregations, masking, coverage and gates, computed by hand."""

from __future__ import annotations

import pytest

from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.aggregation import Outcome, Status, aggregate


def o(
    cid: int, weight: float, value: float | None, theme: str | None = None, required: bool = False
) -> Outcome:
    return Outcome(cid, weight, value, theme, required)


def test_healthbench_is_points_met_over_positive_points_unclipped() -> None:
    outcomes = [o(1, 5, 1), o(2, 3, 0), o(3, -8, 1)]
    result = aggregate("healthbench", outcomes)
    assert result.value == pytest.approx((5 - 8) / 8)
    assert result.value is not None and result.value < 0  # not clipped at 0
    assert (result.coverage, result.status) == (1.0, Status.OK)


def test_rar_divides_by_absolute_weights() -> None:
    result = aggregate("rar", [o(1, 4, 1), o(2, 2, 0.5), o(3, -2, 1)])
    assert result.value == pytest.approx((4 + 1 - 2) / 8)


def test_race_weights_dimensions() -> None:
    outcomes = [o(1, 0.6, 1, "insight"), o(2, 0.4, 0, "insight"), o(3, 1.0, 0.5, "readability")]
    result = aggregate("race", outcomes, dimension_weights={"insight": 0.75, "readability": 0.25})
    assert result.value == pytest.approx(0.75 * 0.6 + 0.25 * 0.5)
    equal = aggregate("race", outcomes)
    assert equal.value == pytest.approx((0.6 + 0.5) / 2)


def test_a_failed_judgment_is_masked_and_renormalized_never_zero() -> None:
    outcomes = [o(1, 5, 1), o(2, 3, None), o(3, 2, 1), o(4, 10, 1)]
    result = aggregate("healthbench", outcomes, min_coverage=0.5)
    assert result.value == pytest.approx(17 / 17)  # the failure is left out, not counted as 0
    assert result.coverage == pytest.approx(17 / 20)
    assert result.status == Status.PARTIAL


def test_low_coverage_gives_no_score() -> None:
    result = aggregate("rar", [o(1, 1, 1), o(2, 9, None)])
    assert result.value is None
    assert result.status == Status.MASKED
    assert result.coverage == pytest.approx(0.1)
    assert "coverage 0.10 below 0.80" in result.reasons[0]


def test_gate_caps_the_score() -> None:
    result = aggregate("rar", [o(1, 5, 0.2, required=True), o(2, 5, 1)])
    assert result.value == 0.0
    assert "required criterion 1 not met" in result.reasons[0]
    ungated = aggregate("rar", [o(1, 5, 0.2, required=True), o(2, 5, 1)], gate_cap=None)
    assert ungated.value == pytest.approx(0.6)


def test_an_undecided_gate_masks() -> None:
    result = aggregate("rar", [o(1, 1, None, required=True), o(2, 9, 1)])
    assert (result.value, result.status) == (None, Status.MASKED)


def test_unknown_aggregation() -> None:
    with pytest.raises(ValidationFailed, match="unknown aggregation 'mean'"):
        aggregate("mean", [o(1, 1, 1)])


def test_race_relative_to_a_reference() -> None:
    outcomes = [
        Outcome(1, 0.5, 0.8, "insight", reference=0.6),
        Outcome(2, 0.5, 0.4, "insight", reference=0.6),
        Outcome(3, 1.0, 0.9, "readability", reference=0.3),
    ]
    dims = {"insight": 0.6, "readability": 0.4}
    target = 0.6 * 0.6 + 0.4 * 0.9
    reference = 0.6 * 0.6 + 0.4 * 0.3
    result = aggregate("race", outcomes, dimension_weights=dims)
    assert result.value == pytest.approx(target / (target + reference))
