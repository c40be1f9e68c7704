"""Seeded perturbations of a completion: the same answer made worse (or just different) in one
stated way, so that a criterion met by the original is missed by its copy.

Stored completions of one prompt tend to meet the same criteria, so their labels have no
contrast and a judge trained on them learns each criterion's usual answer, not how to read the
text. A perturbed copy differs from its original in one known way (a sentence gone, a number
changed, the prompt echoed back), and a labeller that reads the text (a check) says which
criteria that changed.

Each kind returns None where it cannot apply (no list to join, no number to change) rather
than an unchanged copy, which would only repeat its original's labels. The same seed, kind and
text give the same result in any process: the random state is seeded from all three.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

KINDS = (
    "truncate",
    "drop_sentence",
    "pad",
    "copy_prompt",
    "list_to_prose",
    "prose_to_list",
    "insert_pitfall",
    "wrong_number",
)

# Sentences that say nothing: what a policy pads an answer with to look thorough.
FILLER = (
    "This is an important topic that many people think about.",
    "There are many factors to consider here.",
    "Everyone's situation is different, so results may vary.",
    "It is always a good idea to keep this in mind.",
    "In summary, there is a lot to think about.",
    "I hope this helps you with your question.",
)

_WORD = re.compile(r"\S+")
# A sentence ends at ., ! or ? followed by whitespace, or at a line break.
_SENTENCE_BREAK = re.compile(r"((?<=[.!?])[ \t]+|\s*\n\s*)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+(?P<item>\S.*)$")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?!\w)")


@dataclass(frozen=True)
class Perturbation:
    kind: str
    text: str


def perturb(
    kind: str,
    text: str,
    seed: int,
    *,
    prompt: str | None = None,
    pitfalls: Sequence[str] = (),
) -> Perturbation | None:
    """``text`` perturbed by ``kind``, or None where the kind does not apply to it.

    ``prompt`` is what ``copy_prompt`` copies; ``pitfalls`` the sentences ``insert_pitfall``
    chooses from."""
    if kind not in KINDS:
        raise ValueError(f"unknown perturbation {kind!r}; kinds: {', '.join(KINDS)}")
    if not text.strip():
        return None
    rng = random.Random(f"{seed}/{kind}/{text}")  # a str seed hashes alike in every process
    made: str | None
    if kind == "copy_prompt":
        made = prompt.strip() if prompt and prompt.strip() else None
    elif kind == "insert_pitfall":
        made = insert_pitfall(text, rng, pitfalls)
    else:
        made = _SIMPLE[kind](text, rng)
    if made is None or not made.strip() or made.strip() == text.strip():
        return None
    return Perturbation(kind, made)


def truncate(text: str, rng: random.Random) -> str | None:
    """The text cut after 30-70% of its words (at least one word kept, one cut)."""
    words = list(_WORD.finditer(text))
    if len(words) < 2:
        return None
    keep = min(max(int(len(words) * rng.uniform(0.3, 0.7)), 1), len(words) - 1)
    return text[: words[keep - 1].end()]


def drop_sentence(text: str, rng: random.Random) -> str | None:
    """One sentence (or list line) removed, the others as they were."""
    parts = _SENTENCE_BREAK.split(text)  # sentence, break, sentence, break, ..., sentence
    sentences = [i for i in range(0, len(parts), 2) if parts[i].strip()]
    if len(sentences) < 2:
        return None
    gone = rng.choice(sentences)
    # The sentence goes with the break after it (the last one with the break before it).
    cut = (gone, gone + 2) if gone + 1 < len(parts) else (gone - 1, gone + 1)
    return "".join(parts[: cut[0]] + parts[cut[1] :])


def pad(text: str, rng: random.Random) -> str | None:
    """Two to four filler sentences appended."""
    filler = rng.sample(FILLER, rng.randint(2, 4))
    return f"{text.rstrip()} {' '.join(filler)}"


def list_to_prose(text: str, rng: random.Random) -> str | None:
    """Each markdown or numbered list (two items or more) joined into one paragraph."""
    del rng  # one way to join
    lines = text.splitlines()
    out: list[str] = []
    items: list[str] = []
    joined = False

    def flush() -> None:
        nonlocal joined
        if len(items) >= 2:
            out.append(" ".join(_as_sentence(item) for item in items))
            joined = True
        else:
            out.extend(f"- {item}" for item in items)  # a lone item: left a list line
        items.clear()

    for line in lines:
        found = _LIST_ITEM.match(line)
        if found:
            items.append(found["item"].strip())
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out) if joined else None


def prose_to_list(text: str, rng: random.Random) -> str | None:
    """The sentences of a text with no list, one list item each (two sentences or more)."""
    del rng  # one way to split
    if any(_LIST_ITEM.match(line) for line in text.splitlines()):
        return None
    sentences = [s.strip() for s in _SENTENCE_BREAK.split(text)[::2] if s.strip()]
    if len(sentences) < 2:
        return None
    return "\n".join(f"- {sentence}" for sentence in sentences)


def insert_pitfall(text: str, rng: random.Random, pitfalls: Sequence[str]) -> str | None:
    """One of ``pitfalls`` inserted between two sentences (or at the end); None without one,
    or where the text says it already."""
    usable = [
        p.strip() for p in pitfalls if p.strip() and p.strip().casefold() not in text.casefold()
    ]
    if not usable:
        return None
    pitfall = _as_sentence(rng.choice(usable))
    parts = _SENTENCE_BREAK.split(text)
    sentences = [i for i in range(0, len(parts), 2) if parts[i].strip()]
    after = rng.choice(sentences)
    # Set off as its neighbours are: on a line of its own after a line, else after a space.
    gap = parts[after + 1] if after + 1 < len(parts) else " "
    return "".join(parts[: after + 1]) + gap + pitfall + "".join(parts[after + 1 :])


def wrong_number(text: str, rng: random.Random) -> str | None:
    """One number in the text changed to another (an integer stays an integer; a decimal keeps
    its places)."""
    numbers = [n for n in _NUMBER.finditer(text) if not _is_list_marker(text, n)]
    if not numbers:
        return None
    found = rng.choice(numbers)
    shown = found.group()
    places = len(shown.partition(".")[2])
    value = float(shown)
    # Multiplied, so the change is never within rounding (0 has no multiple: a digit instead).
    changed = value * rng.choice((2, 3, 10)) if value else float(rng.randint(1, 9))
    new = f"{changed:.{places}f}"
    return text[: found.start()] + new + text[found.end() :]


def _is_list_marker(text: str, number: re.Match[str]) -> bool:
    """Whether ``number`` numbers a list item ("2. ..." at a line's start), not a fact."""
    line_start = text.rfind("\n", 0, number.start()) + 1
    return not text[line_start : number.start()].strip() and bool(
        re.match(r"[.)]\s", text[number.end() : number.end() + 2])
    )


def _as_sentence(item: str) -> str:
    item = item.strip()
    return item if item.endswith((".", "!", "?", ":")) else f"{item}."


_SIMPLE: dict[str, Callable[[str, random.Random], str | None]] = {
    "truncate": truncate,
    "drop_sentence": drop_sentence,
    "pad": pad,
    "list_to_prose": list_to_prose,
    "prose_to_list": prose_to_list,
    "wrong_number": wrong_number,
}
