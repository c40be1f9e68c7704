"""The passages of a long document that bear on a claim, so a judge checking the claim reads
what matters within its context: BM25 (the ``bm25s`` library) ranks fixed-size passages of the
document against the claim, and the best ones are kept, in document order, up to a budget.

Deterministic for a given document and claim (the same passages every time, so a judgment's
cache key, which holds the document's hash and the claim, stays true to what was shown).
"""

from __future__ import annotations

import re

from rubricsvc.errors import DependencyMissing

# What a judge reads of one document for one claim, at most.
PASSAGE_BUDGET_CHARS = 2400
PASSAGE_CHARS = 600
GAP = "\n[…]\n"

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


def relevant_passages(
    text: str, claim: str, budget: int = PASSAGE_BUDGET_CHARS, size: int = PASSAGE_CHARS
) -> str:
    """The document itself when it fits ``budget``; else its passages that BM25 ranks highest
    for ``claim``, in document order, joined by a gap mark, within ``budget``. A claim that
    shares no word with the document gets the document's first passages."""
    if len(text) <= budget:
        return text
    pieces = passages(text, size)
    order = _ranked(pieces, claim)
    chosen: list[int] = []
    used = 0
    for index in order:
        cost = len(pieces[index]) + len(GAP)
        if used + cost > budget:
            continue
        chosen.append(index)
        used += cost
    return GAP.join(pieces[i] for i in sorted(chosen))


def _ranked(pieces: list[str], claim: str) -> list[int]:
    """Passage indexes, best first for ``claim``; ties (and no shared word) in document order."""
    try:
        import bm25s
    except ImportError:
        raise DependencyMissing(
            "citation criteria on long documents rank passages with bm25s: "
            "pip install 'rubricsvc[evidence]'"
        ) from None
    corpus = bm25s.tokenize(pieces, stopwords="en", show_progress=False)
    known = set(corpus.vocab)
    words = _query_tokens(bm25s.tokenize([claim], stopwords="en", show_progress=False))
    words = [w for w in words if w in known]
    if not words:  # nothing in common: the document's own order
        return list(range(len(pieces)))
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    scores = retriever.get_scores(words)
    return sorted(range(len(pieces)), key=lambda i: (-float(scores[i]), i))


def _query_tokens(query: object) -> list[str]:
    """The query's tokens as strings (``bm25s.tokenize`` gives ids and a vocabulary)."""
    ids, vocab = query.ids[0], query.vocab  # type: ignore[attr-defined]
    words = {index: word for word, index in vocab.items()}
    return [words[i] for i in ids if words.get(i)]
