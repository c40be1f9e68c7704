"""The judge benchmarks' own metrics (rubricsvc/validation/benchmarks/) on pairs built by hand:
JudgeBench's rule for the two orders, RM-Bench's style matrix and RewardBench 2's best-of-n,
from a comparing judge's verdicts and from a scoring judge's scores."""

from __future__ import annotations

import pytest

from rubricsvc.validation.benchmarks import benchmark_figures, judgebench, rewardbench2, rmbench
from rubricsvc.validation.evaluation import EvaluationOptions, PairObservation

OPTIONS = EvaluationOptions(resamples=100)


def _pair(
    item: str,
    label: str = "first",
    orders: tuple[str | None, str | None] = (None, None),
    judged: str | None = None,
    scores: tuple[float, float] | None = None,
    tags: tuple[str, ...] = (),
    prompt: int = 1,
) -> PairObservation:
    return PairObservation(
        prompt, 1, 2, label, judged, None, orders, 0, tags, (False, False), item, scores
    )


@pytest.mark.parametrize(
    ("label", "orders", "count"),
    [
        ("first", ("first", "first"), 2),  # right in both orders
        ("first", ("first", "tie"), 1),  # right once, a tie counts neither way: right
        ("first", ("first", None), 1),  # one order had no decision: still right
        ("first", ("first", "second"), 0),  # inconsistent: neither
        ("first", ("tie", "tie"), 0),
        ("first", (None, None), 0),  # no decision at all: counted among the pairs, not right
        ("second", ("first", None), -1),
        ("second", ("second", "second"), 2),
    ],
)
def test_judgebench_counts_each_order_as_its_metric_does(
    label: str, orders: tuple[str | None, str | None], count: int
) -> None:
    assert judgebench.counter(_pair("judgebench/p", label, orders)) == count


def test_judgebench_counts_a_scorer_right_only_when_the_correct_response_scores_higher() -> None:
    assert judgebench.counter(_pair("judgebench/p", "second", scores=(0.1, 0.3))) == 2
    assert judgebench.counter(_pair("judgebench/p", "second", scores=(0.3, 0.1))) == -2
    # A reward model's "B>A" in one order and "A>B" in the other when the scores are equal.
    assert judgebench.counter(_pair("judgebench/p", "second", scores=(0.2, 0.2))) == 0


def test_judgebench_figures_count_every_pair_and_each_category() -> None:
    pairs = [
        _pair("judgebench/a", "first", ("first", "first"), tags=("mmlu-pro-law",), prompt=1),
        _pair("judgebench/b", "first", ("second", "tie"), tags=("mmlu-pro-math",), prompt=2),
        _pair("judgebench/c", "second", (None, None), tags=("livecodebench",), prompt=3),
        _pair("judgebench/d", "second", ("second", None), tags=("livebench-math",), prompt=4),
    ]
    figures = benchmark_figures(pairs, OPTIONS)
    assert figures is not None and figures["name"] == "JudgeBench"
    assert (figures["n"], figures["correct"], figures["incorrect"], figures["neither"]) == (
        4,
        2,
        1,
        1,
    )
    assert figures["percent"] == 50.0
    assert figures["by_category"]["mmlu-pro"] == {"n": 2, "correct": 1, "percent": 50.0}
    assert figures["by_category"]["livecodebench"]["correct"] == 0
    assert "livebench-reasoning" not in figures["by_category"]


def test_a_set_of_no_single_benchmark_has_no_benchmark_figures() -> None:
    pairs = [_pair("judgebench/a", orders=("first", None)), _pair("17", orders=("first", None))]
    assert benchmark_figures(pairs, OPTIONS) is None


def test_rm_bench_from_a_comparing_judge_verdicts() -> None:
    """One chat record: the judge prefers the chosen response in the normal and easy pairs and
    loses every hard one (it likes the fancier style)."""
    pairs = [
        _pair(
            rmbench.item_name("chat", "7", i, j),
            judged="first" if i >= j else "second",
            tags=("chat", rmbench.difficulty(i, j)),
        )
        for i in range(3)
        for j in range(3)
    ]
    figures = benchmark_figures(pairs, OPTIONS)
    assert figures is not None and figures["name"] == "RM-Bench"
    assert (figures["hard"], figures["normal"], figures["easy"]) == (0.0, 1.0, 1.0)
    assert figures["average"] == pytest.approx(2 / 3)
    assert figures["domains_missing"] == ["math", "code", "safety"]
    assert rmbench.domain_of("safety-refuse") == rmbench.domain_of("safety-response") == "safety"


def test_rewardbench2_best_of_n_from_verdicts_needs_every_pair_won() -> None:
    def prompt(record: str, wins: list[bool], prompt_id: int) -> list[PairObservation]:
        return [
            _pair(
                rewardbench2.item_name(record, 0, j),
                judged="first" if won else "second",
                tags=("Math",),
                prompt=prompt_id,
            )
            for j, won in enumerate(wins)
        ]

    pairs = prompt("1", [True, True, True], 1) + prompt("2", [True, False, True], 2)
    # A third prompt with one pair the judge gave no verdict: unscored, counted 0.
    missing = _pair(rewardbench2.item_name("3", 0, 2), judged=None, tags=("Math",), prompt=3)
    pairs += [*prompt("3", [True, True], 3), missing]
    figures = benchmark_figures(pairs, OPTIONS)
    assert figures is not None and figures["name"] == "RewardBench 2"
    assert figures["subsets"]["Math"] == {"n": 3, "unscored": 1, "score": 1 / 3}
    assert figures["overall"] == pytest.approx(1 / 3)


def test_rewardbench2_ties_need_scores() -> None:
    """Ties' score weighs margins between scores: a comparing judge has none to give."""
    pairs = [
        _pair(rewardbench2.item_name(name, 0, 0), judged="first", tags=("Ties",), prompt=p)
        for p, name in enumerate(("ref:1", "tied:1"))
    ]
    figures = benchmark_figures(pairs, OPTIONS)
    assert figures is not None and figures["subsets"]["Ties"]["score"] is None
    assert figures["overall"] is None
