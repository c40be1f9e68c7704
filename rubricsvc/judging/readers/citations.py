"""Citations in deep-research reports: which sentence cites which source.

A judge that checks citations asks, for each (claim, cited document), whether the document
supports the claim. This module prepares those questions from the report alone: it pairs every
cited sentence with the labels it cites, and reads the report's reference list to map each label
to a URL and a title. It is pure and deterministic (the same report always yields the same
citations) and uses the standard library only.

The report is written by the policy being trained, so nothing here may take more than linear
time in its length: every regular expression is flat (no nested quantifiers), the ones that can
fail after a long partial match are bounded, and the scans that look ahead stop at characters
that end the construct they scan.

The rules, in the order they apply:

* Code is not prose. Lines inside fenced code blocks and text inside inline code spans hold no
  markers and no claims; a fenced block also ends the sentence that marker-only lines could
  attach to (see below).
* The reference list is the section under the last heading named "References", "Sources",
  "Bibliography", "Works Cited", "Citations", "参考文献", "参考资料" and the like (a markdown
  heading, a bold line or a plain line, any case, optional trailing colon) that holds at least one
  entry. It runs to the next heading. Earlier reference-named sections directly before it that
  hold entries too (a report listing its sources twice) are also left out of the claims, but only
  the last list defines the labels. Without such a heading, a trailing block of ``[n] ... URL``
  lines is the list.
* Entries are lines starting ``[1]``, ``[1]:``, ``[^1]:``, ``1.`` or ``1)`` (optionally after a
  bullet), or bullets holding a URL (their label is the URL). Lines right below an entry continue
  it. A markdown link in an entry gives its title and URL; otherwise a URL first is followed by
  its title (``[1] URL - Title``), or a title first is followed by its URL (``[1] Title. URL``).
  URLs end at whitespace. The first entry with a label wins.
* A citation marker is a bracketed list of numbers and ranges: ``[3]``, ``[1, 3]``, ``[2-4]``,
  ``[^5]``. Labels are 1 to 999 (bracketed years and quantities such as ``[2024]`` are not
  citations); a range must ascend and span at most 50 labels, or the brackets are not a marker.
  Brackets holding anything else (``[ ]``, ``[x]``, ``[sic]``), brackets followed by ``(`` and
  definition lines (``[1]: ...`` outside the reference list, which define a reference instead)
  are not markers.
* A markdown link ``[text](http...)`` in the text is a citation whose label is the URL itself;
  it is also recorded as a reference titled by its text. Images are not citations.
* Claims are sentences, list items or table cells. A sentence ends at ``.``, ``!`` or ``?``
  followed (after any closing quotes or brackets) by whitespace, at the ideographic full stop
  (``。``) or a full-width exclamation or question mark, or at the end of a line; never at
  common abbreviations (``e.g.``, ``et al.``, ``Dr.``) or dotted initialisms (``U.S.``,
  ``Ph.D.``), even where one ends a sentence, and never before a lowercase word (``E. coli``).
  Decimal numbers never end a sentence since no whitespace follows their point. A terminator
  inside a quotation ends the sentence there (the closing quote stays with it).
* A marker belongs to the last sentence of its line (or cell) that starts before it, so markers
  after a sentence's final period (``growth. [3]``) still belong to that sentence, and a marker
  opening a line belongs to the sentence it opens. A line or cell with markers and no text
  passes them to the previous sentence; the citation is dropped if there is none (start of the
  report, or right after a code block).
* A claim's text is its sentence with the markers (and the spaces before them) removed, link
  brackets and URLs removed (the link text stays, unless it is a bare number), list and heading
  prefixes removed and whitespace collapsed. Its position is the offset of its first character
  in the report. A label cited twice in one claim counts once.
* A label cited in a claim that no reference defines is unresolved.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import NamedTuple


@dataclass(frozen=True)
class Reference:
    """One source the report lists: its label (a number as text, or the URL of an inline link)
    and what the report says about it. Either part may be missing from a hand-written list."""

    label: str
    url: str | None
    title: str | None


@dataclass(frozen=True)
class CitedClaim:
    """A sentence (or list item or table cell) that cites at least one source, with the labels it
    cites in the order it cites them; the unit a judge checks against each cited document."""

    text: str
    labels: tuple[str, ...]
    position: int


@dataclass(frozen=True)
class Citations:
    """Everything the report cites: the cited claims, the reference list (with inline links
    added) and the labels cited that no reference defines."""

    claims: tuple[CitedClaim, ...]
    references: dict[str, Reference] = field(hash=False)
    unresolved: tuple[str, ...]

    @property
    def citation_count(self) -> int:
        """The number of (claim, label) pairs: how many support questions a judge will answer."""
        return sum(len(claim.labels) for claim in self.claims)

    @property
    def cited_labels(self) -> tuple[str, ...]:
        """The distinct labels cited, in order of first citation."""
        return tuple(dict.fromkeys(label for claim in self.claims for label in claim.labels))


_MAX_LABEL = 999
_MAX_RANGE_SPAN = 50

# A marker's brackets hold digits, separators and spaces; the length bound keeps a failed match
# (an unclosed "[1,1,1...") short.
_MARKER = re.compile(r"\[\^?([0-9][0-9 ,\-\u2013\u2014]{0,60})\]")
_NUMBER = re.compile(r"[0-9]{1,3}")
_RANGE = re.compile(r"([0-9]{1,3}) *[-\u2013\u2014] *([0-9]{1,3})")
# The text and the opening of an inline link; the URL itself is scanned by hand because it may
# hold balanced parentheses. The optional inner brackets accept the "[[1]](url)" form.
_LINK_OPENING = re.compile(r"\[(\[[^\[\]\n]{0,300}\]|[^\[\]\n]{0,300})\]\((?=https?://)")
_URL_START = re.compile(r"https?://")
# Characters that cannot be part of a URL written in markdown: the scan of a URL stops there.
_URL_STOPS = frozenset('[]<>"`')

_FENCE = re.compile(r"[ \t]{0,3}(```|~~~)")
_MARKDOWN_HEADING = re.compile(r"[ \t]{0,3}#{1,6}(?:[ \t]|$)")
_DEFINITION = re.compile(r"[ \t]{0,3}\[\^?([^\[\]\n]{1,100})\]:")
_BRACKET_ENTRY = re.compile(r"[ \t]{0,3}[-*+]?[ \t]{0,4}\[\^?([0-9]{1,3})\]:?[ \t]*(.*)")
_NUMBERED_ENTRY = re.compile(r"[ \t]{0,3}([0-9]{1,3})[.)][ \t]+(.*)")
_BULLET_ENTRY = re.compile(r"[ \t]{0,3}[-*+\u2022][ \t]+(.*)")
_HEADING_NUMBER = re.compile(r"(?:[0-9][0-9.]{0,10}|[一二三四五六七八九十]{1,3}[、.])[ \t]*")

# Structure at the start of a line that is not part of its sentence: indentation and blockquote
# marks, then a heading, bullet or number, then a task-list checkbox.
_INDENT = re.compile(r"[ \t>]*")
_BLOCK_MARK = re.compile(r"(?:#{1,6}|[-*+\u2022]|[0-9]{1,3}[.)])[ \t]+")
_CHECKBOX = re.compile(r"\[[ xX]\][ \t]+")
_TABLE_DELIMITER = re.compile(r"[ \t]*\|[ \t|:\-]*")

_REFERENCE_HEADINGS = frozenset(
    {
        "references",
        "reference",
        "reference list",
        "sources",
        "source list",
        "sources cited",
        "bibliography",
        "works cited",
        "citations",
        "参考文献",
        "参考资料",
        "参考来源",
        "引用",
        "引用文献",
        "资料来源",
        "来源",
    }
)

_WESTERN_TERMINATORS = frozenset(".!?")
_CJK_TERMINATORS = frozenset("\u3002\uff01\uff1f")
_CLOSERS = frozenset("\"')]\u201d\u2019\u300d\u300f\uff09\u300b")
# An abbreviation is a run of these ending at its period; what precedes the run ("(", a space,
# a CJK character) does not matter.
_WORD_CHARS = frozenset(string.ascii_letters + ".")
# Longer than any abbreviation below, so the look-back for one stays constant-time.
_ABBREVIATION_LOOKBACK = 12
_ABBREVIATION_LIST = (
    "al. approx. ca. cf. vs. pp. Dr. Mr. Mrs. Ms. Prof. Inc. Ltd. Co. Corp. Jr. Sr. St. No. "
    "Nos. Fig. Figs. Eq. Vol. Jan. Feb. Mar. Apr. Jun. Jul. Aug. Sep. Sept. Oct. Nov. Dec."
)
_ABBREVIATIONS = frozenset(_ABBREVIATION_LIST.split())
_TITLE_TRIM = " \t-\u2013\u2014:|,.;*_\"'\u201c\u201d"
_URL_TRAILING_PUNCTUATION = ".,;:!?'\">]"


class _Line(NamedTuple):
    offset: int
    text: str


class _Citation(NamedTuple):
    """A marker or inline link found in a line: where it is, what it cites, and the part of it
    that stays in the claim's text (an empty range for markers)."""

    start: int
    end: int
    labels: tuple[str, ...]
    kept_start: int
    kept_end: int
    link: Reference | None


class _Sentence:
    """A sentence of the report as it is read; it becomes a claim if it collects labels."""

    def __init__(self, text: str, position: int) -> None:
        self.text = text
        self.position = position
        self.labels: dict[str, None] = {}

    def cite(self, labels: tuple[str, ...]) -> None:
        for label in labels:
            self.labels.setdefault(label, None)


def extract_citations(report: str) -> Citations:
    """The claims of ``report`` paired with the labels they cite, its reference list, and the
    labels it cites without defining them. See the module docstring for the rules."""
    lines = _split_lines(report)
    in_code = _fenced_code_lines(lines)
    reference_region, reference_lines = _locate_reference_list(lines, in_code)
    references = _parse_reference_entries(reference_lines)
    reader = _ClaimReader()
    for index, line in enumerate(lines):
        if in_code[index] or index in reference_region:
            reader.forget_last_sentence()
        else:
            reader.read_line(line)
    for label, reference in [*reader.definitions.items(), *reader.links.items()]:
        references.setdefault(label, reference)
    claims = tuple(
        CitedClaim(sentence.text, tuple(sentence.labels), sentence.position)
        for sentence in reader.sentences
        if sentence.labels
    )
    cited = dict.fromkeys(label for claim in claims for label in claim.labels)
    unresolved = tuple(label for label in cited if label not in references)
    return Citations(claims=claims, references=references, unresolved=unresolved)


# --- Lines, code and headings -------------------------------------------------------------------


def _split_lines(report: str) -> list[_Line]:
    """The report's lines with their offsets; only "\\n" separates lines, so offsets stay exact
    (a Windows "\\r" is dropped from the line's end)."""
    lines = []
    offset = 0
    for text in report.split("\n"):
        lines.append(_Line(offset, text.removesuffix("\r")))
        offset += len(text) + 1
    return lines


def _fenced_code_lines(lines: list[_Line]) -> list[bool]:
    """Which lines belong to a fenced code block (the fences included). A block closes at a fence
    of the same character; an unclosed block runs to the end, as markdown renders it."""
    flags = []
    open_fence: str | None = None
    for line in lines:
        fence = _FENCE.match(line.text)
        if open_fence is None:
            if fence:
                open_fence = fence.group(1)
            flags.append(fence is not None)
        else:
            flags.append(True)
            if fence and fence.group(1) == open_fence:
                open_fence = None
    return flags


def _mask_code_spans(text: str) -> str:
    """``text`` with the inside of each inline code span replaced by underscores, so that no
    marker, link or sentence end is found there while offsets stay the same. A backtick run
    opens a span closed by the next run of the same length (CommonMark's rule); an unmatched
    run is literal."""
    runs = _backtick_runs(text)
    if len(runs) < 2:
        return text
    next_same: list[int | None] = [None] * len(runs)
    last_seen: dict[int, int] = {}
    for index in range(len(runs) - 1, -1, -1):
        length = runs[index][1]
        next_same[index] = last_seen.get(length)
        last_seen[length] = index
    masked = list(text)
    index = 0
    while index < len(runs):
        closer = next_same[index]
        if closer is None:
            index += 1
            continue
        span_start = runs[index][0] + runs[index][1]
        for position in range(span_start, runs[closer][0]):
            masked[position] = "_"
        index = closer + 1
    return "".join(masked)


def _backtick_runs(text: str) -> list[tuple[int, int]]:
    """(start, length) of each run of backticks in ``text``."""
    runs = []
    position = text.find("`")
    while position >= 0:
        end = position
        while end < len(text) and text[end] == "`":
            end += 1
        runs.append((position, end - position))
        position = text.find("`", end)
    return runs


def _is_reference_heading(text: str) -> bool:
    """Whether a line is a heading naming the reference list: "## References", "**Sources:**",
    "参考文献" with a full-width colon, "7. 参考资料"; the name must be the whole heading, so
    "Sources of Funding" is not one."""
    stripped = text.strip()
    if not stripped or len(stripped) > 60:
        return False
    name = stripped.lstrip("#").strip().strip("*_").strip()
    name = name.rstrip(":\uff1a").strip().strip("*_").rstrip(":\uff1a").strip()
    numbering = _HEADING_NUMBER.match(name)
    if numbering:
        name = name[numbering.end() :]
    return name.lower() in _REFERENCE_HEADINGS


def _is_heading(text: str) -> bool:
    """Whether a line starts a section: any markdown heading, or a reference-list heading in bold
    or plain form (a report's appended "References" line is often not a markdown heading)."""
    return _MARKDOWN_HEADING.match(text) is not None or _is_reference_heading(text)


# --- The reference list -------------------------------------------------------------------------


def _locate_reference_list(lines: list[_Line], in_code: list[bool]) -> tuple[range, list[_Line]]:
    """The lines to leave out of the claims, and the lines holding the entries that define the
    labels (see the module docstring for which section that is)."""
    headings = [i for i, line in enumerate(lines) if not in_code[i] and _is_heading(line.text)]
    section_ends = dict(pairwise([*headings, len(lines)]))

    def holds_entries(heading: int) -> bool:
        return _is_reference_heading(lines[heading].text) and any(
            not in_code[i] and _is_entry(lines[i].text)
            for i in range(heading + 1, section_ends[heading])
        )

    with_entries = [position for position, heading in enumerate(headings) if holds_entries(heading)]
    if not with_entries:
        return _trailing_reference_block(lines, in_code)
    last = with_entries[-1]
    first = last
    while first > 0 and holds_entries(headings[first - 1]):
        first -= 1
    list_heading = headings[last]
    region = range(headings[first], section_ends[list_heading])
    entries = [
        line
        for i, line in enumerate(lines[list_heading + 1 : section_ends[list_heading]])
        if not in_code[list_heading + 1 + i]
    ]
    return region, entries


def _trailing_reference_block(lines: list[_Line], in_code: list[bool]) -> tuple[range, list[_Line]]:
    """A reference list without a heading: the ``[n] ... URL`` lines (blank lines between them
    allowed) that end the report."""
    start = len(lines)
    index = len(lines) - 1
    while index >= 0 and not in_code[index]:
        text = lines[index].text
        if text.strip():
            entry = _BRACKET_ENTRY.match(text)
            if entry is None or _URL_START.search(entry.group(2)) is None:
                break
            start = index
        index -= 1
    return range(start, len(lines)), lines[start:]


def _entry_start(text: str) -> tuple[str | None, str] | None:
    """(label, rest) if the line starts a reference entry; the label is None for a bullet, whose
    label is its URL once the entry is read."""
    for pattern in (_BRACKET_ENTRY, _NUMBERED_ENTRY):
        match = pattern.match(text)
        if match and int(match.group(1)) > 0:
            return str(int(match.group(1))), match.group(2)
    bullet = _BULLET_ENTRY.match(text)
    if bullet and _URL_START.search(bullet.group(1)):
        return None, bullet.group(1)
    return None


def _is_entry(text: str) -> bool:
    return _entry_start(text) is not None


def _parse_reference_entries(lines: list[_Line]) -> dict[str, Reference]:
    """The references defined by the entries among ``lines``; a non-blank line right below an
    entry continues it (a URL on its own line, a wrapped title)."""
    entries: list[tuple[str | None, list[str]]] = []
    current: list[str] | None = None
    for line in lines:
        start = _entry_start(line.text)
        if start is not None:
            current = [start[1]]
            entries.append((start[0], current))
        elif not line.text.strip():
            current = None
        elif current is not None:
            current.append(line.text.strip())
    references: dict[str, Reference] = {}
    for label, parts in entries:
        reference = _parse_entry(label, " ".join(part.strip() for part in parts))
        if reference is not None:
            references.setdefault(reference.label, reference)
    return references


def _parse_entry(label: str | None, body: str) -> Reference | None:
    """One entry's reference, or None for a bullet without a URL."""
    url, title = _entry_url_and_title(body.strip())
    label = label if label is not None else url
    if label is None:
        return None
    return Reference(label=label, url=url, title=title)


def _entry_url_and_title(body: str) -> tuple[str | None, str | None]:
    link = _LINK_OPENING.search(body)
    if link is not None:
        scanned = _scan_link_url(body, link.end())
        if scanned is not None:
            return scanned[0], _clean_title(_link_text(link))
    url_match = _URL_START.search(body)
    if url_match is None:
        return None, _clean_title(body)
    url_end = _url_token_end(body, url_match.start())
    url = _trim_url(body[url_match.start() : url_end])
    # The URL may sit in angle brackets or parentheses: "Title (https://...)".
    before = body[: url_match.start()].rstrip().removesuffix("<").removesuffix("(")
    after = body[url_end:].lstrip().removeprefix(">")
    # "[1] URL - Title" names the page after its URL; "[1] Title. URL" before it.
    title = _clean_title(before) or _clean_title(after)
    return url, title


def _clean_title(text: str) -> str | None:
    title = " ".join(text.split()).strip(_TITLE_TRIM)
    return title or None


def _url_token_end(text: str, start: int) -> int:
    end = start
    while end < len(text) and not text[end].isspace():
        end += 1
    return end


def _trim_url(url: str) -> str:
    """``url`` without the punctuation that ends the sentence around it; a closing parenthesis
    stays if it closes one opened inside the URL (Wikipedia's "Foo_(bar)")."""
    unbalanced = url.count(")") - url.count("(")
    end = len(url)
    while end > 0:
        last = url[end - 1]
        if last in _URL_TRAILING_PUNCTUATION:
            end -= 1
        elif last == ")" and unbalanced > 0:
            unbalanced -= 1
            end -= 1
        else:
            break
    return url[:end]


# --- Markers and inline links -------------------------------------------------------------------


def _marker_labels(content: str) -> tuple[str, ...] | None:
    """The labels a marker's content cites, or None if the brackets are not a citation."""
    labels: list[str] = []
    for part in content.split(","):
        part = part.strip()
        if _NUMBER.fullmatch(part):
            number = int(part)
            if not 1 <= number <= _MAX_LABEL:
                return None
            labels.append(str(number))
            continue
        bounds = _RANGE.fullmatch(part)
        if bounds is None:
            return None
        low, high = int(bounds.group(1)), int(bounds.group(2))
        if not 1 <= low < high <= low + _MAX_RANGE_SPAN:
            return None
        labels.extend(str(number) for number in range(low, high + 1))
    return tuple(labels)


def _next_marker(masked: str, position: int, end: int) -> _Citation | None:
    while True:
        match = _MARKER.search(masked, position, end)
        if match is None:
            return None
        position = match.end()
        followed_by_parenthesis = match.end() < end and masked[match.end()] == "("
        labels = None if followed_by_parenthesis else _marker_labels(match.group(1))
        if labels:
            return _Citation(match.start(), match.end(), labels, match.start(), match.start(), None)


def _next_link(masked: str, position: int, end: int) -> _Citation | None:
    while True:
        match = _LINK_OPENING.search(masked, position, end)
        if match is None:
            return None
        position = match.end()
        if match.start() > 0 and masked[match.start() - 1] == "!":
            continue
        scanned = _scan_link_url(masked, match.end(), end)
        if scanned is None:
            continue
        url, link_end = scanned
        text_start, text_end = match.span(1)
        if masked[text_start : text_start + 1] == "[":
            text_start, text_end = text_start + 1, text_end - 1
        text = masked[text_start:text_end]
        title = None if _is_bare_number(text) else _clean_title(text)
        if title is None:
            # "[1](url)" is a marker spelled as a link: nothing of it stays in the claim.
            text_start = text_end = match.start()
        reference = Reference(label=url, url=url, title=title)
        return _Citation(match.start(), link_end, (url,), text_start, text_end, reference)


def _link_text(match: re.Match[str]) -> str:
    text = match.group(1)
    return text[1:-1] if text.startswith("[") else text


def _is_bare_number(text: str) -> bool:
    return _NUMBER.fullmatch(text.strip().lstrip("^")) is not None


def _scan_link_url(text: str, start: int, end: int | None = None) -> tuple[str, int] | None:
    """(URL, end of the link) for the URL starting at ``start``, right after "](": it runs to the
    ")" that balances the link's "(", and must not hold whitespace or markdown brackets."""
    limit = len(text) if end is None else end
    depth = 0
    position = start
    while position < limit:
        char = text[position]
        if char.isspace() or char in _URL_STOPS:
            return None
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                return (text[start:position], position + 1) if position > start else None
            depth -= 1
        position += 1
    return None


def _citations_in(masked: str, start: int, end: int) -> Iterator[_Citation]:
    """The markers and inline links between ``start`` and ``end``, in order, not overlapping; a
    link wins over a marker at the same place ("[1](url)") and hides the markers in its text."""
    marker = _next_marker(masked, start, end)
    link = _next_link(masked, start, end)
    while marker is not None or link is not None:
        if link is not None and (marker is None or link.start <= marker.start):
            found = link
            link = _next_link(masked, found.end, end)
        else:
            assert marker is not None
            found = marker
            marker = _next_marker(masked, found.end, end)
        if marker is not None and marker.start < found.end:
            marker = _next_marker(masked, found.end, end)
        if link is not None and link.start < found.end:
            link = _next_link(masked, found.end, end)
        yield found


# --- Sentences and claims -----------------------------------------------------------------------


class _ClaimReader:
    """Reads the report's prose line by line, collecting its sentences with the labels each one
    cites, the references that inline links and definition lines add, and the last sentence read
    (which marker-only lines cite for)."""

    def __init__(self) -> None:
        self.sentences: list[_Sentence] = []
        self.links: dict[str, Reference] = {}
        self.definitions: dict[str, Reference] = {}
        self._last_sentence: _Sentence | None = None

    def forget_last_sentence(self) -> None:
        """Code and the reference list stand between the sentence before and what follows."""
        self._last_sentence = None

    def read_line(self, line: _Line) -> None:
        masked = _mask_code_spans(line.text)
        if self._read_definition(masked, line.text):
            return
        if masked.lstrip().startswith("|"):
            self._read_table_row(line, masked)
            return
        self._read_segment(line, masked, _content_start(masked, 0), len(masked))

    def _read_definition(self, masked: str, text: str) -> bool:
        """A ``[1]: ...`` line defines a reference (or, with a non-numeric label, a link target)
        and is never a claim."""
        definition = _DEFINITION.match(masked)
        if definition is None:
            return False
        if _NUMBER.fullmatch(definition.group(1).strip()):
            label = str(int(definition.group(1).strip()))
            reference = _parse_entry(label, text[definition.end() :])
            if reference is not None and label != "0":
                self.definitions.setdefault(label, reference)
        return True

    def _read_table_row(self, line: _Line, masked: str) -> None:
        if _TABLE_DELIMITER.fullmatch(masked):
            return
        cell_start = masked.index("|") + 1
        while cell_start <= len(masked):
            cell_end = masked.find("|", cell_start)
            while cell_end > 0 and masked[cell_end - 1] == "\\":
                cell_end = masked.find("|", cell_end + 1)
            if cell_end < 0:
                cell_end = len(masked)
            self._read_segment(line, masked, _content_start(masked, cell_start), cell_end)
            cell_start = cell_end + 1

    def _read_segment(self, line: _Line, masked: str, start: int, end: int) -> None:
        """One line or table cell: its text without the citations, split into sentences, each
        citation given to the sentence that owns it."""
        kept: list[int] = []
        anchored: list[tuple[int, tuple[str, ...]]] = []
        position = start
        for citation in _citations_in(masked, start, end):
            kept.extend(range(position, citation.start))
            if citation.kept_start == citation.kept_end:
                # A marker takes the spaces before it along: "growth [1]." reads "growth."
                while kept and line.text[kept[-1]] in " \t":
                    kept.pop()
            kept.extend(range(citation.kept_start, citation.kept_end))
            anchored.append((len(kept), citation.labels))
            if citation.link is not None:
                self.links.setdefault(citation.link.label, citation.link)
            position = citation.end
        kept.extend(range(position, end))
        text = "".join(line.text[i] for i in kept)
        masked_text = "".join(masked[i] for i in kept)
        sentences = [
            (
                span_start,
                _Sentence(_collapse(text[span_start:span_end]), line.offset + kept[span_start]),
            )
            for span_start, span_end in _sentence_spans(masked_text)
        ]
        self._cite(sentences, anchored)
        self.sentences.extend(sentence for _, sentence in sentences)
        if sentences:
            self._last_sentence = sentences[-1][1]

    def _cite(
        self,
        sentences: list[tuple[int, _Sentence]],
        anchored: list[tuple[int, tuple[str, ...]]],
    ) -> None:
        """Gives each citation to the last sentence starting before it (the first sentence if
        none does); with no sentence at all, to the sentence read before this segment."""
        owner = 0
        for anchor, labels in anchored:
            if not sentences:
                if self._last_sentence is not None:
                    self._last_sentence.cite(labels)
                continue
            while owner + 1 < len(sentences) and sentences[owner + 1][0] < anchor:
                owner += 1
            sentences[owner][1].cite(labels)


def _content_start(masked: str, start: int) -> int:
    """Where a line's (or cell's) sentence text starts, past indentation, blockquote marks,
    heading marks, bullets, list numbers and task checkboxes."""
    indent = _INDENT.match(masked, start)
    position = indent.end() if indent else start
    block_mark = _BLOCK_MARK.match(masked, position)
    if block_mark:
        position = block_mark.end()
    checkbox = _CHECKBOX.match(masked, position)
    if checkbox:
        position = checkbox.end()
    return position


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    """The sentences of one line of text as (start, end) spans, without surrounding whitespace;
    spans holding no letter or digit are dropped."""
    spans = []
    start = 0
    position = 0
    while position < len(text):
        char = text[position]
        if char in _CJK_TERMINATORS or (
            char in _WESTERN_TERMINATORS and _ends_western_sentence(text, position)
        ):
            end = _skip_closers(text, position + 1)
            spans.append((start, end))
            start = position = end
        else:
            position += 1
    spans.append((start, len(text)))
    return [trimmed for span in spans if (trimmed := _trim_span(text, *span)) is not None]


def _ends_western_sentence(text: str, position: int) -> bool:
    after = _skip_closers(text, position + 1)
    if after < len(text) and not text[after].isspace():
        return False
    if text[position] != ".":
        return True
    return not (_next_word_is_lowercase(text, after) or _is_abbreviation(text, position))


def _next_word_is_lowercase(text: str, position: int) -> bool:
    """Whether the text after ``position`` goes on in lowercase, as after "E. coli" or "et al."
    (a new sentence starts with a capital, a digit or a CJK character)."""
    while position < len(text) and text[position].isspace():
        position += 1
    return position < len(text) and text[position].islower()


def _skip_closers(text: str, position: int) -> int:
    while position < len(text) and text[position] in _CLOSERS:
        position += 1
    return position


def _is_abbreviation(text: str, period: int) -> bool:
    """Whether the period at ``period`` ends an abbreviation rather than a sentence."""
    start = period
    while start > 0 and period - start < _ABBREVIATION_LOOKBACK and text[start - 1] in _WORD_CHARS:
        start -= 1
    if start > 0 and text[start - 1] in _WORD_CHARS:
        return False  # a word longer than any abbreviation
    token = text[start : period + 1]
    if token in _ABBREVIATIONS:
        return True
    parts = token[:-1].split(".")
    # "U.S.", "e.g.", "Ph.D."; a lone capital ("vitamin D.", "Plan B.") ends sentences too often
    # to be taken for an initial.
    return len(parts) > 1 and all(part.isalpha() and len(part) <= 2 for part in parts)


def _trim_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if not any(char.isalnum() for char in text[start:end]):
        return None
    return start, end


def _collapse(text: str) -> str:
    return " ".join(text.split())
