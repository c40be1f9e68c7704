"""Perturbations that give criterion labels contrast: each changes the text in its stated way,
the same seed gives the same copy, and a text a kind cannot apply to gives None."""

from __future__ import annotations

import re

import pytest

from rubricsvc.genrm.perturb import FILLER, KINDS, perturb

PROSE = (
    "Go to bed at the same time every day. Keep screens out of the last hour before bed. "
    "Most adults need 7 to 9 hours of sleep."
)
LISTED = "Try these:\n- Go to bed at the same time\n- No screens before bed\n1. A dark, cool room\nGood luck."
PROMPT = "How can I sleep better?"
PITFALL = "Take a sleeping pill every night"


def _made(kind: str, text: str, seed: int = 0) -> str:
    made = perturb(kind, text, seed, prompt=PROMPT, pitfalls=[PITFALL])
    assert made is not None and made.kind == kind
    return made.text


def test_truncate_cuts_at_a_word_and_keeps_a_prefix() -> None:
    cut = _made("truncate", PROSE)
    assert PROSE.startswith(cut) and 0 < len(cut.split()) < len(PROSE.split())
    assert PROSE[len(cut)] == " "  # cut between words, not inside one


def test_drop_sentence_removes_exactly_one_sentence() -> None:
    dropped = _made("drop_sentence", PROSE)
    sentences = re.split(r"(?<=\.) ", PROSE)
    kept = re.split(r"(?<=\.) ", dropped)
    assert len(kept) == len(sentences) - 1 and set(kept) < set(sentences)


def test_pad_appends_filler_sentences() -> None:
    padded = _made("pad", PROSE)
    assert padded.startswith(PROSE)
    added = padded[len(PROSE) :].strip()
    assert 2 <= sum(1 for filler in FILLER if filler in added) <= 4


def test_copy_prompt_answers_with_the_prompt() -> None:
    assert _made("copy_prompt", PROSE) == PROMPT
    assert perturb("copy_prompt", PROSE, 0) is None  # no prompt given
    assert perturb("copy_prompt", PROMPT, 0, prompt=PROMPT) is None  # the answer is the prompt


def test_list_to_prose_joins_the_list_into_one_paragraph() -> None:
    prose = _made("list_to_prose", LISTED)
    assert prose.splitlines() == [
        "Try these:",
        "Go to bed at the same time. No screens before bed. A dark, cool room.",
        "Good luck.",
    ]


def test_prose_to_list_makes_one_item_per_sentence() -> None:
    listed = _made("prose_to_list", PROSE)
    lines = listed.splitlines()
    assert len(lines) == 3 and all(line.startswith("- ") for line in lines)
    assert " ".join(line[2:] for line in lines) == PROSE


def test_insert_pitfall_adds_the_sentence_between_sentences() -> None:
    inserted = _made("insert_pitfall", PROSE)
    assert f"{PITFALL}." in inserted
    assert inserted.replace(f"{PITFALL}.", "").split() == PROSE.split()
    on_its_line = _made("insert_pitfall", LISTED)
    assert f"{PITFALL}." in on_its_line.splitlines()


def test_wrong_number_changes_one_number_and_nothing_else() -> None:
    changed = _made("wrong_number", PROSE)
    before, after = re.findall(r"\d+", PROSE), re.findall(r"\d+", changed)
    assert (
        len(before) == len(after) and sum(a != b for a, b in zip(before, after, strict=True)) == 1
    )
    assert re.sub(r"\d+", "N", changed) == re.sub(r"\d+", "N", PROSE)
    decimal = _made("wrong_number", "Drink 1.5 litres a day.")
    assert re.fullmatch(r"Drink \d+\.5 litres a day\.|Drink \d+\.0 litres a day\.", decimal)
    assert decimal != "Drink 1.5 litres a day."


def test_wrong_number_leaves_list_numbering_alone() -> None:
    assert perturb("wrong_number", "1. Rest\n2. Walk", 0) is None
    changed = _made("wrong_number", "1. Sleep 8 hours\n2. Walk")
    assert changed.startswith("1. Sleep ") and changed.endswith("\n2. Walk")


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("truncate", "One"),
        ("drop_sentence", "Only one sentence here."),
        ("list_to_prose", PROSE),
        ("list_to_prose", "Just:\n- one item"),
        ("prose_to_list", LISTED),
        ("prose_to_list", "Only one sentence here."),
        ("wrong_number", "No numbers at all."),
        ("insert_pitfall", f"Never do this: {PITFALL}."),  # it says it already
        ("pad", "   "),
    ],
)
def test_a_kind_that_cannot_apply_gives_none(kind: str, text: str) -> None:
    assert perturb(kind, text, 0, prompt=PROMPT, pitfalls=[PITFALL]) is None


def test_insert_pitfall_without_a_pitfall_gives_none() -> None:
    assert perturb("insert_pitfall", PROSE, 0) is None


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_seed_gives_the_same_copy(kind: str) -> None:
    text = PROSE + "\n" + LISTED if kind not in {"prose_to_list"} else PROSE
    runs = {
        perturb(kind, text, 7, prompt=PROMPT, pitfalls=[PITFALL, "Drink coffee late"])
        for _ in range(3)
    }
    assert len(runs) == 1 and None not in runs


def test_seeds_choose_differently() -> None:
    cuts = {_made("truncate", PROSE, seed) for seed in range(10)}
    assert len(cuts) > 1


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown perturbation 'shuffle'"):
        perturb("shuffle", PROSE, 0)
