"""The in-process transformers backend with the real embedded model: prefix reuse is exact,
logits only where a verdict reads them change nothing, and neither does what else a batch holds."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from rubricsvc.backends.kept import KeptView
from rubricsvc.backends.types import ChoiceRequest
from rubricsvc.db import make_engine, session_scope
from rubricsvc.judging.config import BUILTIN_JUDGES
from rubricsvc.judging.modes import (
    CallContext,
    CompletionView,
    CriterionView,
    Item,
    criterion_prob_calls,
)
from rubricsvc.rubrics.versions import approve, save_rubric
from rubricsvc.scoring.rewards import RewardRequest, compute_rewards
from rubricsvc.scoring.scorer import ScoreOptions
from tests.helpers import rubric_spec
from tests.requirements import require_module

pytestmark = pytest.mark.model

require_module("transformers", "transformers")

RESPONSE = (
    "Recursion is when a function solves a problem by calling itself on a smaller piece of the "
    "same problem. Every recursive function needs a base case that stops the calls. Example: "
    "factorial(n) = n * factorial(n - 1), with factorial(0) = 1. "
) * 3
CRITERIA = [
    "Defines recursion as a function that calls itself",
    "Explains the role of a base case",
    "Gives a short concrete example",
    "Claims recursion is always faster than a loop",
    "Uses plain language a beginner can follow",
    "Mentions stack overflow",
]


@pytest.fixture(scope="module")
def backend():  # type: ignore[no-untyped-def]
    from rubricsvc.backends.transformers import TransformersBackend

    backend = TransformersBackend(batch_size=4)
    yield backend
    backend.close()


def _requests() -> list[ChoiceRequest]:
    spec = BUILTIN_JUDGES["embedded"]
    requests = []
    for completion_id in (1, 2):
        completion = CompletionView(
            completion_id,
            [{"role": "user", "content": "Explain recursion to a beginner."}],
            RESPONSE if completion_id == 1 else RESPONSE.upper(),
        )
        items = [
            Item(f"{completion_id}-{i}", CriterionView(i, text, None, 1.0, {"type": "binary"}))
            for i, text in enumerate(CRITERIA)
        ]
        calls = criterion_prob_calls(CallContext(spec, spec.prompt_template(), completion), items)
        requests += [call.request for call in calls if isinstance(call.request, ChoiceRequest)]
    return requests


def test_prefix_reuse_gives_the_same_probabilities(backend) -> None:  # type: ignore[no-untyped-def]
    requests = _requests()
    assert len(requests) == 12
    assert len({r.group for r in requests}) == 2  # one shared prefix per completion
    backend.prefix_reuse = True
    reused = backend.choice_probs(requests)
    backend.prefix_reuse = False
    plain = backend.choice_probs(requests)
    backend.prefix_reuse = True
    for with_reuse, without in zip(reused, plain, strict=True):
        assert set(with_reuse.probs) == {"Yes", "yes", "No", "no"}
        for choice, probability in without.probs.items():
            assert with_reuse.probs[choice] == pytest.approx(probability, abs=1e-4)
    # The criteria differ, so the verdict distributions must too: the suffix is not ignored.
    assert len({round(r.probs["Yes"], 6) for r in reused}) > 1


def test_the_shared_prefix_is_long(backend) -> None:  # type: ignore[no-untyped-def]
    """The layout puts the response before the criterion, so most of each prompt is shared."""
    from rubricsvc.backends.transformers import reused_prefix_length

    requests = [r for r in _requests() if r.group == "1"]
    sequences = [backend.encode(r.chat) for r in requests]
    shared = reused_prefix_length(sequences)
    assert shared / max(len(s) for s in sequences) > 0.8
    # What is reused is a prefix of every sequence, and leaves each its last token.
    assert all(s[:shared] == sequences[0][:shared] and len(s) > shared for s in sequences)


@pytest.mark.parametrize("reuse", [True, False])
def test_logits_at_the_read_positions_only_change_no_probability(backend, reuse: bool) -> None:  # type: ignore[no-untyped-def]
    """The vocabulary projection is computed only where a verdict is read (one position per
    row; with prefix reuse, each row's own last token in a right-padded chunk of suffixes of
    several lengths), and gives the probabilities the full projection gives."""
    # Without reuse, one position per row: two rows show it (each a full forward pass).
    requests = _requests() if reuse else _requests()[::6]
    assert backend._keeps_logits  # the embedded model takes ``logits_to_keep``
    backend.prefix_reuse = reuse
    try:
        kept = backend.choice_probs(requests)
        backend._keeps_logits = False
        full = backend.choice_probs(requests)
    finally:
        backend._keeps_logits = True
        backend.prefix_reuse = True
    for only_read, everywhere in zip(kept, full, strict=True):
        # float32 products of other shapes round differently: a few 1e-6 apart, never more.
        assert only_read.probs == pytest.approx(everywhere.probs, abs=1e-5)
    assert len({round(r.probs["Yes"], 6) for r in kept}) > 1


# The shared sleep rubric, on a prompt of its own (its text is what the judge is asked about).
SLEEP = rubric_spec(
    "t/sleep-batch", prompt={"external_id": "p-sleep", "text": "How can I sleep better?"}
)


def test_the_embedded_judges_rewards_do_not_depend_on_the_rollouts_gathered_with_them(
    backend,  # type: ignore[no-untyped-def]
    migrated_sqlite_template: Path,
    tmp_path: Path,
) -> None:
    """Gathering puts other callers' rollouts in a rollout's backend batch. With the embedded
    judge (criterion-prob, prefix reuse per rollout), each reward is exactly the one it gets
    judged alone, on a database of its own: what else a batch holds changes nothing."""
    kept = KeptView(backend, threading.RLock())  # one model for both runs: close keeps it
    texts = [
        "Go to bed at the same time every night.",
        "Avoid coffee after noon, keep the room dark and cool, put the phone away before bed.",
        "Sleep is important.",
        "Take melatonin every night without asking anyone.",
        "Exercise in the morning; a regular wake-up time anchors your body clock.",
    ]
    judge = BUILTIN_JUDGES["embedded"]

    def rewards(name: str, batches: list[list[str]]) -> list[float | None]:
        path = tmp_path / f"{name}.sqlite"
        shutil.copy(migrated_sqlite_template, path)
        engine = make_engine(f"sqlite:///{path}")
        with session_scope(engine) as session:
            approve(session, save_rubric(session, SLEEP).version)
        found: list[float | None] = []
        for batch in batches:
            with session_scope(engine) as session:
                requests = [RewardRequest(t, prompt_id="p-sleep") for t in batch]
                found += compute_rewards(
                    session, judge, requests, ScoreOptions(), lambda _: lambda: kept
                ).rewards
        engine.dispose()
        return found

    together = rewards("together", [texts])
    alone = rewards("alone", [[t] for t in texts])
    assert None not in together
    assert together == alone
    assert len(set(together)) == len(texts)  # the rewards tell the rollouts apart


class _Passes:
    """The model, recording each forward pass's rows and attended columns (its attention
    mask: the reused prefix's cache and the row's own tokens)."""

    def __init__(self, lm) -> None:  # type: ignore[no-untyped-def]
        self.lm = lm
        self.shapes: list[tuple[int, int]] = []

    def __call__(self, **kwargs):  # type: ignore[no-untyped-def]
        mask = kwargs.get("attention_mask")
        if mask is not None:
            self.shapes.append((int(mask.shape[0]), int(mask.shape[1])))
        return self.lm(**kwargs)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.lm, name)


def test_a_token_budget_counts_the_reused_prefix_in_every_row(backend) -> None:  # type: ignore[no-untyped-def]
    """Each row of a batch of suffixes holds a copy of the prefix's cache: with a budget of
    two rows' prefix and suffix, no pass holds more than that, where the batch size alone
    would put four rows in one."""
    from rubricsvc.backends.transformers import reused_prefix_length

    requests = [r for r in _requests() if r.group == "1"]
    sequences = [backend.encode(r.chat) for r in requests]
    prefix = reused_prefix_length(sequences)
    budget = 2 * max(len(s) for s in sequences)
    assert backend.batch_size == 4 and 4 * (max(len(s) for s in sequences) - prefix) < budget
    expected = backend.choice_probs(requests)
    passes = _Passes(backend.lm)
    backend.lm, backend.token_budget = passes, budget
    try:
        within = backend.choice_probs(requests)
    finally:
        backend.lm, backend.token_budget = passes.lm, None
    suffix_passes = [(rows, columns) for rows, columns in passes.shapes if columns > prefix]
    assert all(rows * columns <= budget for rows, columns in suffix_passes), passes.shapes
    assert len(suffix_passes) >= 3  # six requests, at most two rows a pass
    for bounded, unbounded in zip(within, expected, strict=True):
        assert bounded.probs["Yes"] == pytest.approx(unbounded.probs["Yes"], abs=1e-4)
