"""The passages of a long document a citation check shows the judge: bounded, in document
order, the ones BM25 ranks highest for the claim."""

from __future__ import annotations

from rubricsvc.judging.readers.evidence import (
    GAP,
    PASSAGE_BUDGET_CHARS,
    passages,
    relevant_passages,
)

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
