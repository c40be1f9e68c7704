"""The passages of a long document a citation check shows the judge: bounded, in document
order, the ones BM25 ranks highest for the claim."""

from __future__ import annotations

import pytest

from rubricsvc.judging.modes import DocumentView
from rubricsvc.judging.readers import evidence
from rubricsvc.judging.readers.evidence import (
    GAP,
    PASSAGE_BUDGET_CHARS,
    PassageIndex,
    document_passages,
    passages,
    relevant_passages,
)
from rubricsvc.scoring.scorer import EvidenceCost
from rubricsvc.scoring.workload import evidence_refusal

FACT = "Lyon had 522,250 inhabitants at the 2021 census, according to INSEE."


def _filler(first: int, last: int) -> str:
    return " ".join(
        f"Paragraph {i} describes the weather in spring and autumn." for i in range(first, last)
    )


DOCUMENT = f"{_filler(0, 300)} {FACT} {_filler(300, 600)}"


def test_a_short_document_is_shown_whole() -> None:
    assert relevant_passages(FACT, "anything") == FACT


def test_a_long_document_is_cut_to_the_passages_about_the_claim() -> None:
    shown = relevant_passages(DOCUMENT, "How many inhabitants did Lyon have in 2021?")
    assert len(DOCUMENT) > 10 * PASSAGE_BUDGET_CHARS
    assert len(shown) <= PASSAGE_BUDGET_CHARS
    assert FACT in shown  # the passage holding the fact ranks first
    # In document order, and the same every time (the judgment's cache key assumes it).
    kept = shown.split(GAP)
    order = [DOCUMENT.index(piece) for piece in kept]
    assert order == sorted(order)
    assert relevant_passages(DOCUMENT, "How many inhabitants did Lyon have in 2021?") == shown


def test_a_claim_sharing_no_word_gets_the_documents_start() -> None:
    shown = relevant_passages(DOCUMENT, "zzzz qqqq")
    assert shown.startswith("Paragraph 0 describes")
    assert len(shown) <= PASSAGE_BUDGET_CHARS


def test_passages_are_bounded_even_without_sentence_ends() -> None:
    pieces = passages("x" * 5000, size=600)
    assert all(len(p) <= 600 for p in pieces) and "".join(pieces) == "x" * 5000
    assert len(relevant_passages("word " * 50_000, "word")) <= PASSAGE_BUDGET_CHARS


CLAIMS = [
    "How many inhabitants did Lyon have in 2021?",
    "Paragraph 412 describes the weather in autumn.",
    "zzzz qqqq",
    "",
    "INSEE counted Lyon in spring",
]


def test_a_document_is_indexed_once_for_all_the_claims_that_cite_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each claim once cut and indexed the whole document again: a report cost its claims
    times its documents' size. The passages shown stay those of ``relevant_passages``."""
    built: list[str] = []

    class Counted(PassageIndex):
        def __init__(self, text: str, size: int = evidence.PASSAGE_CHARS) -> None:
            built.append(text)
            super().__init__(text, size)

    expected = {claim: relevant_passages(DOCUMENT, claim) for claim in CLAIMS}
    monkeypatch.setattr(evidence, "PassageIndex", Counted)
    monkeypatch.setattr(evidence, "_CACHE", evidence._IndexCache(2 * len(DOCUMENT)))
    for _ in range(20):
        for claim in CLAIMS:
            assert document_passages("lyon", DOCUMENT, claim) == expected[claim]
    assert len(built) == 1
    # A short document is shown whole, never indexed.
    assert document_passages("fact", FACT, "Lyon") == FACT and len(built) == 1
    # Past the cache's characters the documents indexed first are dropped.
    other = DOCUMENT.replace("Lyon", "Lille")
    document_passages("lille", other, CLAIMS[0])
    document_passages("lyon-2", DOCUMENT + " More.", CLAIMS[0])
    document_passages("lyon", DOCUMENT, CLAIMS[0])
    assert len(built) == 4
    # The checks of one completion hold the documents they index, whatever the cache keeps.
    monkeypatch.setattr(evidence, "_CACHE", evidence._IndexCache(10))
    held: dict[str, PassageIndex] = {}
    for claim in CLAIMS * 4:
        for digest, text in (("lyon", DOCUMENT), ("lille", other)):
            document_passages(digest, text, claim, held)
    assert len(built) == 6 and set(held) == {"lyon", "lille"}


def _document(digest: str, text: str) -> DocumentView:
    return DocumentView("1", "https://example.org", "Title", text, digest)


def test_citation_checks_cost_their_documents_once_and_their_claims_each_time() -> None:
    long_one, short_one = _document("long", DOCUMENT), _document("short", FACT)
    head = len("Title") + len("https://example.org")
    cost = EvidenceCost()
    for claim in ("Lyon had 522,250 inhabitants.", "It rains in spring."):
        cost.add_check(claim, long_one)
    other = EvidenceCost()
    other.add_check("Lyon had 522,250 inhabitants.", long_one)  # a jury member's check
    other.add_check("Lyon had 522,250 inhabitants.", short_one)
    cost.add(other)
    claims = 3 * len("Lyon had 522,250 inhabitants.") + len("It rains in spring.")
    assert cost.documents == {"long": len(DOCUMENT)}  # indexed once; the short one not at all
    assert cost.sent_chars == claims + 4 * head + 3 * PASSAGE_BUDGET_CHARS + len(FACT)
    assert cost.passages == 3 * -(-len(DOCUMENT) // evidence.PASSAGE_CHARS)
    assert cost.total == len(DOCUMENT) + cost.sent_chars + cost.passages
    assert evidence_refusal(cost, cost.total) is None
    assert evidence_refusal(cost, cost.total - 1) == (
        f"{cost.total} evidence cost of citation checks (document characters indexed: "
        f"{len(DOCUMENT)} in 1 document(s); characters sent to the judge: {cost.sent_chars}; "
        f"passages ranked: {cost.passages}): at most {cost.total - 1}"
    )
