"""Citation criteria end to end: a report's cited claims checked against the documents the
completion carries, by the bundled model, in process, through the reward route and on a Celery
worker; documents stored once and named again by their content hash; a document named by a hash
that nothing stored has is refused naming the record, with nothing of the batch stored.

The constructed pair: one report, scored twice, once with documents that state what it claims
and once with documents on the same subjects that do not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from rubricsvc.documents import document_hash
from rubricsvc.models import Completion, Document
from tests.api_harness import api_client, bearer
from tests.cli_runner import cli_error, cli_ok
from tests.helpers import read_database
from tests.workers_harness import MakeCluster, require_embedded_model, score_via_celery

PROMPT = "Write a short report on Lyon's population, with sources."
REPORT = (
    "Lyon is the third-largest city in France [1]. Its population was 522,250 at the 2021 "
    "census [2]. The city lies at the confluence of the Rhône and the Saône [1].\n\n"
    "## References\n"
    "[1] Lyon - Wikipedia. https://en.wikipedia.org/wiki/Lyon\n"
    "[2] INSEE census 2021. https://www.insee.fr/lyon\n"
)
WIKI, INSEE = "https://en.wikipedia.org/wiki/Lyon", "https://www.insee.fr/lyon"
SUPPORTING = [
    {
        "label": "1",
        "url": WIKI,
        "title": "Lyon",
        "text": "Lyon is the third-largest city of France after Paris and Marseille. It is "
        "located at the confluence of the rivers Rhône and Saône.",
    },
    {
        "label": "2",
        "url": INSEE,
        "title": "Census 2021",
        "text": "According to the 2021 census, the commune of Lyon had a population of 522,250 "
        "inhabitants.",
    },
]
UNSUPPORTING = [
    {
        "label": "1",
        "url": WIKI,
        "title": "Lyon",
        "text": "Lyon is famous for its cuisine, in particular its bouchons, small restaurants "
        "serving local dishes such as quenelles.",
    },
    {
        "label": "2",
        "url": INSEE,
        "title": "Census 2021",
        "text": "The census of 2021 counted the population of Marseille at 873,076 "
        "inhabitants, making it the second city of France.",
    },
]
CITATIONS = "The report's cited claims are supported by the sources they cite"
RUBRIC: dict[str, Any] = {
    "name": "dr/lyon",
    "prompt": {"external_id": "lyon-report", "text": PROMPT},
    "criteria": [
        {"text": CITATIONS, "kind": "citations", "weight": 3},
        {"text": "States the population of Lyon", "weight": 1},
        {
            "text": "Under 200 words",
            "kind": "check",
            "check": {"type": "word_count", "max": 200},
            "weight": 1,
        },
    ],
}
CLAIMS = [
    "Lyon is the third-largest city in France.",
    "Its population was 522,250 at the 2021 census.",
    "The city lies at the confluence of the Rhône and the Saône.",
]


def _records() -> list[dict[str, Any]]:
    base = {"prompt_external_id": "lyon-report", "text": REPORT}
    return [
        {**base, "external_id": "supported", "documents": SUPPORTING},
        {**base, "external_id": "unsupported", "documents": UNSUPPORTING},
    ]


def _load(cli: Any, tmp_path: Path) -> None:
    rubric = tmp_path / "rubric.json"
    rubric.write_text(json.dumps(RUBRIC))
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    for args in (
        ("rubrics", "add", str(rubric)),
        ("rubrics", "approve", "dr/lyon"),
        ("completions", "add", str(completions)),
    ):
        result = cli(*args)
        assert result.code == 0, result.stderr


def _citations(score: dict[str, Any]) -> dict[str, Any]:
    (entry,) = [c for c in score["criteria"] if c["text"] == CITATIONS]
    return entry


def _assert_supporting_documents_score_higher(scores: list[dict[str, Any]]) -> None:
    by_id = {s["completion_external_id"]: s for s in scores}
    supported, unsupported = by_id["supported"], by_id["unsupported"]
    for score in (supported, unsupported):
        entry = _citations(score)
        assert entry["status"] == "ok" and entry["citations"]["count"] == 3
        assert 0.0 < entry["value"] < 1.0  # the model's mean P(yes) over the three pairs
    # The same report: only the documents differ, and with them the model's verdicts.
    assert _citations(supported)["value"] > _citations(unsupported)["value"]
    assert supported["value"] > unsupported["value"]


@pytest.mark.model
def test_a_report_citing_documents_that_do_not_support_it_scores_lower(
    sqlite_url: str, tmp_path: Path
) -> None:
    require_embedded_model()
    _load(lambda *a: cli_ok(*a, database_url=sqlite_url), tmp_path)
    report = cli_ok("score", "--json", database_url=sqlite_url).json()
    assert report["failed"] == 0
    _assert_supporting_documents_score_higher(report["scores"])
    entry = _citations(report["scores"][0])
    listed = {(u["claim"], u["label"]) for u in entry["citations"]["unsupported"]}
    pairs = {(CLAIMS[0], "1"), (CLAIMS[1], "2"), (CLAIMS[2], "1")}
    # Every pair the small model doubts is listed with its claim, label and support.
    assert listed <= pairs
    assert all(
        "support" in u and u["url"] in (WIKI, INSEE) for u in entry["citations"]["unsupported"]
    )
    # Four documents in all, each stored once; both completions list two.
    assert read_database(sqlite_url, lambda s: s.scalar(select(func.count(Document.id)))) == 4
    exported = cli_ok(
        "scores", "export", "--judge", "embedded", "--aggregation", "rar", database_url=sqlite_url
    ).stdout.splitlines()
    line = {x["completion_external_id"]: x for x in map(json.loads, exported)}["supported"]
    assert [(d["label"], d["url"]) for d in line["documents"]] == [("1", WIKI), ("2", INSEE)]
    assert line["documents"][1]["content_hash"] == document_hash(
        INSEE, SUPPORTING[1]["title"], SUPPORTING[1]["text"]
    )


@pytest.mark.model
@pytest.mark.slow
def test_citations_score_the_same_on_a_celery_worker(
    make_cluster: MakeCluster, tmp_path: Path
) -> None:
    require_embedded_model()
    local = make_cluster("redis")
    _load(local.cli, tmp_path)
    in_process = local.cli("score", "--via", "inprocess", "--json")
    assert in_process.code == 0, in_process.stderr
    local_scores = json.loads(in_process.stdout)["scores"]

    remote = make_cluster("redis")
    _load(remote.cli, tmp_path)
    remote.start_worker("embedded").wait_ready(timeout=120)
    job = score_via_celery(remote, judge="embedded").json()
    assert job["failed"] == 0
    on_worker = {s["completion_external_id"]: s for s in job["scores"]}
    _assert_supporting_documents_score_higher(list(on_worker.values()))
    for score in local_scores:
        remote_score = on_worker[score["completion_external_id"]]
        assert remote_score["value"] == pytest.approx(score["value"], abs=1e-6)


@pytest.mark.model
def test_the_reward_route_checks_citations_against_each_items_documents(
    database_url: str,
) -> None:
    require_embedded_model()
    stored_hashes = [
        {"label": d["label"], "content_hash": document_hash(d["url"], d["title"], d["text"])}
        for d in SUPPORTING
    ]
    with api_client(database_url, rubrics=[RUBRIC]) as (client, keys):
        first = client.post(
            "/v1/rewards",
            json={
                "items": [
                    {"prompt_id": "lyon-report", "completion": REPORT, "documents": SUPPORTING},
                    {"prompt_id": "lyon-report", "completion": REPORT, "documents": UNSUPPORTING},
                ]
            },
            headers=bearer(keys["score"]),
        )
        assert first.status_code == 200, first.text
        supported, unsupported = first.json()["results"]
        assert supported["completion_id"] != unsupported["completion_id"]
        assert supported["reward"] > unsupported["reward"]

        # The same documents named by their hashes: the same completion, from the cache.
        again = client.post(
            "/v1/rewards",
            json={
                "items": [
                    {"prompt_id": "lyon-report", "completion": REPORT, "documents": stored_hashes}
                ]
            },
            headers=bearer(keys["score"]),
        ).json()
        assert again["results"][0]["completion_id"] == supported["completion_id"]
        assert again["computed"] == 0 and again["rewards"] == [supported["reward"]]

        # A hash nothing stored has: refused naming the item, nothing of the batch stored.
        before = read_database(database_url, lambda s: s.scalar(select(func.count(Completion.id))))
        refused = client.post(
            "/v1/rewards",
            json={
                "items": [
                    {"prompt_id": "lyon-report", "completion": "Another report [1].",
                     "documents": SUPPORTING[:1]},
                    {"prompt_id": "lyon-report", "completion": "A third report [1].",
                     "documents": [{"content_hash": "0" * 64}]},
                ]
            },
            headers=bearer(keys["score"]),
        )  # fmt: skip
        assert refused.status_code == 404, refused.text
        message = refused.json()["error"]["message"]
        assert message.startswith("item 1: documents[0]: no stored document has content hash")
        after = read_database(database_url, lambda s: s.scalar(select(func.count(Completion.id))))
        assert after == before


def test_a_completions_file_naming_an_unknown_document_stores_nothing(
    sqlite_url: str, tmp_path: Path
) -> None:
    rubric = tmp_path / "rubric.json"
    rubric.write_text(json.dumps(RUBRIC))
    cli_ok("rubrics", "add", str(rubric), database_url=sqlite_url)
    good, other = _records()
    broken = {**other, "documents": [{"content_hash": "f" * 64, "label": "1"}]}
    path = tmp_path / "completions.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(broken) + "\n")
    error = cli_error("completions", "add", str(path), database_url=sqlite_url)
    assert len(error.splitlines()) == 1
    assert f"{path}:2" in error and "no stored document has content hash" in error
    counts = read_database(
        sqlite_url,
        lambda s: (
            s.scalar(select(func.count(Completion.id))),
            s.scalar(select(func.count(Document.id))),
        ),
    )
    assert counts == (0, 0)

    labels = tmp_path / "labels.jsonl"
    twice = {**good, "documents": [SUPPORTING[0], {**SUPPORTING[1], "label": "1"}]}
    labels.write_text(json.dumps(twice) + "\n")
    error = cli_error("completions", "add", str(labels), database_url=sqlite_url)
    assert f"{labels}:1" in error and "label '1' is given twice" in error


DRB = Path(__file__).resolve().parents[1] / "data" / "deep_research_bench_citations"


def _drb_records() -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    reports = {}
    for line in (DRB / "reports.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        reports[record["id"]] = record
    documents = [
        json.loads(line)
        for line in (DRB / "documents.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    return reports, documents


@pytest.mark.model
@pytest.mark.slow(seconds=65)
def test_deepresearch_bench_reports_list_each_cited_claim_with_its_support(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Three of DeepResearch Bench's reports, each scored once with documents written to support
    three of its cited claims and once with documents that do not: every (claim, label) pair is
    listed, the ones with a document carry the model's support."""
    from rubricsvc.judging.readers.citations import extract_citations

    require_embedded_model()
    reports, documents = _drb_records()
    hand_counts = json.loads((DRB / "hand_counts.json").read_text(encoding="utf-8"))
    rubrics, records = [], []
    for report_id in (61, 44, 27):
        report = reports[report_id]
        rubrics.append(
            {
                "name": f"drb/{report_id}",
                "prompt": {"external_id": f"drb/{report_id}", "text": report["prompt"]},
                "criteria": [{"text": CITATIONS, "kind": "citations", "weight": 1}],
            }
        )
        for supports in (True, False):
            chosen = [
                d for d in documents if d["report_id"] == report_id and d["supports"] == supports
            ]
            assert len(chosen) == 3
            records.append(
                {
                    "prompt_external_id": f"drb/{report_id}",
                    "external_id": f"drb/{report_id}/{'supporting' if supports else 'other'}",
                    "text": report["article"],
                    "documents": [
                        {k: d[k] for k in ("label", "url", "title", "text")} for d in chosen
                    ],
                }
            )
    rubric_file = tmp_path / "rubrics.json"
    rubric_file.write_text(json.dumps(rubrics))
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    cli_ok("rubrics", "add", str(rubric_file), database_url=sqlite_url)
    cli_ok("rubrics", "approve", "drb/61", "drb/44", "drb/27", database_url=sqlite_url)
    cli_ok("completions", "add", str(completions), database_url=sqlite_url)
    report = cli_ok("score", "--json", database_url=sqlite_url).json()
    assert report["failed"] == 0

    for score in report["scores"]:
        report_id = int(score["completion_external_id"].split("/")[1])
        citations = extract_citations(reports[report_id]["article"])
        labelled = {d["label"] for d in documents if d["report_id"] == report_id}
        pairs = [(c.text, label) for c in citations.claims for label in c.labels]
        entry = _citations(score)
        detail = entry["citations"]
        # Every pair is counted: as many as the hand count of the report's citations.
        assert detail["count"] == len(pairs) == hand_counts[str(report_id)]["citation_pairs"]
        checked = [p for p in pairs if p[1] in labelled]
        assert len(checked) >= 3  # each written document is cited at least once
        listed = detail["unsupported"]
        without = [u for u in listed if u["reason"] == "no document with this label"]
        assert len(without) == len(pairs) - len(checked)
        assert all(u["label"] not in labelled for u in without)
        doubted = [u for u in listed if u["reason"] == "not supported by the document"]
        assert all(u["label"] in labelled and 0.0 < u["support"] < 0.5 for u in doubted)
        assert detail["supported"] == len(checked) - len(doubted)
        assert 0.0 < entry["value"] < 1.0
        print(
            f"{score['completion_external_id']}: {detail['count']} cited pairs, "
            f"{len(checked)} with a document, supported {detail['supported']}, "
            f"criterion value {entry['value']:.4f}"
        )
