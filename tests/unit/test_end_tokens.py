"""A policy's end-of-turn tokens come off the end of a reward response, and only there."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rubricsvc.config import END_TOKENS, ApiSettings
from rubricsvc.scoring.rewards import RewardRequest, strip_end_tokens, without_end_tokens


@pytest.mark.parametrize(
    ("sent", "judged"),
    [
        ("Wind howls.<|im_end|>", "Wind howls."),
        ("Wind howls.<|eot_id|>", "Wind howls."),
        ("Wind howls.<|endoftext|>", "Wind howls."),
        ("Wind howls.</s>", "Wind howls."),
        ("Wind howls.<end_of_turn>", "Wind howls."),
        ("Wind howls.<|end|>", "Wind howls."),
        # Repeated, and with the whitespace a template puts after them.
        ("Wind howls.<|im_end|>\n", "Wind howls."),
        ("Wind howls.<|im_end|><|endoftext|>", "Wind howls."),
        ("Wind howls.<|im_end|>\n<|endoftext|>\n", "Wind howls."),
        # The response's own whitespace before the token is its own.
        ("Wind howls.\n<|im_end|>", "Wind howls.\n"),
        # A token anywhere but the end stays; text without one is untouched.
        ("Say <|im_end|> twice.", "Say <|im_end|> twice."),
        ("<|im_end|> first, then text.<|im_end|>", "<|im_end|> first, then text."),
        ("Wind howls.\n", "Wind howls.\n"),
        ("Wind howls.<|im_end", "Wind howls.<|im_end"),
        ("<|im_end|>", ""),
    ],
)
def test_only_trailing_end_tokens_are_stripped(sent: str, judged: str) -> None:
    assert strip_end_tokens(sent, END_TOKENS) == judged


def test_the_setting_names_the_tokens() -> None:
    assert ApiSettings().end_tokens == list(END_TOKENS)
    custom = ApiSettings(end_tokens="<|eom_id|>, <|im_end|>")  # type: ignore[arg-type]
    assert custom.end_tokens == ["<|eom_id|>", "<|im_end|>"]
    assert strip_end_tokens("Done.<|eom_id|>", custom.end_tokens) == "Done."
    assert strip_end_tokens("Done.<|eot_id|>", custom.end_tokens) == "Done.<|eot_id|>"
    off = ApiSettings(end_tokens="")  # type: ignore[arg-type]
    assert off.end_tokens == [] and strip_end_tokens("Done.</s>", off.end_tokens) == "Done.</s>"


def test_requests_keep_everything_but_the_tokens() -> None:
    request = RewardRequest(completion="Hi.<|im_end|>", prompt_id="p", rubric="r@1")
    (stripped,) = without_end_tokens([request], END_TOKENS)
    assert stripped == RewardRequest(completion="Hi.", prompt_id="p", rubric="r@1")


def test_the_longest_token_a_text_ends_with_goes_whole() -> None:
    # "|>" is also how "<|im_end|>" ends: the whole token goes, not its last two characters.
    assert strip_end_tokens("Hi.<|im_end|>", ["|>", "<|im_end|>"]) == "Hi."
    assert strip_end_tokens("Hi.<|im_end|>", ("<|im_end|>", "|>")) == "Hi."


def test_an_empty_token_strips_nothing() -> None:
    assert strip_end_tokens("Done.", ["", "</s>"]) == "Done."
    assert strip_end_tokens("Done.</s>", ["", "</s>"]) == "Done."


def test_a_request_without_end_tokens_is_kept_as_given() -> None:
    plain = RewardRequest(completion="Hi.", prompt_id="p")
    ending = RewardRequest(completion="Hi.</s>", prompt_id="p")
    kept, stripped = without_end_tokens([plain, ending], END_TOKENS)
    assert kept is plain
    assert stripped == RewardRequest(completion="Hi.", prompt_id="p")
    assert ending.completion == "Hi.</s>"  # the request given is left as it was


def one_token_at_a_time(text: str, tokens: list[str]) -> str:
    """The rule as first written: the longest token the text ends with, after its trailing
    whitespace, taken off one at a time (a copy of the text each time)."""
    ordered = sorted((t for t in tokens if t), key=len, reverse=True)
    kept = text
    while True:
        end = kept.rstrip()
        token = next((t for t in ordered if end.endswith(t)), None)
        if token is None:
            return kept
        kept = end[: -len(token)]


# Texts made of the pieces that matter: tokens, tokens' parts, whitespace (Unicode's too).
PIECES = st.sampled_from(
    ["<|im_end|>", "|>", "</s>", "s>", "<|end|>", "d|>", " ", "\n", "\u3000", "x", ".", "<"]
)
TOKEN_SETS = st.sampled_from([list(END_TOKENS), ["|>", "<|im_end|>"], ["s>", "</s>", ""], []])


@given(st.lists(PIECES, max_size=16).map("".join), TOKEN_SETS)
def test_the_rule_is_the_one_token_at_a_time_rule(text: str, tokens: list[str]) -> None:
    assert strip_end_tokens(text, tokens) == one_token_at_a_time(text, tokens)


def test_a_million_end_tokens_come_off_whole() -> None:
    # The length a request's body allows; taken off one at a time this was quadratic (about
    # 2 s for 200,000 tokens, minutes for a million, on the server's event loop).
    assert strip_end_tokens("Answer." + "</s>\n" * 1_000_000, END_TOKENS) == "Answer."
