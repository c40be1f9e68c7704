"""What the transformers backend computes once per group, and the benchmark's count of it."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from benchmarks.bench_judging import prefill_per_judgment
from rubricsvc.backends.transformers import (
    MIN_REUSED_PREFIX,
    PASS_COST_TOKENS,
    length_batches,
    reused_prefix_length,
)
from rubricsvc.backends.types import ChoiceRequest
from rubricsvc.judging.modes import Call

SHARED = list(range(100, 140))  # 40 tokens


def test_the_common_prefix_is_reused() -> None:
    assert reused_prefix_length([[*SHARED, 1, 2], [*SHARED, 3], [*SHARED, 4, 5, 6]]) == 40


def test_every_sequence_keeps_its_last_token() -> None:
    # Identical prompts: the last token is computed per request, it gives the logits.
    assert reused_prefix_length([SHARED, SHARED]) == 39
    assert reused_prefix_length([SHARED, [*SHARED, 7]]) == 39


def test_nothing_is_reused_alone_or_below_the_minimum() -> None:
    assert reused_prefix_length([[*SHARED, 1]]) == 0
    short = SHARED[: MIN_REUSED_PREFIX - 1]
    assert reused_prefix_length([[*short, 1], [*short, 2]]) == 0
    assert reused_prefix_length([[1, *SHARED], [2, *SHARED]]) == 0


class WordTokenizer:
    """One token per word of the chat's messages: enough to count prompt tokens."""

    def apply_chat_template(self, chat: Any, add_generation_prompt: bool, tokenize: bool) -> Any:
        assert not tokenize  # the backends render, then encode template and content apart
        return " ".join(f" {message['content']} " for message in chat)

    def __call__(self, text: str, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": [sum(map(ord, word)) for word in text.split()]}


def call(text: str, group: str | None) -> Call:
    chat = [{"role": "user", "content": text}]
    return Call(ChoiceRequest(chat, ("Yes", "No"), group=group), ("key",), lambda _: [])


# A rubric's criteria after their shared prefix, in tokens (the Auto-J writing rubric).
SUFFIXES = [82, 54, 71, 77, 66, 72, 53, 52, 58, 52, 61, 48, 49, 41, 64]


def _padded(lengths: list[int], batches: list[list[int]]) -> int:
    return sum(len(b) * max(lengths[i] for i in b) for b in batches)


def test_length_batches_hold_every_sequence_once_within_the_size() -> None:
    for lengths, size in ((SUFFIXES, 16), (SUFFIXES, 4), ([5] * 40, 16), ([9], 16), ([], 16)):
        batches = length_batches(lengths, size)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        assert all(0 < len(b) <= size for b in batches)


def test_length_batches_pad_less_than_the_order_given() -> None:
    batches = length_batches(SUFFIXES, 16)
    # In the order given, one pass pads every criterion to the longest (82): 1,230 positions
    # for 900 tokens. Sorted and split, the padding left is worth less than the passes added.
    assert _padded(SUFFIXES, batches) + PASS_COST_TOKENS * len(batches) < 15 * 82 + PASS_COST_TOKENS
    assert _padded(SUFFIXES, batches) < 1.05 * sum(SUFFIXES)
    # Each batch holds neighbours in length: none is longer than any of the next batch's.
    widths = [[SUFFIXES[i] for i in b] for b in batches]
    assert all(min(a) >= max(b) for a, b in pairwise(widths))


def test_length_batches_of_equal_lengths_take_the_fewest_passes() -> None:
    assert [len(b) for b in length_batches([5] * 40, 16)] in ([8, 16, 16], [16, 16, 8], [16, 8, 16])


def test_prefill_per_judgment_counts_a_group_prefix_once() -> None:
    prefix = " ".join(f"w{i}" for i in range(30))
    calls = [call(f"{prefix} criterion {n} extra", "a") for n in range(3)]
    calls.append(call("a lone request of seven words here", None))
    tokens = prefill_per_judgment(WordTokenizer(), calls)
    # Without reuse: 3 x 33 + 7 words; with it: 31 shared + 3 x 2 own + 7.
    assert tokens == {
        "without_reuse": round((3 * 33 + 7) / 4, 1),
        "with_reuse": round((31 + 3 * 2 + 7) / 4, 1),
        "bound": round((3 * 33 + 7) / (31 + 6 + 7), 2),
    }


def test_a_token_budget_bounds_each_batchs_padded_size() -> None:
    """What fits the device's memory: no batch's size times width passes the budget, except a
    sequence alone that is longer."""
    lengths = [10, 10, 10, 10, 40]
    assert length_batches(lengths, 16) == [[4], [0, 1, 2, 3]]
    batches = length_batches(lengths, 16, token_budget=25)
    assert batches == [[4], [0, 1], [2, 3]]
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))


def test_a_reused_prefix_counts_against_the_budget_in_every_row() -> None:
    """The documented GPU judge (``batch_size: 64, token_budget: 65536``) on a 4k-token report
    and 64 criteria of 50 tokens: the prefix's cache is copied into each row, so a batch holds
    rows x (4096 + 50) tokens, and at most 15 rows fit the budget (not 64)."""
    suffixes = [50] * 64
    batches = length_batches(suffixes, 64, token_budget=65536, prefix=4096)
    assert sorted(i for b in batches for i in b) == list(range(64))
    assert max(len(b) for b in batches) == 65536 // (4096 + 50) == 15
    assert all(len(b) * (4096 + max(suffixes[i] for i in b)) <= 65536 for b in batches)
    # A prefix past the budget alone: each row is a batch of its own.
    assert all(len(b) == 1 for b in length_batches([5] * 4, 16, token_budget=100, prefix=200))
