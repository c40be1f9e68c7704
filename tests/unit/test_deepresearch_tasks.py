"""The deep-research task set: every gold check holds to the hand-written answers and finds its
fact in the question's documents, every question needs two or more corpus documents, no
training question pairs a held-out question's documents, and rubrics.yaml and train.yaml are
in step with tasks.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rubricsvc.judging.readers.checks import run_check
from trainer.deepresearch_tasks import cited_pattern, load_tasks, plain, rubrics_document
from trainer.overopt import Split

EXAMPLE = Path(__file__).parents[2] / "examples" / "deepresearch"


def _tasks():  # type: ignore[no-untyped-def]
    return load_tasks(EXAMPLE / "tasks.yaml", EXAMPLE / "corpus.jsonl")


def test_every_check_decides_the_hand_written_answers_as_written() -> None:
    tasks, ids = _tasks()
    assert 40 <= len(tasks.tasks) <= 80
    for task in tasks.tasks:
        assert len(task.answers) >= 2, task.id
        for answer in task.answers:
            assert task.gold_verdicts(answer.text, ids) == answer.met, (task.id, answer.text)
        # A good answer and a bad one: the first meets everything, the second misses a fact.
        assert all(task.answers[0].met) and not all(task.answers[1].met[: len(task.facts)])


def test_each_question_needs_two_documents_and_the_split_holds_questions_out() -> None:
    tasks, _ = _tasks()
    assert all(len(set(t.documents)) >= 2 for t in tasks.tasks)
    train, held_out = tasks.split(Split.TRAIN), tasks.split(Split.HELD_OUT)
    assert len(train) >= 42 and len(held_out) >= 5
    # A held-out question asks about documents no training question pairs the same way.
    held_out_pairs = {frozenset(t.documents) for t in held_out}
    assert not [t.id for t in train if frozenset(t.documents) in held_out_pairs]


def test_every_fact_is_in_one_of_its_questions_documents() -> None:
    tasks, _ = _tasks()
    texts = {}
    for line in (EXAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        document = json.loads(line)
        texts[document["title"]] = plain(document["text"])
    for task in tasks.tasks:
        for fact in task.facts:
            check = fact.gold.model_dump(mode="json")
            assert any(run_check(check, texts[title]) for title in task.documents), fact.text


def test_a_citation_check_finds_the_id_in_any_marker_and_nowhere_else() -> None:
    check = {"type": "regex", "pattern": cited_pattern("17")}
    for cited in ("x [17].", "x [3, 17].", "x [17,24]", "x [1, 17, 24]"):
        assert run_check(check, cited), cited
    for other in ("x [170].", "x [117]", "x 17.", "x [1, 7]"):
        assert not run_check(check, other), other


def test_rubrics_yaml_is_written_from_the_tasks() -> None:
    tasks, ids = _tasks()
    written = yaml.safe_load((EXAMPLE / "rubrics.yaml").read_text(encoding="utf-8"))
    assert written == rubrics_document(tasks, ids)
    names = {r["name"] for r in written["rubrics"]}
    assert {"dr-loop-exits/proxy", "dr-loop-exits/citations", "dr-loop-exits/gold"} <= names


def test_train_yaml_trains_on_every_training_question_and_no_held_out_one() -> None:
    tasks, _ = _tasks()
    config = yaml.safe_load((EXAMPLE / "train.yaml").read_text(encoding="utf-8"))
    assert config["prompts"] == [t.id for t in tasks.split(Split.TRAIN)]
