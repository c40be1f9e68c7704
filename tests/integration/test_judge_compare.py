"""`rubricsvc judges compare`: several judges on the items all of them judged, and each pair's
difference in agreement with a paired prompt bootstrap; through the real command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.models import Completion, Criterion, Label
from rubricsvc.validation.metrics import bootstrap_interval
from tests.cli_runner import EXAMPLES, add_examples, cli_error, cli_ok
from tests.helpers import read_database
from tests.tiny_model import add_tiny_judge

DEMO_HEALTHBENCH = EXAMPLES / "validation" / "healthbench-10.jsonl"
# Of the demo's ten conversations, the five shortest (conversation and response): 43 graded
# criteria instead of 118, so the model judge (run twice: as is, then calibrated) does a
# third of the demo's work; five prompts are enough for a paired interval over prompts.
SHORTEST_CONVERSATIONS = 5

# Labelled criteria (by position) of each demo rubric: neither checks nor pitfalls.
CRITERIA = {"demo/sleep-advice@1": (1, 2, 3, 4), "demo/explain-recursion@1": (1, 2, 3)}
CRITERIA["demo/haiku-autumn@1"] = (2, 3)
PROMPTS = {"demo/sleep-advice@1": "sleep", "demo/explain-recursion@1": "recursion"}
PROMPTS["demo/haiku-autumn@1"] = "haiku"
# The imported judge gives no verdict on these items, and the opposite of the label on FLIPPED.
UNJUDGED = {("demo-haiku/c", 2), ("demo-haiku/c", 3), ("demo-recursion/b", 1)}
FLIPPED = {("demo-sleep/a", 1), ("demo-sleep/c", 2), ("demo-haiku/a", 3)}


def _items() -> list[tuple[str, str, int, bool]]:
    """(completion, rubric, criterion, met) for every labelled item, in label order: the weak
    answers (b) meet nothing, the others alternate."""
    items = []
    for rubric, criteria in CRITERIA.items():
        for side in ("a", "b", "c"):
            for criterion in criteria:
                met = side != "b" and (criterion + (side == "c")) % 2 == 1
                items.append((f"demo-{PROMPTS[rubric]}/{side}", rubric, criterion, met))
    return items


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _labels(path: Path, items: list[tuple[str, str, int, bool]]) -> Path:
    lines = [
        {
            "kind": "pointwise",
            "completion": completion,
            "rubric": rubric,
            "criterion": criterion,
            "met": met,
            "labeller": "ann",
            "item": f"{completion}#{criterion}",
        }
        for completion, rubric, criterion, met in items
    ]
    return _write(path, lines)


def _setup(url: str, tmp_path: Path) -> None:
    add_examples(url)
    judges = tmp_path / "judges.yaml"
    judges.write_text(
        yaml.safe_dump({"name": "scripted", "backend": "scripted", "mode": "criterion-prob"})
    )
    cli_ok("judges", "add", str(judges), database_url=url)
    cli_ok(
        "labels",
        "import",
        "jsonl",
        str(_labels(tmp_path / "labels.jsonl", _items())),
        "--name",
        "demo-points",
        database_url=url,
    )
    verdicts = [
        {
            "kind": "pointwise",
            "completion": completion,
            "rubric": rubric,
            "criterion": criterion,
            "met": met != ((completion, criterion) in FLIPPED),
        }
        for completion, rubric, criterion, met in _items()
        if (completion, criterion) not in UNJUDGED
    ]
    path = _write(tmp_path / "verdicts.jsonl", verdicts)
    cli_ok("judges", "import", str(path), "--judge", "people", database_url=url)


def _json(url: str, *args: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(cli_ok(*args, "--json", database_url=url).stdout)
    return report


def test_judges_are_compared_on_the_items_all_of_them_judged(
    sqlite_url: str, tmp_path: Path
) -> None:
    _setup(sqlite_url, tmp_path)
    args = ("--labels", "demo-points", "--resamples", "300", "--seed", "7")
    report = _json(sqlite_url, "judges", "compare", "scripted", "people", *args)
    items = _items()
    common = [item for item in items if (item[0], item[2]) not in UNJUDGED]
    assert report["kind"] == "pointwise"
    assert (report["n_labelled"], report["n_common"]) == (len(items), len(common))
    assert report["n_prompts"] == 3
    scripted, people = report["judges"]
    assert scripted["judge"] == "scripted" and people["judge"] == "people"
    assert (scripted["n_judged_in_set"], people["n_judged_in_set"]) == (len(items), len(common))
    assert scripted["n_judged"] == people["n_judged"] == len(common)
    # The scripted judge says "met" (0.9) everywhere; the imported one is right but on FLIPPED.
    met = sum(1 for item in common if item[3])
    assert scripted["agreement"] == pytest.approx(met / len(common))
    assert people["agreement"] == pytest.approx((len(common) - len(FLIPPED)) / len(common))

    # Each judge's figures are what `judges evaluate` reports on a set of just those items.
    cli_ok(
        "labels",
        "import",
        "jsonl",
        str(_labels(tmp_path / "common.jsonl", common)),
        "--name",
        "demo-common",
        database_url=sqlite_url,
    )
    subset = ("--labels", "demo-common", "--resamples", "300", "--seed", "7")
    for figures in (scripted, people):
        alone = _json(sqlite_url, "judges", "evaluate", "--judge", figures["judge"], *subset)
        assert alone["n_labelled"] == alone["n_judged"] == len(common)
        for name in ("agreement", "agreement_ci", "kappa", "kappa_ci", "f1", "ece"):
            assert figures[name] == alone[name], name

    # The difference is the difference of the agreements, its interval a paired bootstrap over
    # prompts: one draw of prompts per replicate, both judges scored on it.
    (pair,) = report["differences"]
    assert (pair["a"], pair["b"]) == ("scripted", "people")
    assert pair["difference"] == scripted["agreement"] - people["agreement"]

    def prompts(session: Session) -> dict[str, int]:
        rows = session.scalars(select(Completion))
        return {c.external_id: c.prompt_id for c in rows if c.external_id}

    prompt_of = read_database(sqlite_url, prompts)
    clusters = [prompt_of[item[0]] for item in common]
    right_scripted = [item[3] for item in common]
    right_people = [(item[0], item[2]) not in FLIPPED for item in common]

    def difference(ix: Any) -> float:
        return (sum(right_scripted[i] for i in ix) - sum(right_people[i] for i in ix)) / len(ix)

    expected = bootstrap_interval(clusters, difference, resamples=300, seed=7)
    assert expected is not None
    assert pair["difference_ci"] == pytest.approx(list(expected))
    low, high = pair["difference_ci"]
    assert low <= pair["difference"] <= high
    assert report["interval"]["clusters"] == "prompts"


def test_the_table_and_the_report_folder(sqlite_url: str, tmp_path: Path) -> None:
    _setup(sqlite_url, tmp_path)
    folder = tmp_path / "report"
    args = ("--labels", "demo-points", "--resamples", "200", "--report", str(folder))
    out = cli_ok("judges", "compare", "scripted", "people", *args, database_url=sqlite_url).stdout
    n_common = len(_items()) - len(UNJUDGED)
    assert f"{n_common} of {len(_items())} labelled items were judged by every judge" in out
    assert "| scripted - people |" in out
    written = (folder / "compare.md").read_text(encoding="utf-8")
    assert "| scripted - people |" in written and "| people | criterion-text |" in written
    assert json.loads((folder / "compare.json").read_text(encoding="utf-8"))["n_common"] == (
        n_common
    )
    assert (folder / "forest.png").stat().st_size > 1000


def test_one_judge_or_a_judge_twice_is_refused(sqlite_url: str, tmp_path: Path) -> None:
    _setup(sqlite_url, tmp_path)
    error = cli_error(
        "judges", "compare", "people", "--labels", "demo-points", database_url=sqlite_url
    )
    assert "at least two judges" in error
    error = cli_error(
        "judges", "compare", "people", "people", "--labels", "demo-points", database_url=sqlite_url
    )
    assert "named twice" in error


def _healthbench_labels(session: Session) -> list[tuple[str, str, int, bool]]:
    """(completion, rubric version, criterion position from 1, met) of every stored label."""
    found = []
    for label in session.scalars(select(Label).order_by(Label.id)):
        completion = session.get(Completion, label.completion_id)
        criterion = session.get(Criterion, label.criterion_id)
        assert completion is not None and criterion is not None
        version = criterion.version
        position = [c.id for c in version.criteria].index(criterion.id) + 1
        found.append((completion.external_id or "", version.ref, position, label.value >= 0.5))
    return found


def _shortest_demo_conversations(path: Path) -> Path:
    """The demo's HealthBench lines with the ``SHORTEST_CONVERSATIONS`` shortest texts, as given."""
    lines = DEMO_HEALTHBENCH.read_text(encoding="utf-8").splitlines()

    def length(line: str) -> int:
        record = json.loads(line)
        return len(json.dumps(record["prompt"])) + len(json.dumps(record["prompt_response"]))

    shortest = sorted(lines, key=length)[:SHORTEST_CONVERSATIONS]
    path.write_text("".join(line + "\n" for line in shortest), encoding="utf-8")
    return path


@pytest.mark.model
@pytest.mark.slow(seconds=10)
def test_healthbench_labels_compare_a_model_judge_its_calibrated_form_and_an_imported_one(
    sqlite_url: str, tmp_path: Path
) -> None:
    """As the demo does: HealthBench conversations' grader verdicts as labels (five of its ten); a
    model judge, its calibrated form (`judges calibrate`) and a judge imported with `judges
    import` (here: the grader's verdicts, every third one turned round). The model judge is the
    tiny one of the embedded model's architecture (tests/tiny_model.py): the comparison is under
    test, not the judges' figures."""
    add_tiny_judge(sqlite_url, tmp_path, "tiny")
    conversations = _shortest_demo_conversations(tmp_path / "healthbench-short.jsonl")
    cli_ok("labels", "import", "healthbench", str(conversations), database_url=sqlite_url)
    cli_ok(
        "judges",
        "calibrate",
        "--judge",
        "tiny",
        "--labels",
        "healthbench-grader",
        database_url=sqlite_url,
        timeout=1800,
    )
    labels = read_database(sqlite_url, _healthbench_labels)
    verdicts = [
        {
            "kind": "pointwise",
            "completion": completion,
            "rubric": rubric,
            "criterion": criterion,
            "met": met != (index % 3 == 0),
        }
        for index, (completion, rubric, criterion, met) in enumerate(labels)
    ]
    path = _write(tmp_path / "turned.jsonl", verdicts)
    cli_ok("judges", "import", str(path), "--judge", "turned", database_url=sqlite_url)
    judges = ("tiny", "tiny-calibrated", "turned")
    args = ("judges", "compare", *judges, "--labels", "healthbench-grader")
    table = cli_ok(*args, database_url=sqlite_url, timeout=1800).stdout
    for name in judges:
        assert f"| {name} |" in table
    assert "95% paired interval" in table
    report = _json(sqlite_url, *args)
    assert [j["judge"] for j in report["judges"]] == list(judges)
    assert 0 < report["n_common"] <= report["n_labelled"] == len(labels)
    assert len(report["differences"]) == 3
    for pair in report["differences"]:
        low, high = pair["difference_ci"]
        assert low <= pair["difference"] <= high
