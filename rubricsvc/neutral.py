# ruff: noqa: RUF002, RUF003 - look-alike characters are this module's subject
"""Judged text stays data: the one neutralizing step every verdict mode and backend shares.

A policy under training writes the text a judge reads, so anything that text can make the
judge's input *do* will be found. Two things must never come out of judged text (a prompt,
a response, a reference, a criterion):

- **a template frame**: ``</response>`` inside a response would close the frame early and
  let what follows pose as the grader's instructions. Frame tags, and their look-alikes
  (zero-width characters inside, fullwidth or homoglyph brackets and letters, attributes),
  are rewritten to one inert form, ``‹/response›``.
- **a control token**: ``<|im_end|>`` typed into a response must not become the tokenizer's
  end-of-turn token. Backends that tokenize here (transformers, vllm) encode judged content
  with special-token parsing off (:func:`encode_chat`), so that holds for every special
  token of the model; for text that leaves this process (an OpenAI-compatible server
  tokenizes it), the special-token strings of the common chat families, plus the model's
  own when its tokenizer is known, are broken by an invisible word joiner after their
  first character (:func:`break_special_tokens`), which no tokenizer matches.

Everything here runs in time linear in the text (bounded patterns, no nested repetition).
:data:`VERSION` is part of every judge config's hash: a change here is a different judge,
so no cached verdict is replayed for text that was neutralized differently.
"""

from __future__ import annotations

import functools
import re
import unicodedata
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from rubricsvc.inputpolicy import INVISIBLE

VERSION = "5"

# Tags the bundled templates use to frame data.
# (3: ``reference_answer``, the frame of a reference answer shown with ``reference: true``.)
# (4: ``trajectory``, the frame of an agent trajectory judged by a trajectory criterion.)
# (5: ``document`` and ``claim``, the frames of a citation check.)
FRAME_TAGS = (
    "conversation",
    "response",
    "task",
    "reference_report",
    "target_report",
    "reference_answer",
    "trajectory",
    "document",
    "claim",
)

# Characters that render as nothing: a tag with one inside still reads as the tag. (The input
# policy's one list, which the review pages mark too: a change to it is a new VERSION here.)
_INVISIBLE = INVISIBLE
# Runs of characters outside ASCII: the only ones folding looks at one by one.
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# Look-alikes that NFKC leaves alone: angle brackets, a slash, and the Cyrillic and Greek
# letters that read as the Latin letters of the frame tags.
_CONFUSABLES = str.maketrans(
    {
        **dict.fromkeys("\u2039\u2329\u27e8\u3008\u276e\u276c\u300a\u00ab\u1438\u02c2", "<"),
        **dict.fromkeys("\u203a\u232a\u27e9\u3009\u276f\u276d\u300b\u00bb\u1433\u02c3", ">"),
        **dict.fromkeys("\u2044\u2215\u29f8\u2571", "/"),
        "\u0430": "a", "\u0441": "c", "\u0435": "e", "\u0456": "i", "\u043e": "o",
        "\u0440": "p", "\u0455": "s", "\u0442": "t", "\u0443": "y", "\u0445": "x",
        "\u03bf": "o", "\u03b1": "a", "\u03b5": "e", "\u03c1": "p", "\u03c4": "t",
        "\u0410": "a", "\u0421": "c", "\u0415": "e", "\u041e": "o", "\u0420": "p",
        "\u0422": "t", "\u0405": "s", "\u0406": "i", "\u039f": "o", "\u03a1": "p",
        "\u03a4": "t", "\u0391": "a", "\u0395": "e",
    }
)  # fmt: skip
_TAG_NAMES = "|".join(t.replace("_", r"[\s_-]*") for t in FRAME_TAGS)
# On the folded text: ``<``, an optional ``/``, a frame tag's name, then either ``>`` or
# attributes (bounded, so a tag never left open costs at most 200 characters of scanning).
_FRAME_TAG = re.compile(rf"<\s*(/?)\s*({_TAG_NAMES})(?:[\s/][^<>]{{0,200}})?>")


def _fold(text: str) -> tuple[str, list[int]]:
    """``text`` folded for matching (invisibles dropped, NFKC, look-alikes mapped, lower
    case) and, for each folded character, the index of the character it came from."""
    if text.isascii():
        return text.lower(), list(range(len(text)))
    folded: list[str] = []
    origin: list[int] = []
    last = 0
    # Only the characters outside ASCII one by one (no ASCII character is invisible, and each
    # folds to itself in lower case): a citation check's passages hold the gap mark "…", and
    # folding every character of them one by one cost milliseconds per check.
    for run in _NON_ASCII.finditer(text):
        start, end = run.span()
        folded.append(text[last:start].lower())
        origin.extend(range(last, start))
        for index in range(start, end):
            char = text[index]
            if _INVISIBLE.match(char):
                continue
            char = unicodedata.normalize("NFKC", char).translate(_CONFUSABLES)
            for part in char.lower():
                folded.append(part)
                origin.append(index)
        last = end
    folded.append(text[last:].lower())
    origin.extend(range(last, len(text)))
    return "".join(folded), origin


def defuse_frames(text: str) -> str:
    """``text`` with every frame tag and look-alike rewritten to ``‹tag›`` / ``‹/tag›``."""
    if not text:
        return text
    folded, origin = _fold(text)
    pieces: list[str] = []
    last = 0
    for match in _FRAME_TAG.finditer(folded):
        start, end = origin[match.start()], origin[match.end() - 1] + 1
        name = re.sub(r"[\s_-]+", "_", match.group(2))
        pieces.append(text[last:start])
        pieces.append(f"\u2039{match.group(1)}{name}\u203a")
        last = end
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


# -- control tokens --------------------------------------------------------------------

WORD_JOINER = "\u2060"

# Special-token strings of the common chat-template families, as regular expressions.
# ``<|...|>`` covers ChatML (Qwen, SmolLM), Llama 3, Phi, Command R and gpt-oss at once.
COMMON_SPECIAL_TOKENS: tuple[str, ...] = (
    r"<\|[A-Za-z0-9_.:/-]{1,64}\|>",  # <|im_end|>, <|eot_id|>, <|start_header_id|>, ...
    r"<\uff5c[^<>\uff5c]{1,64}\uff5c>",  # DeepSeek: <｜end▁of▁sentence｜>, <｜User｜>
    r"</?s>",  # Llama 2, Mistral
    r"\[/?INST\]",
    r"<</?SYS>>",
    r"\[/?(?:SYSTEM_PROMPT|AVAILABLE_TOOLS|TOOL_RESULTS|TOOL_CALLS|TOOL_CONTENT)\]",
    r"<(?:start|end)_of_turn>",  # Gemma
    r"<(?:bos|eos|pad|unk|mask)>",
)


class SpecialTokens:
    """Finds special-token strings in text: the common families plus ``extra`` literals."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        literals = sorted({t for t in extra if len(t) > 1}, key=len, reverse=True)
        self.extra = tuple(literals)
        # Alternatives of literals and bounded classes: linear in the text.
        self._pattern = re.compile(
            "|".join([*(re.escape(t) for t in literals), *COMMON_SPECIAL_TOKENS])
        )

    def find(self, text: str) -> re.Match[str] | None:
        return self._pattern.search(text)

    def break_all(self, text: str) -> str:
        """``text`` with a word joiner after the first character of every special token."""
        # One pass breaks every match it finds; a match can only hide another by overlap,
        # and the joiner (in no token) leaves fewer each pass, so a few passes suffice.
        for _ in range(8):
            if self._pattern.search(text) is None:
                return text
            text = self._pattern.sub(lambda m: m.group(0)[0] + WORD_JOINER + m.group(0)[1:], text)
        # Pathological overlaps: join every character, which no token of two or more matches.
        return WORD_JOINER.join(text) if self._pattern.search(text) else text


COMMON = SpecialTokens()


def break_special_tokens(text: str, tokens: SpecialTokens = COMMON) -> str:
    return tokens.break_all(text)


def judged(text: str) -> str:
    """Text that came from outside the judge (prompt, response, reference, criterion),
    made safe to place in a judge's prompt: frames defused, special tokens broken."""
    if len(text) <= _REMEMBERED_CHARS:
        return _judged_remembered(text)
    return break_special_tokens(defuse_frames(text))


# A criterion's text is shown once per completion judged against it: short texts are
# neutralized once and remembered (a pure function of the text; at most 8,192 of them, of
# at most 2,000 characters each).
_REMEMBERED_CHARS = 2000


@functools.lru_cache(maxsize=8192)
def _judged_remembered(text: str) -> str:
    return break_special_tokens(defuse_frames(text))


def tokenizer_special_tokens(tokenizer: Any) -> list[str]:
    """Every special-token string ``tokenizer`` would match in text."""
    found = set(getattr(tokenizer, "all_special_tokens", None) or ())
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    for token in decoder.values():
        if getattr(token, "special", False):
            found.add(str(token.content))
    return sorted(found)


# -- encoding with the model's own tokenizer -------------------------------------------


class TemplateMangledContent(ValueError):
    """The chat template changes message content in a way this encoder cannot mirror."""


def encode_chat(tokenizer: Any, chat: Sequence[dict[str, str]]) -> list[int]:
    """Token ids of ``chat`` rendered with the model's template, ready for the reply, where
    only the template's own text can produce special tokens: every message's content is
    encoded with special-token parsing off, so ``<|im_end|>`` in it is plain text."""
    marker = f"\ue000{uuid.uuid4().hex}\ue001"
    marked = [{**m, "content": f"{marker}{i}{marker}"} for i, m in enumerate(chat)]
    rendered = tokenizer.apply_chat_template(marked, add_generation_prompt=True, tokenize=False)
    parts = rendered.split(marker)
    # parts: template, index, template, index, ..., template
    if len(parts) != 2 * len(chat) + 1 or [int(p) for p in parts[1::2]] != list(range(len(chat))):
        raise TemplateMangledContent("the chat template drops or repeats a message")
    contents = [str(m["content"]) for m in chat]
    expected = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    if _joined(parts, contents) != expected:
        # Templates that trim content (Llama 3's ``| trim``) are mirrored; others refused.
        contents = [c.strip() for c in contents]
        if _joined(parts, contents) != expected:
            raise TemplateMangledContent("the chat template rewrites message content")
    ids: list[int] = []
    for index, piece in enumerate(parts):
        if index % 2 == 0:
            if piece:
                ids.extend(_ids(tokenizer(piece, add_special_tokens=False)))
        else:
            content = contents[int(piece)]
            if content:
                ids.extend(
                    _ids(tokenizer(content, add_special_tokens=False, split_special_tokens=True))
                )
    return ids


def _joined(parts: list[str], contents: list[str]) -> str:
    return "".join(p if i % 2 == 0 else contents[int(p)] for i, p in enumerate(parts))


def _ids(encoding: Any) -> list[int]:
    ids = encoding["input_ids"] if hasattr(encoding, "keys") else encoding
    return [int(i) for i in ids]
