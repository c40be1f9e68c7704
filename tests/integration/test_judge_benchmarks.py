"""JudgeBench, RM-Bench and RewardBench 2 through `labels import`, `judges import` and
`judges evaluate` (the real commands): each benchmark's own metric reproduced on its files.

The expected JudgeBench figures are what JudgeBench's own metric code gives on the shipped
files: ``utils/metrics.py`` ``compute_final_metrics(pairs, reverse_order=True, include_fn=...)``
at commit e2c52c2, run on each ``outputs/`` file, overall and with ``include_fn`` the source
prefix of each category (as ``run_judge.py`` prints them); ``_judgebench_rule`` below restates
that rule on the raw files, so the test also checks the files still give those numbers. The
RM-Bench and RewardBench 2 references restate their metric code with numpy
(``_rm_bench_accuracy``: RM-Bench ``scripts/utils.py`` ``compute_accuracy``;
``_rewardbench2_scores``: reward-bench ``rewardbench/utils.py`` ``reroll_and_score_dataset``'s
result and ``process_single_model``) on the files written in their formats.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rubricsvc.judging.config import JudgeSpec, VerdictMode
from tests.cli_runner import cli_ok
from tests.helpers import approve_rubrics

DATA = Path(__file__).resolve().parents[1] / "data"
JUDGEBENCH = DATA / "judgebench"
SPLIT = "dataset=judgebench,response_model=gpt-4o-2024-05-13"
LABELS = "judgebench-gpt-4o-2024-05-13"
RM_BENCH = DATA / "rm_bench_sample"
RM_RESULTS = RM_BENCH / "total_dataset_tiny-rm_REWORD_MODEL_20250101_000000.json"
REWARDBENCH2 = DATA / "rewardbench2_sample"
CATEGORIES = ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench")

# (judge_name, judge_model) -> right pairs overall and per category (of 350: 154, 98, 56, 42),
# and the overall percentage JudgeBench prints (100 * right / 350).
PUBLISHED: dict[tuple[str, str], tuple[int, tuple[int, int, int, int], float]] = {
    ("arena_hard", "o1-mini-2024-09-12"): (230, (90, 61, 46, 33), 65.71428571428571),
    ("reward_model", "Ray2333_GRM-Gemma-2B-rewardmodel-ft"): (
        208,
        (97, 52, 36, 23),
        59.42857142857143,
    ),
    ("reward_model", "Skywork_Skywork-Reward-Gemma-2-27B"): (
        225,
        (92, 65, 47, 21),
        64.28571428571429,
    ),
    ("reward_model", "Skywork_Skywork-Reward-Llama-3.1-8B"): (
        218,
        (91, 63, 43, 21),
        62.285714285714285,
    ),
    ("reward_model", "internlm_internlm2-20b-reward"): (222, (96, 68, 37, 21), 63.42857142857143),
    ("reward_model", "internlm_internlm2-7b-reward"): (208, (87, 60, 40, 21), 59.42857142857143),
}
CATEGORY_SIZES = (154, 98, 56, 42)


def _outputs(judge_name: str, judge_model: str) -> Path:
    return (
        JUDGEBENCH / "outputs" / f"{SPLIT},judge_name={judge_name},judge_model={judge_model}.jsonl"
    )


def _judgebench_rule(path: Path, prefix: str = "") -> float:
    """JudgeBench's compute_final_metrics with reverse_order, restated: per pair, +1 for each
    order's decision (the second flipped) that is the label, -1 for one that is the other."""
    flip = {"A>B": "B>A", "B>A": "A>B"}
    pairs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    pairs = [p for p in pairs if p["source"].startswith(prefix)]
    correct = 0
    for pair in pairs:
        first, second = pair["judgments"]
        decisions = [
            first["decision"] if first else None,
            flip.get(second["decision"], second["decision"]) if second else None,
        ]
        counter = sum(
            1 if d == pair["label"] else -1 if d == flip[pair["label"]] else 0 for d in decisions
        )
        correct += counter > 0
    return 100 * correct / len(pairs)


def _evaluate(database_url: str, *args: str) -> dict[str, Any]:
    result = cli_ok(
        "judges", "evaluate", *args, "--resamples", "200", "--json", database_url=database_url
    )
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _assert_published(
    figures: dict[str, Any], expected: tuple[int, tuple[int, ...], float]
) -> None:
    right, by_category, percent = expected
    assert figures["name"] == "JudgeBench"
    assert (figures["n"], figures["correct"]) == (350, right)
    assert figures["percent"] == percent  # to the last digit, as JudgeBench prints it
    for name, size, hits in zip(CATEGORIES, CATEGORY_SIZES, by_category, strict=True):
        assert figures["by_category"][name]["n"] == size
        assert figures["by_category"][name]["correct"] == hits
        assert figures["by_category"][name]["percent"] == 100 * hits / size
    low, high = figures["accuracy_ci"]
    assert low < right / 350 < high


def test_the_shipped_files_give_the_published_figures() -> None:
    """The shortened outputs files still give what JudgeBench's rule gives (and prints)."""
    for (judge_name, judge_model), (right, by_category, percent) in PUBLISHED.items():
        path = _outputs(judge_name, judge_model)
        assert _judgebench_rule(path) == percent == 100 * right / 350
        for name, size, hits in zip(CATEGORIES, CATEGORY_SIZES, by_category, strict=True):
            assert _judgebench_rule(path, name) == 100 * hits / size


def test_published_judgebench_judges_reproduce_exactly(database_url: str, tmp_path: Path) -> None:
    """Six published judges (o1-mini deciding in both orders, five reward models scoring) through
    `labels import` (the data file alone), `judges import --format judgebench` and `judges
    evaluate`: JudgeBench's accuracy, overall and per category, to the last digit."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(JUDGEBENCH / "data" / f"{SPLIT}.jsonl", data)
    imported = cli_ok("labels", "import", "judgebench", str(data), database_url=database_url)
    assert f"label set:   {LABELS}: 350 labels (pairwise 350); added" in imported.stdout
    for (judge_name, judge_model), expected in PUBLISHED.items():
        report = json.loads(
            cli_ok(
                "judges",
                "import",
                "--format",
                "judgebench",
                str(_outputs(judge_name, judge_model)),
                "--json",
                database_url=database_url,
            ).stdout
        )
        judge = f"judgebench/{judge_name}/{judge_model}"
        assert report["judge"] == judge
        # A deciding judge: both orders of 350 pairs; a reward model: a score per response.
        assert report["mode"] == ("pairwise" if judge_name == "arena_hard" else "holistic")
        assert report["verdicts"] == 700 and report["failed"] == 0
        evaluation = _evaluate(database_url, "--judge", judge, "--labels", LABELS)
        assert evaluation["compared_by"] == ("verdicts" if judge_name == "arena_hard" else "scores")
        _assert_published(evaluation["benchmark"], expected)
    # Again: nothing new is stored, and the figures stand.
    again = json.loads(
        cli_ok(
            "judges",
            "import",
            "--format",
            "judgebench",
            str(_outputs("arena_hard", "o1-mini-2024-09-12")),
            "--json",
            database_url=database_url,
        ).stdout
    )
    assert (again["judgments_added"], again["already_stored"]) == (0, 700)


def test_labels_import_takes_the_published_judges_beside_the_data(sqlite_url: str) -> None:
    """Given the repository's layout (data/ and outputs/), `labels import judgebench` imports
    every published judge of the split as well, with the same figures."""
    imported = cli_ok("labels", "import", "judgebench", str(JUDGEBENCH), database_url=sqlite_url)
    assert imported.stdout.count("  judge judgebench/") == len(PUBLISHED)
    evaluation = _evaluate(
        sqlite_url, "--judge", "judgebench/arena_hard/o1-mini-2024-09-12", "--labels", LABELS
    )
    _assert_published(evaluation["benchmark"], PUBLISHED[("arena_hard", "o1-mini-2024-09-12")])
    # The platform's own figures sit beside it: each order on its own, both orders combined.
    assert evaluation["orders"]["as_labelled"]["n"] + evaluation["orders"]["swapped"]["n"] > 350


def _rm_bench_accuracy(results: list[dict[str, Any]]) -> dict[str, float]:
    """RM-Bench's compute_accuracy on a total_dataset.json results list, restated with numpy."""

    def matrix(records: list[dict[str, Any]]) -> dict[str, float]:
        acc = np.zeros((3, 3))
        for record in records:
            for i in range(3):
                for j in range(3):
                    if record["score_chosen"][i] > record["score_rejected"][j]:
                        acc[i][j] += 1
        acc /= len(records)
        return {
            "hard_acc": float(np.sum(np.triu(acc, 1)) / 3.0),
            "normal_acc": float(np.mean(np.diag(acc))),
            "easy_acc": float(np.sum(np.tril(acc, -1)) / 3.0),
        }

    domains = {
        d: matrix([r for r in results if r["domain"].startswith(d)])
        for d in ("chat", "math", "code", "safety")
    }
    out = {d: float(np.mean(list(v.values()))) for d, v in domains.items()}
    for key in ("hard_acc", "normal_acc", "easy_acc"):
        out[key] = float(np.mean([domains[d][key] for d in domains]))
    out["total_avg_acc"] = float(np.mean([out[d] for d in domains]))
    return out


def test_rm_bench_scores_give_its_hard_normal_and_easy_accuracy(sqlite_url: str) -> None:
    imported = cli_ok("labels", "import", "rm-bench", str(RM_BENCH), database_url=sqlite_url)
    # 9 records x 9 pairs; record 101's repeated chosen text is still two responses.
    assert "rm-bench: 81 labels (pairwise 81)" in imported.stdout
    cli_ok(
        "judges",
        "import",
        "--format",
        "rm-bench",
        str(RM_RESULTS),
        "--judge",
        "tiny-rm",
        database_url=sqlite_url,
    )
    figures = _evaluate(sqlite_url, "--judge", "tiny-rm", "--labels", "rm-bench")["benchmark"]
    expected = _rm_bench_accuracy(json.loads(RM_RESULTS.read_text(encoding="utf-8")))
    assert figures["name"] == "RM-Bench" and figures["n_prompts"] == 9
    assert figures["average"] == expected["total_avg_acc"]
    assert figures["hard"] == expected["hard_acc"]
    assert figures["normal"] == expected["normal_acc"]
    assert figures["easy"] == expected["easy_acc"]
    for domain in ("chat", "math", "code", "safety"):
        assert figures["domains"][domain]["average"] == expected[domain]
    assert figures["domains_missing"] == []


def test_a_judge_that_scores_is_measured_on_rm_bench_by_its_scores(sqlite_url: str) -> None:
    """A rubric judge (scripted: "Yes" when the response holds Markdown's "**Answer:**") scores
    every response; pairs are compared by its scores. It prefers the Markdown style whatever
    the answer: never right on hard pairs, tied on normal ones, right on easy ones (but record
    101, whose Markdown chosen response is its detailed one)."""
    cli_ok("labels", "import", "rm-bench", str(RM_BENCH), database_url=sqlite_url)
    judge = JudgeSpec(
        name="likes-markdown",
        backend="scripted",
        mode=VerdictMode.CRITERION_PROB,
        backend_options={"yes_if_contains": "**Answer:**"},
    )
    approve_rubrics(sqlite_url, judges=[judge])
    report = _evaluate(sqlite_url, "--judge", "likes-markdown", "--labels", "rm-bench")
    assert report["compared_by"] == "scores" and report["n_judged"] == 81
    figures = report["benchmark"]
    assert figures["compared_by"] == "scores"
    assert (figures["hard"], figures["normal"]) == (0.0, 0.0)
    chat_easy = (0 + (2 / 3 + 2 / 3)) / 3  # record 101 of 3 loses (2, 0) and (2, 1)
    assert figures["domains"]["chat"]["easy"] == pytest.approx(chat_easy)
    for domain in ("math", "code", "safety"):
        assert figures["domains"][domain]["easy"] == pytest.approx(2 / 3)
    averages = [chat_easy / 3, 2 / 9, 2 / 9, 2 / 9]
    assert figures["average"] == pytest.approx(sum(averages) / 4)


def _rewardbench2_scores(rows: list[dict[str, Any]]) -> dict[str, float]:
    """RewardBench 2's subset scores, restated with numpy: outside Ties 1 / (responses tied at
    the top) when the first chosen response is at the top, else 0, averaged; Ties by
    process_single_model."""

    def result(scores: list[float]) -> float:
        values = np.array(scores)
        top = np.max(values)
        return float(1 / np.sum(values == top)) if values[0] == top else 0.0

    def stats(samples: list[tuple[bool, float]]) -> tuple[bool, float | None, float]:
        correct = [s for ok, s in samples if ok]
        incorrect = [s for ok, s in samples if not ok]
        spread = max(correct) - min(correct) if len(correct) > 1 else None
        margin = min(correct) - max(incorrect)
        return margin > 0, spread, margin

    def ties(members: list[dict[str, Any]]) -> float:
        grouped: dict[tuple[str, int], list[tuple[bool, float]]] = defaultdict(list)
        for row in members:
            kind, number = row["id"].split(":")
            for i, score in enumerate(row["scores"]):
                grouped[(kind, int(number))].append((i < row["num_correct"], score))
        ref = {n: stats(s) for (k, n), s in grouped.items() if k == "ref"}
        tied = {n: stats(s) for (k, n), s in grouped.items() if k == "tied"}
        both = set(ref) & set(tied)
        spread = np.array([tied[n][1] for n in both])
        tied_margin = np.array([tied[n][2] for n in both])
        ref_margin = np.array([ref[n][2] for n in both])
        margins = np.nan_to_num(np.tanh(np.minimum(ref_margin, tied_margin) / spread - 1), nan=0.0)
        return float(
            0.30 * np.mean([s[0] for s in tied.values()])
            + 0.30 * np.mean([s[0] for s in ref.values()])
            + 0.20 * np.mean(tied_margin > spread)
            + 0.20 * np.mean(np.minimum(ref_margin, tied_margin) > spread)
            + 0.01 * float(np.mean(margins))
        )

    by_subset: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_subset[row["subset"]].append(row)
    return {
        subset: ties(members)
        if subset.lower() == "ties"
        else sum(result(r["scores"]) for r in members) / len(members)
        for subset, members in by_subset.items()
    }


def test_rewardbench2_is_imported_and_scored_by_its_rule(sqlite_url: str) -> None:
    """RewardBench 2's rows and a reward model's scores: best-of-4 with its tie penalty, the
    Ties subset's own score, and their mean."""
    imported = cli_ok(
        "labels",
        "import",
        "rewardbench2",
        str(REWARDBENCH2 / "reward-bench-2.jsonl"),
        database_url=sqlite_url,
    )
    # 7 best-of-4 rows x 3, ref:1 and ref:2 x 3, tied:1 4 x 3, tied:2 5 x 3.
    assert "rewardbench2: 54 labels (pairwise 54)" in imported.stdout
    scores = REWARDBENCH2 / "scores-tiny-rm.jsonl"
    cli_ok(
        "judges",
        "import",
        "--format",
        "rewardbench2",
        str(scores),
        "--judge",
        "tiny-rm",
        database_url=sqlite_url,
    )
    figures = _evaluate(sqlite_url, "--judge", "tiny-rm", "--labels", "rewardbench2")["benchmark"]
    rows = [json.loads(line) for line in scores.read_text(encoding="utf-8").splitlines()]
    expected = _rewardbench2_scores(rows)
    assert figures["name"] == "RewardBench 2" and figures["n_prompts"] == 11
    assert set(figures["subsets"]) == set(expected)
    for subset, value in expected.items():
        assert figures["subsets"][subset]["score"] == pytest.approx(value, abs=1e-12)
    # By hand: Factuality 1 of 2, Precise IF a 2-way tie at the top (1/2), Math a 3-way tie
    # (1/3) and a win, Safety a win, Focus a loss.
    assert figures["subsets"]["Precise IF"]["score"] == 0.5
    assert figures["subsets"]["Math"]["score"] == pytest.approx((1 / 3 + 1) / 2)
    assert figures["overall"] == pytest.approx(sum(expected.values()) / len(expected), abs=1e-12)


def test_a_pair_of_one_text_twice_is_stored_but_not_labelled(
    sqlite_url: str, tmp_path: Path
) -> None:
    """JudgeBench's Claude split has a pair whose two responses are one text: not a pair the
    platform holds. Its responses are stored, its label and the judges' verdicts on it left
    out, and the import says so."""
    lines = (JUDGEBENCH / "data" / f"{SPLIT}.jsonl").read_text(encoding="utf-8").splitlines()
    pairs = [json.loads(line) for line in lines[:3]]
    pairs[1]["response_B"] = pairs[1]["response_A"]
    (tmp_path / "data").mkdir()
    (tmp_path / "outputs").mkdir()
    (tmp_path / "data" / f"{SPLIT}.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8"
    )
    published = _outputs("arena_hard", "o1-mini-2024-09-12").read_text(encoding="utf-8")
    (tmp_path / "outputs" / _outputs("arena_hard", "o1-mini-2024-09-12").name).write_text(
        "".join(
            line + "\n"
            for line in published.splitlines()
            if json.loads(line)["pair_id"] in {p["pair_id"] for p in pairs}
        ),
        encoding="utf-8",
    )
    imported = cli_ok("labels", "import", "judgebench", str(tmp_path), database_url=sqlite_url)
    assert f"{LABELS}: 2 labels (pairwise 2)" in imported.stdout
    assert "completions: 6 added" in imported.stdout
    assert f"pair {pairs[1]['pair_id']}: its two responses are the same text" in imported.stdout
    # The judge's two decisions on each of the two pairs; those on the third left out.
    assert "o1-mini-2024-09-12: 4 verdicts" in imported.stdout
    assert "pairs of two identical responses left out, as the labels leave them: 1" in (
        imported.stdout
    )
    figures = _evaluate(
        sqlite_url, "--judge", "judgebench/arena_hard/o1-mini-2024-09-12", "--labels", LABELS
    )["benchmark"]
    assert figures["n"] == 2
