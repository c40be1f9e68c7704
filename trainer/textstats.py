"""Length and repetition of completions: the two cheapest signs of a policy gaming its judge."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rubricsvc.judging.readers.checks import word_count


def repeated_ngram_fraction(text: str, n: int = 3) -> float:
    """Share of the text's word n-grams that occur more than once in it (0: no repetition)."""
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    counts = Counter(grams)
    return sum(c for c in counts.values() if c > 1) / len(grams)


def text_stats(texts: Sequence[str], n: int = 3) -> dict[str, float]:
    """Mean words, mean characters and mean repeated n-gram fraction of ``texts``."""
    if not texts:
        return {}
    size = len(texts)
    return {
        "text/words": sum(word_count(t) for t in texts) / size,
        "text/chars": sum(len(t) for t in texts) / size,
        f"text/repeated_{n}gram_fraction": sum(repeated_ngram_fraction(t, n) for t in texts) / size,
    }
