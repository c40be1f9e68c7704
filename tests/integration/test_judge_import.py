"""`rubricsvc judges import`: a judge's verdicts from JSON Lines, stored as judgments of an
imported judge, and `judges evaluate`'s figures per order; through the real command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.models import JudgeConfig, Judgment
from tests.cli_runner import EXAMPLES, cli_error, cli_ok
from tests.helpers import read_database

DATA = Path(__file__).resolve().parents[1] / "data"
PANDALM = DATA / "pandalm"
RUBRIC = "demo/sleep-advice@1"
MIRROR = {"first": "second", "second": "first", "tie": "tie"}
ABSENT = "-"  # no verdict line in that order

# Twenty labelled pairs (a, b): the label, the verdict with a shown first (as labelled) and the
# verdict with b shown first (swapped), each as that order's own first / second / tie; None:
# the judge gave no valid verdict (null); ABSENT: no line. Per row: whether each order is right
# (the swapped verdict mirrored is the label; a tie agrees only with a tie), and whether the
# two orders name the same response (or both tie).
PAIRS: list[tuple[str, str | None, str | None]] = [
    ("first", "first", "second"),  # 1  right, right; same (a)
    ("first", "first", "second"),  # 2  right, right; same (a)
    ("first", "first", "first"),  # 3  right, wrong; a then b
    ("first", "second", "first"),  # 4  wrong, wrong; same (b)
    ("second", "second", "first"),  # 5  right, right; same (b)
    ("second", "second", "second"),  # 6  right, wrong; b then a
    ("second", "first", "first"),  # 7  wrong, right; a then b
    ("tie", "tie", "tie"),  # 8  right, right; same (tie)
    ("tie", "first", "tie"),  # 9  wrong, right; a then tie
    ("tie", "tie", "first"),  # 10 right, wrong; tie then b
    ("first", "tie", "tie"),  # 11 wrong, wrong; same (tie)
    ("second", "tie", "second"),  # 12 wrong, wrong; tie then a
    ("first", None, "second"),  # 13 failed, right
    ("second", "second", None),  # 14 right, failed
    ("first", None, None),  # 15 failed, failed
    ("first", "first", ABSENT),  # 16 right, -
    ("second", ABSENT, "first"),  # 17 -, right
    ("tie", None, "tie"),  # 18 failed, right
    ("first", "first", "second"),  # 19 right, right; same (a)
    ("second", "first", "second"),  # 20 wrong, wrong; same (a)
]
# Counted by hand from the table above.
EXPECTED = {
    "orders": {
        # rows with a valid verdict in this order; of them, right; rows with a null verdict
        "as_labelled": {"n": 16, "correct": 10, "agreement": 10 / 16, "failed": 3},
        "swapped": {"n": 17, "correct": 10, "agreement": 10 / 17, "failed": 2},
    },
    # rows 1-12, 19, 20 have valid verdicts in both orders; 1, 2, 5, 8, 19 are right in both
    "both_orders_correct": {"n": 14, "correct": 5},
    # the same response (or both tie): 1, 2, 4, 5, 8, 11, 19, 20
    "position_consistency": {"n": 14, "same": 8, "share": 8 / 14},
}


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _pairs_stored(database_url: str, tmp_path: Path) -> None:
    """The demo rubrics and forty completions of the sleep prompt, two per pair."""
    cli_ok("rubrics", "add", str(EXAMPLES / "rubrics.yaml"), database_url=database_url)
    completions = [
        {
            "external_id": f"pair{row}/{side}",
            "prompt_external_id": "demo-sleep",
            "text": f"Answer {side} of pair {row}: sleep at fixed hours ({'!' * row}).",
        }
        for row in range(1, len(PAIRS) + 1)
        for side in ("a", "b")
    ]
    path = _write(tmp_path / "pairs.jsonl", completions)
    cli_ok("completions", "add", str(path), database_url=database_url)


def _verdict_lines(item: bool = False) -> list[dict[str, Any]]:
    lines = []
    for row, (_, as_labelled, swapped) in enumerate(PAIRS, start=1):
        a, b = f"pair{row}/a", f"pair{row}/b"
        for first, second, verdict in ((a, b, as_labelled), (b, a, swapped)):
            if verdict == ABSENT:
                continue
            line: dict[str, Any] = {
                "kind": "pairwise",
                "first": first,
                "second": second,
                "verdict": verdict,
            }
            if verdict is None:
                line["raw"] = "I cannot decide"
            if item:
                line["item"] = f"p{row}"
            lines.append(line)
    return lines


def _judgments(database_url: str, judge: str) -> dict[tuple[int | None, int | None], Any]:
    def read(session: Session) -> dict[tuple[int | None, int | None], Any]:
        config = session.scalars(select(JudgeConfig).where(JudgeConfig.name == judge)).one()
        rows = session.scalars(select(Judgment).where(Judgment.judge_config_id == config.id))
        return {
            (j.completion_id, j.other_completion_id): (
                j.status,
                j.value,
                j.verdict,
                (j.detail or {}).get("by_item"),
                j.reasoning,
                j.raw_output,
            )
            for j in rows
        }

    found: dict[tuple[int | None, int | None], Any] = read_database(database_url, read)
    return found


def _count_judgments(database_url: str) -> int:
    def read(session: Session) -> int:
        return session.scalar(select(func.count()).select_from(Judgment)) or 0

    count: int = read_database(database_url, read)
    return count


def _evaluate(database_url: str, *args: str) -> dict[str, Any]:
    result = cli_ok(
        "judges", "evaluate", *args, "--resamples", "100", "--json",
        database_url=database_url, timeout=900,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_per_order_figures_of_a_judge_with_verdicts_in_both_orders(
    database_url: str, tmp_path: Path
) -> None:
    _pairs_stored(database_url, tmp_path)
    labels = [
        {"kind": "pairwise", "first": f"pair{row}/a", "second": f"pair{row}/b", "label": label,
         "item": f"p{row}"}
        for row, (label, _, _) in enumerate(PAIRS, start=1)
    ]  # fmt: skip
    cli_ok(
        "labels", "import", "jsonl", str(_write(tmp_path / "twenty.jsonl", labels)),
        "--rubric", RUBRIC, database_url=database_url,
    )  # fmt: skip
    verdicts = _write(tmp_path / "verdicts.jsonl", _verdict_lines())
    out = cli_ok(
        "judges", "import", str(verdicts), "--judge", "hand", "--rubric", RUBRIC, "--json",
        database_url=database_url,
    ).json()  # fmt: skip
    lines = 2 * len(PAIRS) - 2  # rows 16 and 17 have one order each
    assert (out["verdicts"], out["ok"], out["failed"]) == (lines, lines - 5, 5)
    assert (out["added"], out["judgments_added"], out["already_stored"]) == (lines, lines, 0)
    assert (out["mode"], out["model"], out["judge_created"]) == ("pairwise", "hand", True)
    # Without --rubric: each prompt's own newest version, the one a label set without one uses.
    default = cli_ok(
        "judges", "import", str(verdicts), "--judge", "hand-2", "--json", database_url=database_url
    ).json()
    assert default["rubrics"] == [RUBRIC] and default["judgments_added"] == lines

    report = _evaluate(database_url, "--judge", "hand", "--labels", "twenty")
    for name, expected in EXPECTED.items():
        assert report[name] == expected, name  # exactly: each share is the same division
    # Today's fields stay, and agree with the new ones.
    assert report["n_labelled"] == 20 and report["n_judged"] == 19  # row 15: no valid verdict
    assert report["position"]["both_orders_judged"] == 14
    assert report["position"]["consistency"] == pytest.approx(8 / 14)

    shown = cli_ok(
        "judges", "evaluate", "--judge", "hand", "--labels", "twenty", "--resamples", "100",
        database_url=database_url,
    ).stdout  # fmt: skip
    assert "agreement, as labelled order (10 of 16; 3 failed)" in shown
    assert "agreement, swapped order (10 of 17; 2 failed)" in shown
    assert "pairs right in both orders" in shown and "5 of 14" in shown

    # The same file again adds nothing.
    before = _count_judgments(database_url)
    again = cli_ok(
        "judges", "import", str(verdicts), "--judge", "hand", "--rubric", RUBRIC, "--json",
        database_url=database_url,
    ).json()  # fmt: skip
    assert (again["added"], again["already_stored"]) == (0, lines)
    assert (again["judgments_added"], again["judgments_already_stored"]) == (0, lines)
    assert again["judge_created"] is False
    assert _count_judgments(database_url) == before


def test_verdicts_tied_to_items(database_url: str, tmp_path: Path) -> None:
    """Two label items on the same content (completions with the same texts): each item's
    labels meet that item's own verdict, in both orders; a new item extends the stored
    judgment, and the same item said otherwise is refused."""
    _pairs_stored(database_url, tmp_path)
    twins = [
        {"external_id": f"twin/{side}", "prompt_external_id": "demo-sleep",
         "text": f"Answer {side} of pair 1: sleep at fixed hours (!)."}
        for side in ("a", "b")
    ]  # fmt: skip
    cli_ok("completions", "add", str(_write(tmp_path / "twins.jsonl", twins)),
           database_url=database_url)  # fmt: skip
    labels = [
        {"kind": "pairwise", "first": "pair1/a", "second": "pair1/b", "label": "first",
         "item": "one"},
        {"kind": "pairwise", "first": "twin/a", "second": "twin/b", "label": "first",
         "item": "two"},
    ]  # fmt: skip
    cli_ok(
        "labels", "import", "jsonl", str(_write(tmp_path / "twins-labels.jsonl", labels)),
        "--rubric", RUBRIC, database_url=database_url,
    )  # fmt: skip
    pair = {"kind": "pairwise", "first": "pair1/a", "second": "pair1/b"}
    swapped = {"kind": "pairwise", "first": "pair1/b", "second": "pair1/a"}
    first_file = _write(
        tmp_path / "items.jsonl",
        [
            {**pair, "verdict": "first", "item": "one"},
            {**pair, "verdict": "second", "item": "two"},  # the same content, said otherwise
            {**swapped, "verdict": "second", "item": "one"},
        ],
    )
    out = cli_ok(
        "judges", "import", str(first_file), "--judge", "itemized", "--rubric", RUBRIC,
        "--json", database_url=database_url,
    ).json()  # fmt: skip
    assert (out["judgments_added"], out["added"], out["repeats"], out["conflicts"]) == (2, 3, 1, 1)
    report = _evaluate(database_url, "--judge", "itemized", "--labels", "twins-labels")
    # "one": right in both orders; "two": wrong as labelled, and no verdict of its own swapped.
    assert report["orders"]["as_labelled"] == {"n": 2, "correct": 1, "agreement": 0.5, "failed": 0}
    assert report["orders"]["swapped"] == {"n": 1, "correct": 1, "agreement": 1.0, "failed": 0}
    assert report["both_orders_correct"] == {"n": 1, "correct": 1}

    extend = _write(tmp_path / "more.jsonl", [{**swapped, "verdict": "tie", "item": "two"}])
    out = cli_ok(
        "judges", "import", str(extend), "--judge", "itemized", "--rubric", RUBRIC, "--json",
        database_url=database_url,
    ).json()  # fmt: skip
    assert (out["judgments_added"], out["judgments_extended"], out["added"]) == (0, 1, 1)
    stored = _judgments(database_url, "itemized")
    assert sorted(json.dumps(by_item) for _, _, _, by_item, _, _ in stored.values()) == [
        json.dumps({"one": "first", "two": "second"}),
        json.dumps({"one": "second", "two": "tie"}),
    ]
    report = _evaluate(database_url, "--judge", "itemized", "--labels", "twins-labels")
    assert report["orders"]["swapped"]["n"] == 2
    assert report["position_consistency"] == {"n": 2, "same": 1, "share": 0.5}

    before = _judgments(database_url, "itemized")
    contradicting = _write(tmp_path / "no.jsonl", [{**pair, "verdict": "tie", "item": "one"}])
    error = cli_error(
        "judges", "import", str(contradicting), "--judge", "itemized", "--rubric", RUBRIC,
        database_url=database_url,
    )  # fmt: skip
    assert error == (
        f"error: {contradicting}:1: the verdict 'tie' for item 'one' contradicts 'first' at the "
        "stored judgment (one verdict per content and item: name each record's item to keep "
        "several)"
    )
    unnamed = _write(tmp_path / "unnamed.jsonl", [{**pair, "verdict": "first"}])
    error = cli_error(
        "judges", "import", str(unnamed), "--judge", "itemized", "--rubric", RUBRIC,
        database_url=database_url,
    )  # fmt: skip
    assert error.startswith(f"error: {unnamed}:1: this verdict names no item, but the verdicts")
    assert _judgments(database_url, "itemized") == before


BAD: dict[str, tuple[list[dict[str, Any]], str]] = {
    "unknown completion": (
        [{"kind": "pairwise", "first": "pair1/a", "second": "pair1/z", "verdict": "first"}],
        "no stored completion with external id 'pair1/z'",
    ),
    "contradiction": (
        [{"kind": "pairwise", "first": "pair1/a", "second": "pair1/b", "verdict": "tie"}],
        "the verdict 'tie' contradicts 'first' at line 1",
    ),
    "another mode": (
        [{"kind": "scalar", "completion": "pair1/a", "score": 3, "scale": [1, 5]}],
        "a judge has one verdict mode: line 1 holds pairwise verdicts (mode pairwise), this line "
        "scalar verdicts",
    ),
    "one completion twice": (
        [{"kind": "pairwise", "first": "pair1/a", "second": "pair1/a", "verdict": "first"}],
        "a pairwise verdict compares two different completions",
    ),
    "bad verdict": (
        [{"kind": "pairwise", "first": "pair1/a", "second": "pair1/b", "verdict": "1"}],
        "verdict: Input should be 'first', 'second' or 'tie'",
    ),
    "a pair across prompts": (
        [{"kind": "pairwise", "first": "pair1/a", "second": "demo-haiku/a", "verdict": "first"}],
        "a pairwise verdict compares two completions of one prompt",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_line_fails_the_file_and_stores_nothing(
    sqlite_url: str, tmp_path: Path, case: str
) -> None:
    _pairs_stored(sqlite_url, tmp_path)
    cli_ok("completions", "add", str(EXAMPLES / "completions.jsonl"), database_url=sqlite_url)
    good = {"kind": "pairwise", "first": "pair1/a", "second": "pair1/b", "verdict": "first"}
    bad, message = BAD[case]
    path = _write(tmp_path / "bad.jsonl", [good, *bad, {**good, "first": "pair2/a",
                                                         "second": "pair2/b"}])  # fmt: skip
    error = cli_error("judges", "import", str(path), "--judge", "j", database_url=sqlite_url)
    assert error.startswith(f"error: {path}:2: "), error
    assert message in error and "\n" not in error, error
    assert _count_judgments(sqlite_url) == 0

    def judges(session: Session) -> int:
        return session.scalar(select(func.count()).select_from(JudgeConfig)) or 0

    assert read_database(sqlite_url, judges) == 0


def test_pointwise_and_scalar_verdicts(database_url: str, tmp_path: Path) -> None:
    """Pointwise `met` makes a criterion-text judge, `value` a criterion-prob one, scalar a
    holistic one; each is measured against labels of its kind, and a judge name stored with
    another mode or backend is refused."""
    _pairs_stored(database_url, tmp_path)
    point = {"kind": "pointwise", "rubric": "demo/sleep-advice", "criterion": 1}
    labels = [
        {**point, "completion": "pair1/a", "met": True, "item": "a1"},
        {**point, "completion": "pair1/b", "met": False, "item": "b1"},
        {**point, "completion": "pair2/a", "met": True, "item": "a2"},
    ]
    cli_ok("labels", "import", "jsonl", str(_write(tmp_path / "points.jsonl", labels)),
           database_url=database_url)  # fmt: skip
    met = [
        {**point, "completion": "pair1/a", "met": True, "reasoning": "fixed hours"},
        {**point, "completion": "pair1/b", "met": True},
        {**point, "completion": "pair2/a", "met": True,
         "criterion": "Recommends keeping a consistent sleep and wake time, including weekends"},
    ]  # fmt: skip
    out = cli_ok(
        "judges", "import", str(_write(tmp_path / "met.jsonl", met)), "--judge", "texts",
        "--json", database_url=database_url,
    ).json()  # fmt: skip
    assert (out["mode"], out["judgments_added"], out["rubrics"]) == ("criterion-text", 3, [RUBRIC])
    report = _evaluate(database_url, "--judge", "texts", "--labels", "points")
    assert (report["n_judged"], report["agreement"]) == (3, pytest.approx(2 / 3))

    probs = [{**line, "value": v} for line, v in zip(labels, (0.9, 0.2, 0.4), strict=True)]
    for line in probs:
        del line["met"], line["item"]
    cli_ok("judges", "import", str(_write(tmp_path / "probs.jsonl", probs)), "--judge", "probs",
           database_url=database_url)  # fmt: skip
    report = _evaluate(database_url, "--judge", "probs", "--labels", "points")
    assert report["mode"] == "criterion-prob" and report["agreement"] == pytest.approx(2 / 3)

    scores = {"pair1/a": 5, "pair1/b": 2, "pair2/a": 4, "pair2/b": 1}
    scalar_labels = [
        {"kind": "scalar", "completion": c, "score": s, "scale": [1, 5]} for c, s in scores.items()
    ]
    cli_ok(
        "labels", "import", "jsonl", str(_write(tmp_path / "scores.jsonl", scalar_labels)),
        "--rubric", RUBRIC, database_url=database_url,
    )  # fmt: skip
    judged = [  # on 0..10: the labels' order, but for pair2/b above pair1/b
        {"kind": "scalar", "completion": c, "score": s, "scale": [0, 10]}
        for c, s in zip(scores, (9, 3, 6, 4), strict=True)
    ]
    out = cli_ok(
        "judges", "import", str(_write(tmp_path / "holistic.jsonl", judged)), "--judge",
        "scorer", "--rubric", RUBRIC, "--json", database_url=database_url,
    ).json()  # fmt: skip
    assert (out["mode"], out["rubrics"], out["judgments_added"]) == ("holistic", [RUBRIC], 4)
    values = sorted(v for _, v, _, _, _, _ in _judgments(database_url, "scorer").values())
    assert values == pytest.approx([0.3, 0.4, 0.6, 0.9])
    report = _evaluate(database_url, "--judge", "scorer", "--labels", "scores")
    assert report["kind"] == "scalar" and report["n_judged"] == 4
    assert report["kendall"] == pytest.approx(4 / 6)  # 5 of 6 pairs concordant: (5 - 1) / 6

    refused = cli_error(
        "judges", "import", str(_write(tmp_path / "met.jsonl", met)), "--judge", "scorer",
        database_url=database_url,
    )  # fmt: skip
    assert refused == (
        "error: judge 'scorer' holds scalar verdicts (mode holistic); this file holds pointwise "
        "verdicts with 'met' (mode criterion-text): import them under another --judge"
    )
    other_model = cli_error(
        "judges", "import", str(tmp_path / "met.jsonl"), "--judge", "texts", "--model", "gpt-x",
        database_url=database_url,
    )  # fmt: skip
    assert other_model == (
        "error: judge 'texts' is stored with model 'texts', not 'gpt-x' (configs are never "
        "edited): give another --judge"
    )
    with_rubric = cli_error(
        "judges", "import", str(tmp_path / "met.jsonl"), "--judge", "texts", "--rubric", RUBRIC,
        database_url=database_url,
    )  # fmt: skip
    assert "--rubric applies to pairwise and scalar verdicts" in with_rubric
    builtin = cli_error(
        "judges", "import", str(tmp_path / "met.jsonl"), "--judge", "embedded",
        database_url=database_url,
    )  # fmt: skip
    assert builtin == "error: judge 'embedded' is built in: import the verdicts under another name"


# --- PandaLM, through `judges import` ---------------------------------------------------------

# PandaLM's answer (SOURCE.txt): 1 = response1 better, 2 = response2 better, 0 = a tie; any
# other answer is no valid verdict.
PANDALM_ANSWERS = {"1": "first", "2": "second", "0": "tie"}
PANDALM_JUDGES = {
    "pandalm/gpt-3.5-turbo": ("gpt-3.5-turbo-testset-v1.json", "gpt_"),
    "pandalm/pandalm-7b": ("pandalm-7b-testset-v1.json", "pandalm_"),
}


def _pandalm_jsonl(folder: Path, judge: str) -> Path:
    """A judge's published verdicts as `judges import` lines: response1 shown first, the
    record's idx its item (the label item of `labels import pandalm`)."""
    file_name, prefix = PANDALM_JUDGES[judge]
    records = json.loads((PANDALM / file_name).read_text(encoding="utf-8"))
    lines = []
    for record in records:
        result = str(record[f"{prefix}result"]).strip()
        lines.append(
            {
                "kind": "pairwise",
                "first": f"pandalm/{record['idx']}/1",
                "second": f"pandalm/{record['idx']}/2",
                "verdict": PANDALM_ANSWERS.get(result),
                "item": record["idx"],
                "reasoning": record[f"{prefix}reason"],
                "raw": str(record[f"{prefix}result"]),
            }
        )
    return _write(folder / f"{judge.replace('/', '-')}.jsonl", lines)


@pytest.mark.slow
def test_pandalm_verdicts_through_judges_import_reproduce_exactly(
    sqlite_url: str, tmp_path: Path
) -> None:
    """SOURCE.txt's figures from JSON Lines written from PandaLM's files: 692 of 936 for
    gpt-3.5-turbo, 667 of 999 for PandaLM-7B; the judgments are those of PandaLM's importer."""
    cli_ok("labels", "import", "pandalm", str(PANDALM), database_url=sqlite_url)
    expected = {"pandalm/gpt-3.5-turbo": (936, 692, 63, 7), "pandalm/pandalm-7b": (999, 667, 0, 0)}
    for judge, (judged, correct, failed, conflicts) in expected.items():
        path = _pandalm_jsonl(tmp_path, judge)
        # Into the importer's own judge: every verdict is already stored, none contradicts.
        same = cli_ok(
            "judges", "import", str(path), "--judge", judge, "--rubric", "pandalm/general@1",
            "--json", database_url=sqlite_url,
        ).json()  # fmt: skip
        assert (same["added"], same["already_stored"], same["judgments_already_stored"]) == (
            0,
            999,
            900,
        )
        assert same["judgments_added"] == same["judgments_extended"] == 0
        # As a judge of its own: the same judgments, made from the lines alone.
        name = f"{judge}-jsonl"
        out = cli_ok(
            "judges", "import", str(path), "--judge", name, "--rubric", "pandalm/general@1",
            "--json", database_url=sqlite_url,
        ).json()  # fmt: skip
        assert (out["verdicts"], out["ok"], out["failed"]) == (999, 999 - failed, failed)
        assert (out["judgments_added"], out["repeats"], out["conflicts"]) == (900, 99, conflicts)
        assert _judgments(sqlite_url, name) == _judgments(sqlite_url, judge)
        for evaluated in (name, judge):
            report = _evaluate(sqlite_url, "--judge", evaluated, "--labels", "pandalm-human")
            assert (report["n_labelled"], report["n_judged"], report["correct"]) == (
                999,
                judged,
                correct,
            )
            # One order per record: no per-order figures.
            assert "orders" not in report and report["position"]["both_orders_judged"] == 0
    assert _judgments(sqlite_url, "pandalm/gpt-3.5-turbo") != _judgments(
        sqlite_url, "pandalm/pandalm-7b"
    )
