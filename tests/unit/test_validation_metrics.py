"""The judge-validation statistics against values worked out by hand (and against scipy and
sklearn when they happen to be installed; they are not dependencies, so the hand-computed
checks always run)."""

from __future__ import annotations

import importlib
import importlib.util
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path

import pytest

from rubricsvc.errors import DependencyMissing
from rubricsvc.validation.metrics import (
    ReliabilityBin,
    accuracy,
    bootstrap_interval,
    cohen_kappa,
    expected_calibration_error,
    f1,
    fleiss_kappa,
    kendall_tau_b,
    labeller_agreement,
    macro_f1,
    majority,
    pearson,
    reliability_bins,
    spearman,
)
from rubricsvc.validation.plots import agreement_bars, reliability_diagram
from tests.requirements import require_module

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# A 2x2 table: (truth yes, judge yes) 4, (yes, no) 1, (no, yes) 2, (no, no) 3.
TRUTH = ["yes"] * 5 + ["no"] * 5
PREDICTED = ["yes"] * 4 + ["no"] + ["yes"] * 2 + ["no"] * 3


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _tied_scores(seed: int, n: int = 60) -> tuple[list[float], list[float]]:
    """Scores on a 1-5 scale (many ties) that loosely follow each other."""
    rng = random.Random(seed)
    x = [float(rng.randint(1, 5)) for _ in range(n)]
    y = [min(5.0, max(1.0, v + rng.choice([-2, -1, 0, 0, 1]))) for v in x]
    return x, y


def _kendall_brute(x: Sequence[float], y: Sequence[float]) -> float:
    """Tau-b straight from its definition, over all pairs."""
    concordant = discordant = tied_x = tied_y = 0
    for i, j in combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            tied_x += 1
        elif dy == 0:
            tied_y += 1
        elif dx * dy > 0:
            concordant += 1
        else:
            discordant += 1
    untied = concordant + discordant
    return (concordant - discordant) / math.sqrt((untied + tied_x) * (untied + tied_y))


# --- categorical -------------------------------------------------------------------------------


def test_accuracy_and_kappa_on_a_hand_computed_2x2_table() -> None:
    assert accuracy(PREDICTED, TRUTH) == pytest.approx(0.7)
    # po = 7/10; judge says yes 6/10, humans 5/10: pe = .6*.5 + .4*.5 = .5; (.7-.5)/(1-.5) = .4
    assert cohen_kappa(PREDICTED, TRUTH) == pytest.approx(0.4)
    assert cohen_kappa(TRUTH, TRUTH) == 1.0
    # A judge that inverts every label: po = 0, pe = .5 -> -1.
    flipped = ["no" if t == "yes" else "yes" for t in TRUTH]
    assert cohen_kappa(flipped, TRUTH) == pytest.approx(-1.0)


def test_kappa_punishes_a_judge_that_always_says_the_majority_label() -> None:
    truth = ["pass"] * 9 + ["fail"]
    always_pass = ["pass"] * 10
    assert accuracy(always_pass, truth) == pytest.approx(0.9)
    assert cohen_kappa(always_pass, truth) == pytest.approx(0.0)


def test_kappa_with_three_labels() -> None:
    truth = ["a", "a", "b", "b", "c", "c"]
    predicted = ["a", "b", "b", "b", "c", "a"]
    # po = 4/6; judge a 2, b 3, c 1; humans 2 each: pe = (4 + 6 + 2) / 36 = 1/3
    assert cohen_kappa(predicted, truth) == pytest.approx((4 / 6 - 1 / 3) / (1 - 1 / 3))
    if _has("sklearn"):
        from sklearn.metrics import cohen_kappa_score

        assert cohen_kappa(predicted, truth) == pytest.approx(cohen_kappa_score(truth, predicted))


def test_kappa_edge_cases() -> None:
    assert accuracy([], []) is None
    assert cohen_kappa([], []) is None
    # Chance agreement 1: both use one label only; documented as 1.0 for exact agreement.
    assert cohen_kappa(["a", "a"], ["a", "a"]) == 1.0
    with pytest.raises(ValueError, match="length"):
        cohen_kappa(["a"], ["a", "b"])


def test_f1_and_macro_f1() -> None:
    # yes: tp 4, fp 2, fn 1 -> 8/11; no: tp 3, fp 1, fn 2 -> 6/9
    assert f1(PREDICTED, TRUTH, "yes") == pytest.approx(8 / 11)
    assert f1(PREDICTED, TRUTH, "no") == pytest.approx(2 / 3)
    assert macro_f1(PREDICTED, TRUTH, ["yes", "no"]) == pytest.approx((8 / 11 + 2 / 3) / 2)
    # A class nobody uses is skipped, not averaged in as 0 or 1.
    assert macro_f1(PREDICTED, TRUTH, ["yes", "no", "maybe"]) == pytest.approx((8 / 11 + 2 / 3) / 2)
    assert f1(PREDICTED, TRUTH, "maybe") is None
    assert macro_f1(PREDICTED, TRUTH, ["maybe"]) is None
    # The judge never finds the positive: F1 0, not None.
    assert f1(["no", "no"], ["yes", "no"], "yes") == 0.0
    if _has("sklearn"):
        from sklearn.metrics import f1_score

        assert f1(PREDICTED, TRUTH, "yes") == pytest.approx(
            f1_score(TRUTH, PREDICTED, pos_label="yes")
        )
        assert macro_f1(PREDICTED, TRUTH, ["yes", "no"]) == pytest.approx(
            f1_score(TRUTH, PREDICTED, average="macro")
        )


# --- calibration -------------------------------------------------------------------------------


def test_reliability_bins_edges_and_the_closed_top_bin() -> None:
    table = reliability_bins([0.0, 0.3, 0.35, 1.0, 0.95], [0, 1, 0, 1, 1])
    assert len(table) == 10
    assert (table[0].low, table[0].high, table[9].low, table[9].high) == (0.0, 0.1, 0.9, 1.0)
    assert [b.count for b in table] == [1, 0, 0, 2, 0, 0, 0, 0, 0, 2]
    assert table[3] == ReliabilityBin(0.3, 0.4, 2, pytest.approx(0.325), 0.5)
    assert table[9].mean_prob == pytest.approx(0.975)
    assert table[9].frequency == 1.0
    assert table[1].mean_prob is None
    assert table[1].frequency is None
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        reliability_bins([1.2], [1])


def test_ece_of_calibrated_data_is_near_zero() -> None:
    # Exactly calibrated by construction, including both ends of [0, 1].
    probs = [0.25] * 4 + [0.75] * 4 + [0.0] * 3 + [1.0] * 3
    outcomes = [1, 0, 0, 0] + [1, 1, 1, 0] + [0] * 3 + [1] * 3
    assert expected_calibration_error(probs, outcomes) == pytest.approx(0.0, abs=1e-12)
    # Outcomes drawn with the stated probability: small, not exactly 0.
    rng = random.Random(7)
    probs = [rng.random() for _ in range(20_000)]
    outcomes = [1.0 if rng.random() < p else 0.0 for p in probs]
    ece = expected_calibration_error(probs, outcomes)
    assert ece is not None
    assert ece < 0.02


def test_ece_of_overconfident_data_matches_hand_computation() -> None:
    # 10 items at 0.9 with 6 right (gap .3); 4 items at 0.15 with 2 right (gap .35).
    probs = [0.9] * 10 + [0.15] * 4
    outcomes = [1] * 6 + [0] * 4 + [1, 1, 0, 0]
    expected = (10 * 0.3 + 4 * 0.35) / 14
    assert expected_calibration_error(probs, outcomes) == pytest.approx(expected)
    assert expected_calibration_error([], []) is None


# --- correlation -------------------------------------------------------------------------------


def test_pearson_by_hand() -> None:
    # dx = -1.5 -.5 .5 1.5, dy = -3 -1 0 4: cov 11, sxx 5, syy 26
    assert pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_spearman_and_kendall_with_ties_by_hand() -> None:
    x, y = [1, 2, 2, 3], [1, 3, 2, 4]
    # Average ranks of x: 1 2.5 2.5 4; of y: 1 3 2 4 -> cov 4.5, sxx 4.5, syy 5
    assert spearman(x, y) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    # 5 concordant pairs, 0 discordant, 1 pair tied in x: 5 / sqrt(5 * 6)
    assert kendall_tau_b(x, y) == pytest.approx(5 / math.sqrt(30))
    # Reversed order: the same magnitudes, negative.
    assert kendall_tau_b(x, [-v for v in y]) == pytest.approx(-5 / math.sqrt(30))
    # Monotone but not linear: rank measures reach 1, Pearson does not.
    assert spearman([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0)
    assert pearson([1, 2, 3, 4], [1, 10, 100, 1000]) < 0.9


def test_kendall_matches_its_pairwise_definition_on_heavily_tied_data() -> None:
    for seed in range(5):
        x, y = _tied_scores(seed)
        assert kendall_tau_b(x, y) == pytest.approx(_kendall_brute(x, y))


def test_correlations_are_none_when_undefined() -> None:
    for measure in (pearson, spearman, kendall_tau_b):
        assert measure([], []) is None
        assert measure([1.0], [2.0]) is None
        assert measure([0.1, 0.1, 0.1], [1, 2, 3]) is None
        assert measure([1, 2, 3], [5, 5, 5]) is None


def test_correlations_agree_with_scipy_when_installed() -> None:
    if not _has("scipy"):
        return  # the hand-computed tests above cover the same ground
    from scipy import stats

    for seed in range(3):
        x, y = _tied_scores(seed)
        assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic)
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
        assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic)


# --- several labellers -------------------------------------------------------------------------


def test_majority() -> None:
    assert majority(["a", "a", "b"]) == "a"
    assert majority(["a"]) == "a"
    assert majority(["a", "b"]) is None
    assert majority(["a", "b", "b", "a", "c"]) is None
    assert majority([]) is None


def test_labeller_agreement_and_fleiss_kappa_by_hand() -> None:
    items = [["a", "a", "a"], ["a", "a", "b"], ["b", "b", "b"], ["a", "b", "b"]]
    # Agreeing pairs per item: 3/3, 1/3, 3/3, 1/3 -> 2/3
    assert labeller_agreement(items) == pytest.approx(2 / 3)
    assert labeller_agreement([*items, ["a"]]) == pytest.approx(2 / 3)  # 1 vote: skipped
    assert labeller_agreement([["a"]]) is None
    # P-bar = 2/3; a and b each 6 of 12 votes: Pe = 1/2; (2/3 - 1/2) / (1/2) = 1/3
    assert fleiss_kappa(items) == pytest.approx(1 / 3)


def test_fleiss_kappa_on_the_textbook_example() -> None:
    # Fleiss (1971) as reproduced on Wikipedia: 10 subjects, 14 raters, 5 categories; 0.210.
    table = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    items = [[str(c) for c, n in enumerate(row) for _ in range(n)] for row in table]
    assert fleiss_kappa(items) == pytest.approx(0.210, abs=5e-4)


def test_fleiss_kappa_is_none_when_undefined() -> None:
    assert fleiss_kappa([]) is None
    assert fleiss_kappa([["a"], ["b"]]) is None  # one rater
    assert fleiss_kappa([["a", "b"], ["a", "b", "b"]]) is None  # unequal raters
    assert fleiss_kappa([["a", "a"], ["a", "a"]]) == 1.0  # one label throughout


# --- bootstrap ---------------------------------------------------------------------------------


def test_bootstrap_interval_contains_the_estimate_and_is_deterministic() -> None:
    rng = random.Random(3)
    outcomes = [1.0 if rng.random() < 0.7 else 0.0 for _ in range(200)]
    clusters = [i // 4 for i in range(200)]

    def mean(indices: Sequence[int]) -> float:
        return sum(outcomes[i] for i in indices) / len(indices)

    estimate = mean(range(200))
    interval = bootstrap_interval(clusters, mean, resamples=500, seed=11)
    assert interval is not None
    low, high = interval
    assert low < estimate < high
    assert high - low < 0.3
    assert bootstrap_interval(clusters, mean, resamples=500, seed=11) == interval
    assert bootstrap_interval(clusters, mean, resamples=500, seed=12) != interval


def test_clustered_items_give_a_wider_interval_than_independent_ones() -> None:
    # 10 prompts of 10 items each, every item of a prompt the same: really 10 observations.
    outcomes = [float(i // 10 % 2) for i in range(100)]

    def mean(indices: Sequence[int]) -> float:
        return sum(outcomes[i] for i in indices) / len(indices)

    clustered = bootstrap_interval([i // 10 for i in range(100)], mean, seed=1)
    independent = bootstrap_interval(list(range(100)), mean, seed=1)
    assert clustered is not None
    assert independent is not None
    clustered_width = clustered[1] - clustered[0]
    independent_width = independent[1] - independent[0]
    # sqrt(100 / 10) ~ 3.2 times wider in theory; demand at least twice.
    assert clustered_width > 2 * independent_width


def test_bootstrap_resamples_whole_clusters_with_multiplicity() -> None:
    seen: list[Counter[int]] = []

    def record(indices: Sequence[int]) -> float:
        seen.append(Counter(indices))
        return 0.0

    bootstrap_interval(["p1", "p1", "p2"], record, resamples=200, seed=0)
    assert len(seen) == 200
    for drawn in seen:
        assert drawn[0] == drawn[1]  # p1's items travel together
        assert drawn[0] + drawn[2] == 2  # two clusters drawn each time
    assert any(drawn[0] == 2 for drawn in seen)  # a cluster drawn twice counts twice


def test_bootstrap_skips_none_and_answers_none_without_values() -> None:
    outcomes = [1.0, 0.0, 1.0, 1.0]

    def needs_item_1(indices: Sequence[int]) -> float | None:
        return None if 1 not in indices else sum(outcomes[i] for i in indices) / len(indices)

    interval = bootstrap_interval(["a", "b", "c", "d"], needs_item_1, resamples=300)
    assert interval is not None
    assert interval[1] < 1.0  # only resamples holding the 0 outcome were kept
    assert bootstrap_interval(["a", "b"], lambda _: None, resamples=50) is None
    assert bootstrap_interval([], lambda _: 1.0) is None
    with pytest.raises(ValueError):
        bootstrap_interval(["a"], lambda _: 1.0, level=1.5)


def test_bootstrap_of_accuracy_on_1000_items_is_quick() -> None:
    rng = random.Random(5)
    truth = [rng.choice(["yes", "no"]) for _ in range(1000)]
    predicted = [t if rng.random() < 0.8 else rng.choice(["yes", "no"]) for t in truth]
    clusters = [i // 5 for i in range(1000)]

    def acc(indices: Sequence[int]) -> float:
        return sum(1 for i in indices if predicted[i] == truth[i]) / len(indices)

    start = time.perf_counter()
    interval = bootstrap_interval(clusters, acc, resamples=2000)
    elapsed = time.perf_counter() - start
    assert interval is not None
    assert interval[0] < acc(range(1000)) < interval[1]
    assert elapsed < 10.0  # about half a second on a laptop; a generous bound for CI


# --- plots -------------------------------------------------------------------------------------


def test_plots_write_png_files(tmp_path: Path) -> None:
    require_module("matplotlib", "trainer")
    table = reliability_bins([0.05, 0.3, 0.35, 0.9, 1.0], [0, 1, 0, 1, 1])
    diagram = reliability_diagram(table, tmp_path / "calibration" / "reliability.png", "judge")
    bars = agreement_bars(
        [("accuracy", 0.8, (0.7, 0.9)), ("kappa", 0.4, (0.45, 0.6)), ("ece", 0.1, None)],
        tmp_path / "agreement.png",
        "judge vs humans",
    )
    for path in (diagram, bars):
        assert path.exists()
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 1000


def test_plots_without_matplotlib_name_the_trainer_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(DependencyMissing, match=r"rubricsvc\[trainer\]"):
        reliability_diagram([], tmp_path / "r.png", "t")
    with pytest.raises(DependencyMissing, match=r"rubricsvc\[trainer\]"):
        agreement_bars([], tmp_path / "a.png", "t")
    assert not (tmp_path / "r.png").exists()
