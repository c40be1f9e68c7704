"""``rubricsvc labels build``: a criterion-level training set with contrast, labelled by each
prompt's checks rubric (and perturbed copies of the stored completions), split by prompt,
balanced per criterion, stored as a label set that ``judges distill --labels`` reads. No model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.distill.examples import label_targets, split_by_prompt
from rubricsvc.judging.readers.checks import run_check
from rubricsvc.models import Completion, Criterion, Label, LabelSet, Prompt
from rubricsvc.validation.labelsets import get_label_set
from tests.cli_runner import cli_error, cli_ok
from tests.helpers import approve_rubrics, check_criterion, read_database, table_counts

PROMPTS = ("sea-1", "sea-2", "sea-3", "sea-4", "sea-5")
ANSWERS = (
    "The sea is calm this morning. Its colour is a deep blue.",
    "Waves crash on the grey rocks. The sea is loud and cold today.",
    "The sea is blue. Gulls circle above it and the wind is soft.",
)
CHECKS = {
    "Uses the word blue": {"type": "contains", "text": "blue"},
    "Stays under 13 words": {"type": "word_count", "max": 12},
    "Never mentions zebras": {"type": "not_contains", "text": "zebra"},  # met by every text
}


def _rubrics(external_id: str) -> list[dict[str, Any]]:
    prompt = {
        "external_id": external_id,
        "text": f"Write two sentences about the sea ({external_id}).",
    }
    gold = [check_criterion(text, check) for text, check in CHECKS.items()]
    gold.append({"text": "Sounds like poetry", "weight": 1})  # judged: no check to label it
    proxy = [{"text": text, "weight": 1} for text in CHECKS]
    return [
        {"name": f"{external_id}/gold", "prompt": prompt, "criteria": gold},
        {"name": f"{external_id}/proxy", "prompt": prompt, "criteria": proxy},
    ]


@pytest.fixture
def store(sqlite_url: str, tmp_path: Path) -> str:
    """Five prompts, each with a gold rubric of checks, a judged proxy rubric of the same
    texts, and three stored completions."""
    approve_rubrics(sqlite_url, *[r for p in PROMPTS for r in _rubrics(p)])
    records = [
        # Each prompt's own texts (tagged with its id), so a leak across the split would show.
        {"prompt_external_id": p, "text": f"({p}) {text}", "external_id": f"{p}/{n}"}
        for p in PROMPTS
        for n, text in enumerate(ANSWERS)
    ]
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    cli_ok("completions", "add", str(path), database_url=sqlite_url)
    return sqlite_url


def _build(url: str, name: str, *options: str) -> dict[str, Any]:
    return cli_ok("labels", "build", name, *options, "--json", database_url=url).json()  # type: ignore[no-any-return]


def _stored(url: str, name: str) -> list[tuple[Label, Completion, Criterion, Prompt]]:
    def read(session: Session) -> list[tuple[Label, Completion, Criterion, Prompt]]:
        query = (
            select(Label, Completion, Criterion, Prompt)
            .join(LabelSet, LabelSet.id == Label.label_set_id)
            .join(Completion, Completion.id == Label.completion_id)
            .join(Criterion, Criterion.id == Label.criterion_id)
            .join(Prompt, Prompt.id == Label.prompt_id)
            .where(LabelSet.name == name)
        )
        rows = [tuple(row) for row in session.execute(query)]
        session.expunge_all()
        return rows  # type: ignore[return-value]

    return read_database(url, read)  # type: ignore[no-any-return]


def test_contrast_is_reported_and_training_labels_are_balanced(store: str) -> None:
    report = _build(
        store,
        "sea-genrm",
        "--labeller",
        "checks:{prompt_id}/gold",
        "--perturb",
        "truncate,pad",
        "--max-ratio",
        "1",
    )
    assert report["completions"]["original"] == 15
    assert report["completions"]["perturbed"]["truncate"] > 0
    assert report["completions"]["perturbed"]["pad"] > 0
    # The judged criterion of each gold rubric has no check: left out, and said so.
    assert report["criteria_left_out"] == {"without a check": 5}

    rows = {(row["prompt"], row["text"]): row for row in report["criteria"]}
    assert len(rows) == 15  # three check criteria on each of five prompts
    for (prompt, text), row in rows.items():
        before, after = row["train_before"], row["train_after"]
        if prompt in report["prompts"]["train"]:
            assert after["yes"] <= before["yes"] and after["no"] <= before["no"]
            assert max(after["yes"], after["no"]) <= min(after["yes"], after["no"])  # ratio 1
        if text == "Never mentions zebras":  # every text meets it: no contrast, flagged
            assert row["one_valued"] and not row["contrast"]
            assert after == {"yes": 0, "no": 0}
        else:
            assert row["contrast"] and not row["one_valued"]
    assert report["contrast_share"] == pytest.approx(10 / 15, abs=1e-4)
    assert len(report["one_valued"]) == 5

    # The stored labels are the report's: the balanced training side and the whole test side.
    stored = _stored(store, "sea-genrm")
    sides = {"train": 0, "test": 0}
    for label, _, _, _ in stored:
        sides[label.tags[0]] += 1
    assert sides == {"train": report["labels"]["train"], "test": report["labels"]["test"]}
    content_hash = read_database(store, lambda s: get_label_set(s, "sea-genrm").content_hash)
    assert report["data_hash"] == content_hash


def test_the_split_leaks_no_held_out_prompt(store: str) -> None:
    report = _build(
        store,
        "sea-split",
        "--labeller",
        "checks:{prompt_id}/gold",
        "--perturb",
        "truncate,drop_sentence,copy_prompt",
        "--test-share",
        "0.4",
        "--seed",
        "3",
    )
    train, test = set(report["prompts"]["train"]), set(report["prompts"]["test"])
    assert len(test) == 2 and len(train) == 3 and not train & test

    stored = _stored(store, "sea-split")
    origins = read_database(
        store, lambda s: {c.id: c.prompt.external_id for c in s.scalars(select(Completion))}
    )
    completions: dict[str, set[int]] = {"train": set(), "test": set()}
    perturbed_seen = 0
    for label, completion, _, prompt in stored:
        side = test if label.tags == ["test"] else train
        assert prompt.external_id in side
        completions[label.tags[0]].add(completion.id)
        if completion.source and completion.source.startswith("genrm-perturb:"):
            perturbed_seen += 1
            # A copy is on its original's side: no held-out text is trained on in any form.
            assert origins[completion.meta["perturbed_from"]] in side
    assert not completions["train"] & completions["test"]
    assert perturbed_seen


def test_perturbed_copies_are_labelled_by_the_checks(store: str) -> None:
    report = _build(
        store, "sea-cut", "--labeller", "checks:{prompt_id}/gold", "--perturb", "truncate"
    )
    stored = _stored(store, "sea-cut")
    assert stored
    cut_blue = 0
    for label, completion, criterion, _ in stored:
        assert criterion.check is not None
        assert label.value == (1.0 if run_check(criterion.check, completion.text) else 0.0)
        assert label.labeller == "checks:{prompt_id}/gold"
        if completion.source == "genrm-perturb:truncate" and criterion.text == "Uses the word blue":
            origin_id = completion.meta["perturbed_from"]
            origin = read_database(store, lambda s, at=origin_id: s.get(Completion, at))
            # Cut before "blue": the copy misses what its original met.
            if "blue" in origin.text and label.value == 0.0:
                cut_blue += 1
            assert completion.meta["perturbation"] == "truncate"
            assert origin.text.startswith(completion.text)
    assert cut_blue > 0
    assert report["completions"]["perturbed"]["truncate"] == 15


def test_onto_labels_the_judged_criteria_distill_learns(store: str) -> None:
    report = _build(
        store,
        "sea-onto",
        "--labeller",
        "checks:{prompt_id}/gold",
        "--onto",
        "{prompt_id}/proxy",
        "--perturb",
        "truncate,pad",
        "--max-ratio",
        "3",
    )
    stored = _stored(store, "sea-onto")
    assert {criterion.kind.value for _, _, criterion, _ in stored} == {"judge"}
    assert all(c.version.rubric.name.endswith("/proxy") for c in _criteria(store, stored))
    distill = report["distill"]
    assert distill["learnable_labels"] == len(stored) and distill["same_split"]
    assert distill["command"] == "rubricsvc judges distill --labels sea-onto --split prompt:0.7"

    def split(session: Session) -> list[str]:
        targets, _ = label_targets(session, get_label_set(session, "sea-onto"))
        held = split_by_prompt(targets, 0.7, seed=0).test_prompts
        return [str(session.get(Prompt, p).external_id) for p in held]  # type: ignore[union-attr]

    # Distillation's own split of the stored labels holds out the build's test prompts.
    assert sorted(read_database(store, split)) == sorted(report["prompts"]["test"])


def _criteria(url: str, stored: list[tuple[Label, Completion, Criterion, Prompt]]) -> list[Any]:
    ids = {criterion.id for _, _, criterion, _ in stored}

    def read(session: Session) -> list[Any]:
        rows = list(session.scalars(select(Criterion).where(Criterion.id.in_(ids))))
        for row in rows:
            _ = row.version.rubric.name
        session.expunge_all()
        return rows

    return read_database(url, read)  # type: ignore[no-any-return]


def test_a_label_set_labeller_keeps_its_labels_and_refuses_perturbations(store: str) -> None:
    _build(store, "sea-all", "--labeller", "checks:{prompt_id}/gold")
    before = table_counts(store, [Completion, LabelSet, Label])
    error = cli_error(
        "labels",
        "build",
        "sea-again",
        "--labeller",
        "sea-all",
        "--perturb",
        "pad",
        database_url=store,
    )
    assert "perturbed copies would have no labels" in error and len(error.splitlines()) == 1
    assert table_counts(store, [Completion, LabelSet, Label]) == before

    report = _build(store, "sea-subset", "--labeller", "sea-all", "--prompts", "sea-1,sea-2,sea-3")
    assert sorted(report["prompts"]["train"] + report["prompts"]["test"]) == [
        "sea-1",
        "sea-2",
        "sea-3",
    ]
    original = {
        (c.id, k.id): label.value
        for label, c, k, p in _stored(store, "sea-all")
        if p.external_id in {"sea-1", "sea-2", "sea-3"}
    }
    copied = {(c.id, k.id): label.value for label, c, k, _ in _stored(store, "sea-subset")}
    # Balancing drops some training labels; every label kept is the source set's.
    assert copied and all(original[key] == value for key, value in copied.items())
    assert report["labels"]["test"] + report["labels"]["train"] == len(copied)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--prompts", "sea-1,nowhere"), "no prompt with external id 'nowhere'"),
        (("--labeller", "checks:{prompt_id}/silver"), "matches no rubric of any stored prompt"),
        (
            ("--prompts", "sea-1,sea-2", "--onto", "{prompt_id}/none"),
            "--onto '{prompt_id}/none' matches no rubric of prompt sea-1",
        ),
        (("--perturb", "truncate,shuffle"), "unknown perturbation(s) shuffle"),
        (("--perturb", "insert_pitfall"), "give --pitfall TEXT"),
        (("--labeller", "no-such-set"), "no label set named 'no-such-set'"),
        # Fails only after the copies are made: one prompt cannot be split.
        (("--prompts", "sea-1", "--perturb", "pad"), "cannot split the labels by prompt"),
        (("--name-taken",), "already exists"),
    ],
)
def test_a_failed_build_stores_nothing(store: str, options: tuple[str, ...], message: str) -> None:
    _build(store, "taken", "--labeller", "checks:{prompt_id}/gold")
    before = table_counts(store, [Completion, LabelSet, Label])
    name = "taken" if options == ("--name-taken",) else "new-set"
    arguments = [] if options == ("--name-taken",) else list(options)
    if "--labeller" not in arguments:
        arguments += ["--labeller", "checks:{prompt_id}/gold"]
    error = cli_error("labels", "build", name, *arguments, database_url=store)
    assert message in error and len(error.splitlines()) == 1, error
    assert table_counts(store, [Completion, LabelSet, Label]) == before
