"""`rubricsvc labels`: label sets imported (PandaLM, HealthBench, JSON Lines), listed and shown,
through the real command; figures recomputed from the stored rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.judging.keys import pairwise_key
from rubricsvc.models import (
    Completion,
    Criterion,
    JudgeConfig,
    Judgment,
    JudgmentStatus,
    Label,
    LabelKind,
    LabelSet,
    Prompt,
    Rubric,
    RubricVersion,
)
from rubricsvc.validation.metrics import majority
from tests.cli_runner import EXAMPLES, cli_error, cli_ok
from tests.helpers import read_database, table_counts

DATA = Path(__file__).resolve().parents[1] / "data"
PANDALM = DATA / "pandalm"
HEALTHBENCH_FILE = DATA / "healthbench_m42_sample" / "data" / "sample" / "judge_responses.jsonl"
TABLES = (Prompt, Rubric, RubricVersion, Criterion, Completion, Judgment, LabelSet, Label)
GPT, PANDALM_7B = "pandalm/gpt-3.5-turbo", "pandalm/pandalm-7b"
# Records repeating an earlier record's prompt and both responses (72 groups); of those, the
# ones gpt-3.5-turbo answers otherwise than the first of their group.
REPEATED_RECORDS, GPT_CONFLICTS = 99, 7


def _counts(database_url: str) -> dict[str, int]:
    return table_counts(database_url, TABLES)


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


# --- PandaLM ------------------------------------------------------------------------------------


def _pandalm_rows(session: Session) -> dict[str, Any]:
    """What the import stored, read back: each item's human majority and, per judge, the
    verdict its judgment (looked up by content key) gives, and every record's own verdict."""
    label_set = session.scalar(select(LabelSet).where(LabelSet.name == "pandalm-human"))
    assert label_set is not None and label_set.rubric_version_id is not None
    version = session.get(RubricVersion, label_set.rubric_version_id)
    assert version is not None
    votes: dict[str, list[str]] = {}
    pairs: dict[str, tuple[int, int, int]] = {}
    for label in session.scalars(select(Label).where(Label.label_set_id == label_set.id)):
        assert label.kind == LabelKind.PAIRWISE and label.other_completion_id is not None
        votes.setdefault(label.item, []).append(label.verdict or "")
        pairs[label.item] = (label.prompt_id, label.completion_id, label.other_completion_id)
    hashes = dict(session.execute(select(Completion.id, Completion.content_hash)).all())
    prompt_hashes = dict(session.execute(select(Prompt.id, Prompt.content_hash)).all())
    judges: dict[str, Any] = {}
    for name in (GPT, PANDALM_7B):
        judge = session.scalar(select(JudgeConfig).where(JudgeConfig.name == name))
        assert judge is not None
        stored = {
            j.cache_key: j
            for j in session.scalars(select(Judgment).where(Judgment.judge_config_id == judge.id))
        }
        by_item = {}
        for item, (prompt_id, first, second) in pairs.items():
            key = pairwise_key(
                judge.config_hash,
                version.content_hash,
                prompt_hashes[prompt_id],
                hashes[first],
                hashes[second],
            )
            by_item[item] = stored[key]
        # Every record's own published verdict: the judgment's, and each repeat's.
        published: dict[str, str] = {}
        for judgment in stored.values():
            detail = judgment.detail or {}
            published[str(detail["idx"])] = judgment.raw_output or ""
            for repeat in detail.get("repeats", []):
                published[str(repeat["idx"])] = repeat["result"]
        judges[name] = {"stored": list(stored.values()), "by_item": by_item, "published": published}
    return {"votes": votes, "judges": judges}


def _agreement(
    majorities: dict[str, str | None], verdicts: dict[str, str | None]
) -> tuple[int, int]:
    judged = {item: v for item, v in verdicts.items() if v is not None}
    return len(judged), sum(1 for item, v in judged.items() if majorities[item] == v)


@pytest.mark.slow
def test_pandalm_import_keeps_every_label_and_verdict(database_url: str) -> None:
    out = cli_ok("labels", "import", "pandalm", str(PANDALM), database_url=database_url).stdout
    assert "pandalm-human: 2997 labels (pairwise 2997); added" in out
    assert "completions: 1998 added, 0 already stored" in out
    assert f"judge {GPT}: 999 verdicts, 936 parsed, 63 unparseable" in out
    assert f"{REPEATED_RECORDS} records repeat" in out and f"({GPT_CONFLICTS} with another" in out
    counts = _counts(database_url)
    assert counts["labels"] == 2997 and counts["label_sets"] == 1
    assert counts["completions"] == 1998
    assert counts["prompts"] == 170  # 999 records ask 170 distinct instructions
    # One judgment per content key: 999 records, 900 distinct (prompt, response1, response2).
    assert counts["judgments"] == 2 * (999 - REPEATED_RECORDS)

    again = cli_ok("labels", "import", "pandalm", str(PANDALM), database_url=database_url)
    assert "nothing added" in again.stdout
    assert "judgments:   0 added, 1800 already stored" in again.stdout
    assert _counts(database_url) == counts

    rows = read_database(database_url, _pandalm_rows)
    votes = rows["votes"]
    assert len(votes) == 999 and all(len(v) == 3 for v in votes.values())
    majorities = {item: majority(v) for item, v in votes.items()}
    assert None not in majorities.values()  # three annotators, never three different labels

    gpt, panda = rows["judges"][GPT], rows["judges"][PANDALM_7B]
    failed = [j for j in gpt["stored"] if j.status == JudgmentStatus.FAILED]
    assert len(gpt["stored"]) == 900 and len(failed) == 57
    for judgment in failed:
        assert judgment.value is None and judgment.verdict is None and judgment.failure == "judge"
        assert judgment.error == f"unparseable verdict: {judgment.raw_output}"
        assert judgment.raw_output in ("Tie", "garbage")
    for judgment in gpt["stored"] + panda["stored"]:
        assert judgment.other_completion_id is not None and judgment.criterion_id is None
        if judgment.status == JudgmentStatus.OK:
            assert (judgment.verdict, judgment.value) in {
                ("first", 1.0),
                ("second", 0.0),
                ("tie", 0.5),
            }

    # The published figures (SOURCE.txt), from every record's stored verdict.
    names = {"1": "first", "2": "second", "0": "tie"}
    published = {
        name: {
            item: names.get(result) for item, result in rows["judges"][name]["published"].items()
        }
        for name in (GPT, PANDALM_7B)
    }
    assert _agreement(majorities, published[GPT]) == (936, 692)
    assert _agreement(majorities, published[PANDALM_7B]) == (999, 667)

    # Looked up by content key, as a judge evaluation does: a repeated record gets the verdict
    # of its content's first record. PandaLM-7B never contradicts itself; gpt-3.5-turbo does on
    # 7 records; one is a parseable repeat (idx 235, "1") of an unparseable first (idx 233,
    # "garbage"), so 935 records are judged, not 936.
    keyed = {
        name: {item: j.verdict for item, j in rows["judges"][name]["by_item"].items()}
        for name in (GPT, PANDALM_7B)
    }
    assert _agreement(majorities, keyed[PANDALM_7B]) == (999, 667)
    assert _agreement(majorities, keyed[GPT]) == (935, 692)


def test_pandalm_label_set_summary(database_url: str) -> None:
    cli_ok("labels", "import", "pandalm", str(PANDALM), database_url=database_url)
    listed = cli_ok("labels", "list", "--json", database_url=database_url).json()
    assert [(s["name"], s["labels"], s["rubric_version"]) for s in listed] == [
        ("pandalm-human", 2997, "pandalm/general@1")
    ]
    assert "3871806e72b4832f815ecafd24d3503c73403f48" in listed[0]["source"]
    shown = cli_ok("labels", "show", "pandalm-human", "--json", database_url=database_url).json()
    pairwise = shown["by_kind"]["pairwise"]
    assert pairwise["items"] == 999 and pairwise["items_with_several_labellers"] == 999
    assert pairwise["labellers"] == {"annotator1": 999, "annotator2": 999, "annotator3": 999}
    assert pairwise["majority_share"] == 1.0  # 879 unanimous, 120 two of three
    assert pairwise["labeller_agreement"] == pytest.approx((879 + 120 / 3) / 999)
    text = cli_ok("labels", "show", "pandalm-human", database_url=database_url).stdout
    assert "2997 labels on 999 items" in text
    missing = cli_error("labels", "show", "nope", database_url=database_url)
    assert missing == "error: no label set named 'nope' (known: pandalm-human)"


# --- HealthBench --------------------------------------------------------------------------------


def test_healthbench_labels_are_the_imported_verdicts(database_url: str) -> None:
    out = cli_ok(
        "labels", "import", "healthbench", str(HEALTHBENCH_FILE), database_url=database_url
    ).stdout
    assert "healthbench-grader: 1157 labels (pointwise 1157); added" in out
    assert "100 of 100 equal the score the source states" in out

    def read(session: Session) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        labels = session.execute(
            select(Label.completion_id, Label.criterion_id, Label.value, Label.verdict, Label.item)
        ).all()
        judge = select(JudgeConfig.id).where(JudgeConfig.name == "imported").scalar_subquery()
        judgments = session.execute(
            select(Judgment.completion_id, Judgment.criterion_id, Judgment.value).where(
                Judgment.judge_config_id == judge
            )
        ).all()
        return [tuple(r) for r in labels], [tuple(r) for r in judgments]

    labels, judgments = read_database(database_url, read)
    assert len(labels) == len(judgments) == 1157
    assert sorted(r[:3] for r in labels) == sorted(judgments)
    assert all(v == ("met" if value == 1.0 else "not met") for *_, value, v, _ in labels)
    assert len({item for *_, item in labels}) == 1157
    again = cli_ok(
        "labels", "import", "healthbench", str(HEALTHBENCH_FILE), database_url=database_url
    )
    assert "nothing added" in again.stdout


# --- JSON Lines ---------------------------------------------------------------------------------


def _examples(database_url: str) -> None:
    cli_ok("rubrics", "add", str(EXAMPLES / "rubrics.yaml"), database_url=database_url)
    cli_ok("completions", "add", str(EXAMPLES / "completions.jsonl"), database_url=database_url)


GOOD: list[dict[str, Any]] = [
    {"kind": "pointwise", "completion": "demo-sleep/a", "rubric": "demo/sleep-advice@1",
     "criterion": 1, "met": True, "labeller": "ann", "item": "sleep-a-1", "tags": ["demo"]},
    {"kind": "pointwise", "completion": "demo-sleep/a", "rubric": "demo/sleep-advice",
     "criterion": 1, "met": False, "labeller": "bob", "item": "sleep-a-1"},
    {"kind": "pointwise", "completion": "demo-haiku/b", "rubric": "demo/haiku-autumn",
     "criterion": "Has three lines", "value": 0.25},
    {"kind": "pairwise", "first": "demo-sleep/a", "second": "demo-sleep/b", "label": "first",
     "labeller": "ann", "item": "sleep-ab"},
    {"kind": "pairwise", "first": "demo-sleep/a", "second": "demo-sleep/b", "label": "first",
     "labeller": "bob", "item": "sleep-ab"},
    {"kind": "pairwise", "first": "demo-haiku/a", "second": "demo-haiku/c", "label": "tie"},
    {"kind": "scalar", "completion": "demo-recursion/a", "score": 5, "scale": [1, 5]},
    {"kind": "scalar", "completion": "demo-recursion/b", "score": 2.5, "scale": [1, 5],
     "labeller": "ann"},
]  # fmt: skip


def test_jsonl_labels_of_all_three_kinds(database_url: str, tmp_path: Path) -> None:
    _examples(database_url)
    path = _write(tmp_path / "demo-labels.jsonl", GOOD)
    out = cli_ok(
        "labels", "import", "jsonl", str(path), "--rubric", "demo/sleep-advice@1",
        database_url=database_url,
    ).stdout  # fmt: skip
    assert "demo-labels: 8 labels (pairwise 3, pointwise 3, scalar 2); added" in out

    def read(session: Session) -> list[tuple[Any, ...]]:
        return [
            (label.kind.value, label.item, label.labeller, label.value, label.verdict)
            for label in session.scalars(select(Label).order_by(Label.id))
        ]

    assert read_database(database_url, read) == [
        ("pointwise", "sleep-a-1", "ann", 1.0, "met"),
        ("pointwise", "sleep-a-1", "bob", 0.0, "not met"),
        ("pointwise", "3", "unknown", 0.25, None),
        ("pairwise", "sleep-ab", "ann", 1.0, "first"),
        ("pairwise", "sleep-ab", "bob", 1.0, "first"),
        ("pairwise", "6", "unknown", 0.5, "tie"),
        ("scalar", "7", "unknown", 5.0, None),
        ("scalar", "8", "ann", 2.5, None),
    ]
    shown = cli_ok("labels", "show", "demo-labels", "--json", database_url=database_url).json()
    assert shown["rubric_version"] == "demo/sleep-advice@1"
    assert shown["by_kind"]["pointwise"]["labeller_agreement"] == 0.0  # ann and bob disagree
    assert shown["by_kind"]["pointwise"]["majority_share"] == pytest.approx(1 / 2)
    assert shown["by_kind"]["pairwise"]["labeller_agreement"] == 1.0
    assert shown["by_kind"]["scalar"]["labeller_agreement"] is None

    before = _counts(database_url)
    again = cli_ok(
        "labels", "import", "jsonl", str(path), "--rubric", "demo/sleep-advice@1",
        database_url=database_url,
    )  # fmt: skip
    assert "already stored with this content: nothing added" in again.stdout
    other = _write(tmp_path / "demo-labels.jsonl", GOOD[:-1])
    refused = cli_error("labels", "import", "jsonl", str(other), database_url=database_url)
    assert refused.startswith("error: label set 'demo-labels' is already stored with other")
    assert "another name (--name)" in refused
    renamed = cli_ok(
        "labels", "import", "jsonl", str(other), "--name", "demo-7", database_url=database_url
    )
    assert "demo-7: 7 labels" in renamed.stdout
    assert _counts(database_url)["labels"] == before["labels"] + 7


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "no stored item": (
        {"kind": "scalar", "completion": "demo-nowhere/z", "score": 3, "scale": [1, 5]},
        "no stored completion with external id 'demo-nowhere/z'",
    ),
    "pair across two prompts": (
        {"kind": "pairwise", "first": "demo-sleep/a", "second": "demo-haiku/a", "label": "tie"},
        "a pairwise label compares two completions of one prompt",
    ),
    "scale outside its range": (
        {"kind": "scalar", "completion": "demo-recursion/a", "score": 7, "scale": [1, 5]},
        "score 7 is outside its scale [1, 5]",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_label_stores_nothing(database_url: str, tmp_path: Path, case: str) -> None:
    _examples(database_url)
    bad, message = BAD[case]
    # Good labels first: they are validated, resolved, and still not stored.
    path = _write(tmp_path / "bad.jsonl", [*GOOD[:4], bad, GOOD[5]])
    before = _counts(database_url)
    error = cli_error("labels", "import", "jsonl", str(path), database_url=database_url)
    assert error.startswith(f"error: {path}:5: "), error
    assert message in error and "\n" not in error
    assert _counts(database_url) == before


def test_other_bad_lines_name_their_line(database_url: str, tmp_path: Path) -> None:
    _examples(database_url)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"kind": "ranking"}, "kind: expected one of pointwise, pairwise, scalar, got 'ranking'"),
        ({"kind": "pairwise", "first": "demo-sleep/a", "second": "demo-sleep/a", "label": "tie"},
         "two different completions"),
        ({"kind": "pointwise", "completion": "demo-sleep/a", "rubric": "demo/sleep-advice",
          "criterion": 99, "met": True}, "has no criterion 99"),
        ({"kind": "pointwise", "completion": "demo-haiku/a", "rubric": "demo/sleep-advice",
          "criterion": 1, "met": True}, "belongs to a rubric of prompt"),
        ({"kind": "pointwise", "completion": "demo-sleep/a", "rubric": "demo/sleep-advice",
          "criterion": 1, "value": 1.5}, "pointwise value 1.5 is outside [0, 1]"),
        ({"kind": "pointwise", "completion": "demo-sleep/a", "rubric": "demo/sleep-advice",
          "criterion": 1}, "give exactly one of 'met'"),
        ({"kind": "scalar", "completion": "demo-sleep/a", "score": "3", "scale": [1, 5]},
         "score:"),
        (GOOD[0], "labeller 'ann' labels item 'sleep-a-1' twice"),
    ]  # fmt: skip
    before = _counts(database_url)
    for line, message in cases:
        path = _write(tmp_path / "bad.jsonl", [GOOD[0], line])
        error = cli_error("labels", "import", "jsonl", str(path), database_url=database_url)
        assert error.startswith(f"error: {path}:2: "), error
        assert message in error and "\n" not in error, error
    assert _counts(database_url) == before
    unknown_rubric = cli_error(
        "labels", "import", "jsonl", str(_write(tmp_path / "ok.jsonl", GOOD)),
        "--rubric", "nope@1", database_url=database_url,
    )  # fmt: skip
    assert unknown_rubric == "error: no rubric named 'nope'"


def test_an_unknown_format_lists_the_formats(database_url: str, tmp_path: Path) -> None:
    error = cli_error("labels", "import", "csv", str(tmp_path), database_url=database_url)
    assert error.startswith("error: unknown label format 'csv'; formats: pandalm: ")
    assert "healthbench: " in error and "jsonl: " in error
    assert "\n" not in error
