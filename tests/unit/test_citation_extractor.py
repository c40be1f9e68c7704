"""The citation extractor: hand-counted DeepResearch Bench reports, the marker and reference-list
forms one by one, and inputs built to make a backtracking parser take quadratic time."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rubricsvc.judging.readers.citations import Citations, CitedClaim, Reference, extract_citations

DATA = Path(__file__).resolve().parents[1] / "data" / "deep_research_bench_citations"
SYNTHETIC_REFERENCES = "\n\n## References\n[1] https://a.org/1 - One\n[2] https://b.org/2 - Two\n"


def _reports() -> dict[str, str]:
    with (DATA / "reports.jsonl").open(encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines]
    return {str(record["id"]): record["article"] for record in records}


def _hand_counts() -> dict[str, dict[str, Any]]:
    counts: dict[str, dict[str, Any]] = json.loads(
        (DATA / "hand_counts.json").read_text(encoding="utf-8")
    )
    return counts


def _documents() -> list[dict[str, Any]]:
    with (DATA / "documents.jsonl").open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


REPORTS = _reports()
HAND_COUNTS = _hand_counts()
SAMPLES = [
    (report_id, sample)
    for report_id, counts in HAND_COUNTS.items()
    for sample in counts["sample_claims"]
]


def _claims_starting_with(citations: Citations, start: str) -> list[CitedClaim]:
    return [claim for claim in citations.claims if claim.text.startswith(start)]


def _only_claim(report: str) -> CitedClaim:
    claims = extract_citations(report).claims
    assert len(claims) == 1, claims
    return claims[0]


def _labels_by_text(report: str) -> dict[str, tuple[str, ...]]:
    return {claim.text: claim.labels for claim in extract_citations(report).claims}


# --- The hand-counted reports -------------------------------------------------------------------


def test_the_copied_reports_are_the_hand_counted_ones() -> None:
    assert sorted(REPORTS) == sorted(HAND_COUNTS) == ["27", "44", "61"]


@pytest.mark.parametrize("report_id", sorted(HAND_COUNTS))
def test_counts_equal_the_hand_counts(report_id: str) -> None:
    citations = extract_citations(REPORTS[report_id])
    counts = HAND_COUNTS[report_id]
    assert citations.citation_count == counts["citation_pairs"]
    assert len(citations.cited_labels) == counts["distinct_labels"]
    assert len(citations.references) == counts["reference_entries"]
    assert citations.unresolved == ()


@pytest.mark.parametrize(("report_id", "sample"), SAMPLES)
def test_each_hand_checked_sentence_cites_exactly_its_labels(
    report_id: str, sample: dict[str, Any]
) -> None:
    citations = extract_citations(REPORTS[report_id])
    matches = _claims_starting_with(citations, sample["starts_with"])
    assert [claim.labels for claim in matches] == [tuple(sample["labels"])]


@pytest.mark.parametrize("report_id", sorted(HAND_COUNTS))
def test_claim_positions_point_at_the_claims_in_the_report(report_id: str) -> None:
    report = REPORTS[report_id]
    for claim in extract_citations(report).claims:
        first_word = claim.text.split()[0]
        assert report.startswith(first_word[:8], claim.position), claim


@pytest.mark.parametrize("report_id", sorted(HAND_COUNTS))
def test_every_reference_has_a_url_and_a_title(report_id: str) -> None:
    references = extract_citations(REPORTS[report_id]).references
    assert list(references) == [str(number) for number in range(1, len(references) + 1)]
    for reference in references.values():
        assert reference.url is not None and reference.url.startswith("http")
        assert reference.title


def test_a_reference_entry_splits_at_its_first_separator() -> None:
    references = extract_citations(REPORTS["61"]).references
    assert references["4"] == Reference(
        label="4",
        url="https://www.seafoodsource.com/news/supply-trade/"
        "japan-a-leading-producer-of-mackerel-is-also-norway-s-most-important-market",
        title="Japan, a leading producer of mackerel, is also Norway\u2019s most-important market"
        " | SeafoodSource",
    )


def test_a_placeholder_in_brackets_before_the_list_is_neither_a_claim_nor_an_entry() -> None:
    citations = extract_citations(REPORTS["61"])
    assert not _claims_starting_with(citations, "[References")
    assert "References listed in the report" not in str(citations.references)


# --- The stand-in documents ---------------------------------------------------------------------


def test_each_document_pair_has_one_supporting_and_one_other() -> None:
    pairs: dict[tuple[int, str, str], list[bool]] = {}
    for document in _documents():
        key = (document["report_id"], document["label"], document["claim_starts_with"])
        pairs.setdefault(key, []).append(document["supports"])
    assert len(pairs) == 9
    assert {report_id for report_id, _, _ in pairs} == {27, 44, 61}
    assert all(sorted(verdicts) == [False, True] for verdicts in pairs.values())


@pytest.mark.parametrize("document", _documents(), ids=lambda d: f"{d['report_id']}-{d['label']}")
def test_each_document_stands_for_a_cited_source(document: dict[str, Any]) -> None:
    citations = extract_citations(REPORTS[str(document["report_id"])])
    reference = citations.references[document["label"]]
    assert (document["url"], document["title"]) == (reference.url, reference.title)
    claims = _claims_starting_with(citations, document["claim_starts_with"])
    assert len(claims) == 1 and document["label"] in claims[0].labels
    text = document["text"]
    if re.search("[\u4e00-\u9fff]", text):
        assert 300 <= len(text) <= 800
    else:
        assert 150 <= len(text.split()) <= 400


# --- Markers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sentence", "labels"),
    [
        ("Growth was fast [3].", ("3",)),
        ("Growth was fast [2-4].", ("2", "3", "4")),
        ("Growth was fast [2\u20134].", ("2", "3", "4")),
        ("Growth was fast [1, 3].", ("1", "3")),
        ("Growth was fast [1,3-4].", ("1", "3", "4")),
        ("Growth was fast [1][2].", ("1", "2")),
        ("Growth was fast [2] [1].", ("2", "1")),
        ("Growth was fast.[3]", ("3",)),
        ("Growth was fast. [3]", ("3",)),
        ("Growth was fast [^3].", ("3",)),
    ],
)
def test_marker_forms(sentence: str, labels: tuple[str, ...]) -> None:
    assert _only_claim(sentence) == CitedClaim("Growth was fast.", labels, 0)


@pytest.mark.parametrize(
    "text",
    [
        "- [ ] open task\n- [x] done task\n- [X] also done",
        "In [2024] the index rose.",
        "A descending range [4-2] is not one.",
        "A range over [1-500] is not one.",
        "Labels start at [0].",
        "Words in brackets [sic] and [1a] are not markers.",
        "Brackets before a parenthesis [1](see above) are not markers.",
        "Code like `items[1]` is not a citation.",
        "```\nvalues[1] = 2 [3]\n```",
        "![chart](https://example.org/chart.png)",
    ],
)
def test_what_only_looks_like_a_citation(text: str) -> None:
    assert extract_citations(text).claims == ()


def test_a_checked_task_item_keeps_its_citation_without_the_checkbox() -> None:
    assert _labels_by_text("- [x] Rates fell [1].\n- [ ] Rates rose.") == {"Rates fell.": ("1",)}


def test_a_label_cited_twice_in_a_sentence_counts_once() -> None:
    assert _only_claim("Growth was fast [1] and steady [1, 2].").labels == ("1", "2")


def test_markers_after_a_period_belong_to_the_sentence_before() -> None:
    report = "Sales rose. [1] Costs fell [2]. Margins held. [3][4]"
    assert _labels_by_text(report) == {
        "Sales rose.": ("1",),
        "Costs fell.": ("2",),
        "Margins held.": ("3", "4"),
    }


def test_a_marker_opening_a_line_belongs_to_the_sentence_it_opens() -> None:
    assert _labels_by_text("First line.\n[2] Second line.") == {"Second line.": ("2",)}


def test_a_line_of_markers_cites_for_the_sentence_before() -> None:
    assert _labels_by_text("Sales rose.\n\n[1][2]\n") == {"Sales rose.": ("1", "2")}


def test_a_line_of_markers_after_code_cites_nothing() -> None:
    assert extract_citations("Run this:\n```\nmake\n```\n[1]\n").claims == ()


def test_a_marker_inside_a_sentence_is_removed_with_the_space_before_it() -> None:
    claim = _only_claim("Trains ran 3.4 million times a month [8], about 41 million a year.")
    assert claim.text == "Trains ran 3.4 million times a month, about 41 million a year."


def test_chinese_sentences_end_at_the_full_stop() -> None:
    report = "碳滑板是关键部件 [1]。它的功能是取电。需要定期更换。 [2][3]下一句没有引用。"
    assert _labels_by_text(report) == {
        "碳滑板是关键部件。": ("1",),
        "需要定期更换。": ("2", "3"),
    }


@pytest.mark.parametrize(
    "sentence",
    [
        "Smith et al. found that rates fell.",
        "Several regulators, e.g. the SEC and the FCA, agreed.",
        "The U.S. economy grew 2.5% in 2023.",
        "Species such as L. plantarum and E. coli were tested.",
        "Dr. Chen measured 3.75 mm on average.",
    ],
)
def test_abbreviations_and_decimals_do_not_end_a_sentence(sentence: str) -> None:
    assert _only_claim(sentence.removesuffix(".") + " [1].").text == sentence


def test_claim_text_collapses_whitespace_and_drops_list_marks() -> None:
    report = (
        "Intro.\n\n  1.   Output   rose\tsharply [1]\n> - Quoted   item [2]\n### Heading claim [3]"
    )
    claims = extract_citations(report).claims
    assert [(claim.text, claim.labels) for claim in claims] == [
        ("Output rose sharply", ("1",)),
        ("Quoted item", ("2",)),
        ("Heading claim", ("3",)),
    ]
    assert [report[claim.position : claim.position + 6] for claim in claims] == [
        "Output",
        "Quoted",
        "Headin",
    ]


def test_table_cells_are_claims_of_their_own() -> None:
    report = "| Metric | Value |\n|---|---|\n| Sales rose [1] | 12% [2] |\n| Costs fell | [3] |"
    assert _labels_by_text(report) == {"Sales rose": ("1",), "12%": ("2",), "Costs fell": ("3",)}


# --- Inline links -------------------------------------------------------------------------------


def test_an_inline_link_cites_its_url_and_becomes_a_reference() -> None:
    citations = extract_citations("According to [the WHO](https://who.int/r?id=1), cases rose.")
    url = "https://who.int/r?id=1"
    assert citations.claims == (CitedClaim("According to the WHO, cases rose.", (url,), 0),)
    assert citations.references == {url: Reference(url, url, "the WHO")}
    assert citations.unresolved == ()


def test_a_link_url_keeps_balanced_parentheses() -> None:
    url = "https://en.wikipedia.org/wiki/Mercury_(planet)"
    claim = _only_claim(f"Mercury is small ([source]({url})).")
    assert claim.labels == (url,)
    assert claim.text == "Mercury is small (source)."


@pytest.mark.parametrize("link", ["[1](https://a.org/x)", "[[1]](https://a.org/x)"])
def test_a_numbered_link_reads_as_a_marker(link: str) -> None:
    citations = extract_citations(f"Sales rose {link}.")
    assert citations.claims == (CitedClaim("Sales rose.", ("https://a.org/x",), 0),)
    assert citations.references["https://a.org/x"].title is None


# --- The reference list -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ("[1] https://a.org/x - A Title | Site", ("https://a.org/x", "A Title | Site")),
        ("[1] A Title. https://a.org/x", ("https://a.org/x", "A Title")),
        ("[1] A Title. <https://a.org/x>.", ("https://a.org/x", "A Title")),
        ("1. A Title - https://a.org/x", ("https://a.org/x", "A Title")),
        ("1) A Title, https://a.org/x", ("https://a.org/x", "A Title")),
        ("[1]: https://a.org/x", ("https://a.org/x", None)),
        ("[^1]: A Title https://a.org/x", ("https://a.org/x", "A Title")),
        ("1. [A Title](https://a.org/x)", ("https://a.org/x", "A Title")),
        ("- [1] A Title (https://a.org/x)", ("https://a.org/x", "A Title")),
        ("1. Smith, J. A Title. Journal, 2020.", (None, "Smith, J. A Title. Journal, 2020")),
        ("[1] A Title\n    https://a.org/x", ("https://a.org/x", "A Title")),
    ],
)
def test_reference_entry_forms(entries: str, expected: tuple[str | None, str | None]) -> None:
    citations = extract_citations(f"Sales rose [1].\n\n## References\n\n{entries}\n")
    url, title = expected
    assert citations.references == {"1": Reference("1", url, title)}
    assert citations.claims == (CitedClaim("Sales rose.", ("1",), 0),)


def test_an_unnumbered_link_entry_is_labelled_by_its_url() -> None:
    citations = extract_citations("Text.\n\nSources:\n- [A Title](https://a.org/x)\n")
    assert citations.references == {
        "https://a.org/x": Reference("https://a.org/x", "https://a.org/x", "A Title")
    }


@pytest.mark.parametrize(
    "heading",
    [
        "## References",
        "# Sources",
        "**Bibliography**",
        "**Sources:**",
        "### Works Cited",
        "REFERENCES",
        "References:",
        "## 7. References",
        "参考文献\uff1a",
        "## 参考资料",
    ],
)
def test_reference_headings(heading: str) -> None:
    citations = extract_citations(f"Sales rose [1].\n\n{heading}\n[1] https://a.org/x - A\n")
    assert citations.references == {"1": Reference("1", "https://a.org/x", "A")}


def test_a_heading_that_only_starts_with_a_reference_word_is_not_the_list() -> None:
    report = "## Sources of Funding\n[1] https://a.org/x - A\nGrants rose [1]."
    citations = extract_citations(report)
    assert citations.references == {}
    assert citations.unresolved == ("1",)


def test_a_trailing_list_without_a_heading_is_the_reference_list() -> None:
    citations = extract_citations("Sales rose [1].\n\n[1] https://a.org/x - A\n[2] https://b.org\n")
    assert list(citations.references) == ["1", "2"]
    assert citations.citation_count == 1


def test_markers_inside_the_reference_list_are_not_claims() -> None:
    report = (
        "Sales rose [1].\n\n## References\n"
        "[1] https://a.org/x - Report [2024] on sales [2]\n"
        "[2] https://b.org/y - Costs, see [1]\n"
    )
    citations = extract_citations(report)
    assert citations.claims == (CitedClaim("Sales rose.", ("1",), 0),)
    assert citations.references["1"].title == "Report [2024] on sales [2]"


def test_the_last_list_defines_the_labels_and_earlier_lists_are_not_claims() -> None:
    report = (
        "Sales rose [1].\n\n## References\n1. Own list entry [1]\n2. Another entry\n\n"
        "References\n[1] https://a.org/x - A\n"
    )
    citations = extract_citations(report)
    assert citations.claims == (CitedClaim("Sales rose.", ("1",), 0),)
    assert citations.references == {"1": Reference("1", "https://a.org/x", "A")}


def test_a_reference_heading_without_entries_leaves_its_text_to_the_claims() -> None:
    report = "## Sources\nThe survey covered 40 firms [1].\n" + SYNTHETIC_REFERENCES
    assert _labels_by_text(report) == {"The survey covered 40 firms.": ("1",)}


def test_a_definition_line_defines_a_reference_and_is_no_claim() -> None:
    citations = extract_citations("Sales rose [3].\n\n[3]: https://c.org/z A Title\nMore text.")
    assert citations.claims == (CitedClaim("Sales rose.", ("3",), 0),)
    assert citations.references == {"3": Reference("3", "https://c.org/z", "A Title")}


def test_labels_the_list_does_not_define_are_unresolved() -> None:
    citations = extract_citations("Sales rose [1][5]. Costs fell [7, 2]." + SYNTHETIC_REFERENCES)
    assert citations.unresolved == ("5", "7")
    assert citations.cited_labels == ("1", "5", "7", "2")
    assert citations.citation_count == 4


def test_a_report_without_citations() -> None:
    citations = extract_citations("No sources here.\n\nJust prose.")
    assert citations == Citations(claims=(), references={}, unresolved=())
    assert citations.citation_count == 0
    assert citations.cited_labels == ()


def test_extraction_is_deterministic() -> None:
    report = REPORTS["44"]
    assert extract_citations(report) == extract_citations(report)


# --- Adversarial inputs: each is 200,000 characters and must come back --------------------------


@pytest.mark.parametrize(
    ("text", "citation_count"),
    [
        ("[" * 200_000, 0),
        ("[1" * 100_000, 0),
        ("[1," * 66_667, 0),
        ("[1-" * 66_667, 0),
        ("a" * 199_996 + " [1]", 1),
        ("word " * 39_998 + "[1] [2]", 2),
        ("[a](http://" * 18_182, 0),
        ("[a](https://x" + "(" * 199_987, 0),
        ("](http://(" * 20_000, 0),
        ("`" * 200_000, 0),
        ("` `" * 66_667, 0),
        (". " * 100_000, 0),
        ("U.S. " * 40_000, 0),
        ("|" * 200_000, 0),
        ("| a " * 50_000, 0),
        ("#\n" * 100_000, 0),
        ("- [x] " * 33_334, 0),
        ("1. " * 66_667, 0),
        ("References\n" * 18_181, 0),
        ("[1]\n" * 50_000, 0),
        ("Xy. [1] " * 25_000, 25_000),
        ("\u3002" * 200_000, 0),
    ],
)
def test_adversarial_inputs_complete(text: str, citation_count: int) -> None:
    assert len(text) >= 199_990
    assert extract_citations(text).citation_count == citation_count
