"""The passages of a long document that bear on a claim, so a judge checking the claim reads
what matters within its context: BM25 (the ``bm25s`` library) ranks fixed-size passages of the
document against the claim, and the best ones are kept, in document order, up to a budget.

Deterministic for a given document and claim (the same passages every time, so a judgment's
cache key, which holds the document's hash and the claim, stays true to what was shown).

A document is cut and indexed once (``PassageIndex``), and kept for the next claims that cite
it (``document_passages``: the documents indexed last, up to ``INDEX_CACHE_CHARS`` characters,
by content hash): each claim then costs its own words' scores and a sort of the document's
passages. Cutting and indexing the whole document again for each claim made a report's cost
grow with its claims times its documents' size (2,000 claims on four 3 MB documents: over ten
minutes). What checks cost is counted before judging (``scoring.scorer.EvidenceCost``).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

from rubricsvc.bm25 import import_bm25s
from rubricsvc.errors import DependencyMissing

# What a judge reads of one document for one claim, at most.
PASSAGE_BUDGET_CHARS = 2400
PASSAGE_CHARS = 600
GAP = "\n[…]\n"
# Documents kept indexed in a process, in characters (about 4 bytes each of passages and
# index): the documents of the requests judged last, several requests' at the default bound.
INDEX_CACHE_CHARS = 16 * 1024 * 1024

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def passages(text: str, size: int = PASSAGE_CHARS) -> list[str]:
    """``text`` cut into passages of about ``size`` characters at sentence or line ends (a
    sentence longer than ``size`` is cut where it reaches it)."""
    pieces: list[str] = []
    current = ""
    for sentence in _SENTENCE_END.split(text):
        sentence = sentence.strip()
        while len(sentence) > size:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(sentence[:size])
            sentence = sentence[size:]
        if not sentence:
            continue
        if current and len(current) + 1 + len(sentence) > size:
            pieces.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}" if current else sentence
    if current:
        pieces.append(current)
    return pieces


def is_cut(text_chars: int, budget: int = PASSAGE_BUDGET_CHARS) -> bool:
    """Whether a document of ``text_chars`` characters is cut to passages (else shown whole)."""
    return text_chars > budget


def ranked_passages(text_chars: int, size: int = PASSAGE_CHARS) -> int:
    """About how many passages a claim's selection ranks in a document of ``text_chars``
    characters (one per ``size`` characters): what a check costs besides its claim."""
    return -(-text_chars // size)


class PassageIndex:
    """A document's passages, indexed once for BM25; ``relevant`` chooses a claim's."""

    def __init__(self, text: str, size: int = PASSAGE_CHARS) -> None:
        import numpy as np

        self.text = text
        self.pieces = passages(text, size)
        # What each passage takes of a budget, and the least any takes.
        self._costs = np.array([len(p) + len(GAP) for p in self.pieces], dtype=np.int64)
        self._least = int(self._costs.min(initial=len(GAP) + 1))
        self._retriever: Any = None
        self._known: frozenset[str] = frozenset()
        if not self.pieces:
            return
        bm25s = _bm25s()
        corpus = bm25s.tokenize(self.pieces, stopwords="en", show_progress=False)
        self._known = frozenset(corpus.vocab)
        if self._known:  # a document of stop words only has nothing to index
            self._retriever = bm25s.BM25()
            self._retriever.index(corpus, show_progress=False)

    def relevant(self, claim: str, budget: int = PASSAGE_BUDGET_CHARS) -> str:
        """The passages BM25 ranks highest for ``claim``, in document order, joined by a gap
        mark, within ``budget`` (as ``relevant_passages``): best first, each one that still
        fits is kept."""
        import numpy as np

        order = self._ranked(claim)
        costs = self._costs[order]
        chosen: list[int] = []
        left = budget
        start = 0
        # Each step finds the next passage that fits (a vectorized scan, not a Python loop
        # over every passage of a long document for every claim).
        while start < len(costs) and left >= self._least:
            fits = costs[start:] <= left
            step = int(np.argmax(fits))
            if not fits[step]:
                break
            start += step
            chosen.append(int(order[start]))
            left -= int(costs[start])
            start += 1
        return GAP.join(self.pieces[i] for i in sorted(chosen))

    def _ranked(self, claim: str) -> Any:
        """Passage indexes, best first for ``claim``; ties (and no shared word) in document
        order."""
        import numpy as np

        if self._retriever is not None:
            bm25s = _bm25s()
            words = _query_tokens(bm25s.tokenize([claim], stopwords="en", show_progress=False))
            words = [w for w in words if w in self._known]
            if words:
                # A stable sort of the negated scores: best first, ties in document order.
                return np.argsort(-self._retriever.get_scores(words), kind="stable")
        return np.arange(len(self.pieces))  # nothing in common: the document's own order


def relevant_passages(
    text: str, claim: str, budget: int = PASSAGE_BUDGET_CHARS, size: int = PASSAGE_CHARS
) -> str:
    """The document itself when it fits ``budget``; else its passages that BM25 ranks highest
    for ``claim``, in document order, joined by a gap mark, within ``budget``. A claim that
    shares no word with the document gets the document's first passages."""
    if not is_cut(len(text), budget):
        return text
    return PassageIndex(text, size).relevant(claim, budget)


class _IndexCache:
    """The documents indexed last, by content hash, up to ``limit`` characters in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._indexes: OrderedDict[str, PassageIndex] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, digest: str, text: str) -> PassageIndex:
        with self._lock:
            index = self._indexes.get(digest)
            if index is not None and len(index.text) == len(text):
                self._indexes.move_to_end(digest)
                return index
        # Indexed outside the lock: another thread's documents are not held up by this one.
        index = PassageIndex(text)
        with self._lock:
            old = self._indexes.pop(digest, None)
            if old is not None:
                self._chars -= len(old.text)
            if len(text) <= self.limit:
                self._indexes[digest] = index
                self._chars += len(text)
            while self._chars > self.limit:
                _, dropped = self._indexes.popitem(last=False)
                self._chars -= len(dropped.text)
        return index


_CACHE = _IndexCache(INDEX_CACHE_CHARS)


def document_passages(
    digest: str, text: str, claim: str, held: dict[str, PassageIndex] | None = None
) -> str:
    """``relevant_passages(text, claim)`` for the document of content hash ``digest``, with its
    index kept for the next claims that cite it: in ``held`` (the caller's, so that its claims
    never index a document twice, however many other documents the process indexes
    meanwhile) and in the process's cache."""
    if not is_cut(len(text)):
        return text
    index = held.get(digest) if held is not None else None
    if index is None:
        index = _CACHE.get(digest, text)
        if held is not None:
            held[digest] = index
    return index.relevant(claim)


def _bm25s() -> Any:
    try:
        bm25s = import_bm25s()
    except ImportError:
        raise DependencyMissing(
            "citation criteria on long documents rank passages with bm25s: "
            "pip install 'rubricsvc[evidence]'"
        ) from None
    return bm25s


def _query_tokens(query: object) -> list[str]:
    """The query's tokens as strings (``bm25s.tokenize`` gives ids and a vocabulary)."""
    ids, vocab = query.ids[0], query.vocab  # type: ignore[attr-defined]
    words = {index: word for word, index in vocab.items()}
    return [words[i] for i in ids if words.get(i)]
