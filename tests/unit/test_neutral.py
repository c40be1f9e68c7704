"""The neutralizing step: judged text keeps no template frame and no control token."""

from __future__ import annotations

import random
import signal
import unicodedata
from collections.abc import Iterator

import pytest

from rubricsvc import neutral
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec

WJ = neutral.WORD_JOINER


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a</response>b", "a\u2039/response\u203ab"),
        ("< / Response >", "\u2039/response\u203a"),
        ('<response class="grader">', "\u2039response\u203a"),
        ("<response/>", "\u2039response\u203a"),
        ("</res\u200bponse>", "\u2039/response\u203a"),  # zero-width space inside
        ("\uff1c/\uff52\uff45\uff53\uff50\uff4f\uff4e\uff53\uff45\uff1e", "\u2039/response\u203a"),
        ("\u2039/r\u0435sp\u043ense\u203a", "\u2039/response\u203a"),  # Cyrillic e and o
        ("\u27e8/conversation\u27e9", "\u2039/conversation\u203a"),
        ("</reference-report>", "\u2039/reference_report\u203a"),
        ("<target_report >", "\u2039target_report\u203a"),
    ],
)
def test_frame_tags_and_look_alikes_are_defused(text: str, expected: str) -> None:
    assert neutral.defuse_frames(text) == expected


def test_text_without_frames_is_unchanged() -> None:
    text = "Use <b>bold</b>, a < b > c, responses and <responsive> layouts; caf\u00e9 \u2603"
    assert neutral.defuse_frames(text) == text
    assert neutral.judged(text) == text


@pytest.mark.parametrize(
    "token",
    [
        "<|im_end|>",
        "<|im_start|>",
        "<|eot_id|>",
        "<|start_header_id|>",
        "<|reserved_special_token_7|>",
        "<start_of_turn>",
        "<end_of_turn>",
        "[INST]",
        "[/INST]",
        "</s>",
        "<<SYS>>",
        "<\uff5cUser\uff5c>",
        "<|channel|>",
    ],
)
def test_special_tokens_of_common_families_are_broken(token: str) -> None:
    text = f"ok{token}Yes"
    broken = neutral.judged(text)
    assert token not in broken
    assert broken.replace(WJ, "") == text  # the same text to read, one invisible joiner
    assert neutral.COMMON.find(broken) is None


def test_listed_tokens_are_broken_even_when_matches_overlap() -> None:
    tokens = neutral.SpecialTokens(["ab", "bc", "<repo_name>"])
    for text in ("abc", "abcbcab", "x<repo_name>y", "aabbcc" * 50):
        out = tokens.break_all(text)
        assert tokens.find(out) is None, out
        assert out.replace(WJ, "") == text


@pytest.fixture
def one_second() -> Iterator[None]:
    """Fail, rather than hang, when the body takes more than a second."""

    def expired(*_: object) -> None:
        raise TimeoutError("took over a second: not linear")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(1)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    "text",
    [
        "<response" * 20_000,
        "< " * 100_000,
        "<|" + "a" * 100_000,
        "<\uff5c" * 50_000,
        "\u200b<" * 50_000,
        "[INST" * 30_000,
    ],
)
def test_neutralizing_is_linear(text: str, one_second: None) -> None:
    neutral.judged(text)


def test_the_neutralizer_version_is_part_of_the_judge_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = BUILTIN_JUDGES["embedded"]
    assert spec.hashed_settings()["neutralizer"] == neutral.VERSION
    before = spec.config_hash()
    monkeypatch.setattr(neutral, "VERSION", neutral.VERSION + "-next")
    assert JudgeSpec.model_validate(spec.model_dump()).config_hash() != before


def _fold_each_character(text: str) -> tuple[str, list[int]]:
    """Folding as it is defined: every character on its own (what ``neutral._fold`` does for
    the characters outside ASCII only)."""
    folded: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        if neutral._INVISIBLE.match(char):
            continue
        if not char.isascii():
            char = unicodedata.normalize("NFKC", char).translate(neutral._CONFUSABLES)
        for part in char.lower():
            folded.append(part)
            origin.append(index)
    return "".join(folded), origin


def test_folding_text_outside_ascii_folds_each_character_as_defined() -> None:
    """ASCII runs are folded whole (a citation check's passages hold one "…" among thousands
    of ASCII characters): the same folded text and origins as folding each character."""
    pieces = [*"aZ</>= _-\n", "response", "</res\u200bponse>", "\uff1c/claim\uff1e", "\u2026"]
    pieces += [
        *"\u200b\u2060\ufeff\u00ad\U000e0041\u2039\u203a\u0430\u03bf\ufb01\u0130\u00df\u212a"
    ]
    rnd = random.Random(5)
    for _ in range(3000):
        text = "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 40)))
        assert neutral._fold(text) == _fold_each_character(text), repr(text)
    passages = "word " * 480 + "\n[\u2026]\n" + "more </document> text " * 100
    assert neutral._fold(passages) == _fold_each_character(passages)
    assert "\u2039/document\u203a" in neutral.judged(passages)
