"""How a citations criterion reads its checks: pairs matched to documents by label or by the
URL the reference list gives, the mean support, nothing cited scored 0, a failed check masked."""

from __future__ import annotations

from rubricsvc.judging.modes import CompletionView, DocumentView, Ruling
from rubricsvc.judging.modes.citation import (
    NO_DOCUMENT,
    CitationPlan,
    CitedPair,
    citations_outcome,
    cited_pairs,
)

REPORT = (
    "Lyon is large [1]. It has two rivers [2][3].\n\n## References\n"
    "[1] https://a.example/lyon\n[2] https://b.example/rivers\n[3] https://c.example/x\n"
)
BY_LABEL = DocumentView("1", None, None, "Lyon is a large city.", "h1")
BY_URL = DocumentView("doc-b", "https://b.example/rivers", None, "Two rivers.", "h2")


def _completion(response: str = REPORT) -> CompletionView:
    return CompletionView(1, [], response, documents=(BY_LABEL, BY_URL))


def test_pairs_find_their_document_by_label_then_by_url() -> None:
    pairs = cited_pairs(_completion())
    assert [(p.claim, p.label) for p in pairs] == [
        ("Lyon is large.", "1"),
        ("It has two rivers.", "2"),
        ("It has two rivers.", "3"),
    ]
    assert [p.document for p in pairs] == [BY_LABEL, BY_URL, None]


def test_the_value_is_the_mean_support_and_a_missing_document_counts_zero() -> None:
    first, second, third = cited_pairs(_completion())
    plan = CitationPlan(((first, "k1"), (second, "k2"), (third, None)))
    rulings = {"k1": Ruling(0.9), "k2": Ruling(0.3)}
    fields, value = citations_outcome(plan, rulings)
    assert value == (0.9 + 0.3 + 0.0) / 3
    detail = fields["citations"]
    assert (detail["count"], detail["supported"]) == (3, 1)
    assert [(u["label"], u["reason"]) for u in detail["unsupported"]] == [
        ("2", "not supported by the document"),
        ("3", NO_DOCUMENT),
    ]
    assert fields["verdict"] == "1/3 supported"


def test_a_response_citing_nothing_scores_zero() -> None:
    assert cited_pairs(_completion("No sources at all.")) == []
    fields, value = citations_outcome(CitationPlan(()), {})
    assert value == 0.0 and fields["verdict"] == "no citations"


def test_a_failed_check_masks_the_criterion() -> None:
    pair = CitedPair("Lyon is large.", "1", BY_LABEL)
    failed = Ruling(None, error="unparseable judge output", failure="judge")
    fields, value = citations_outcome(CitationPlan(((pair, "k1"),)), {"k1": failed})
    assert value is None
    assert fields["status"] == "failed" and fields["failure"] == "judge"
    assert fields["error"].startswith("citation [1]: unparseable")
