"""`rubricsvc judges evaluate` and `judges show`: a judge measured against a label set, through
the real command; every expected figure is the published one or recomputed from stored rows."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.judging.keys import pairwise_key
from rubricsvc.models import (
    Completion,
    JudgeConfig,
    JudgeEvaluation,
    Judgment,
    JudgmentStatus,
    Label,
    LabelSet,
    RubricVersion,
)
from rubricsvc.validation.metrics import majority
from tests.cli_runner import cli_error, cli_ok
from tests.helpers import read_database
from tests.tiny_model import add_tiny_judge

DATA = Path(__file__).resolve().parents[1] / "data"
PANDALM = DATA / "pandalm"
HEALTHBENCH_FILE = DATA / "healthbench_m42_sample" / "data" / "sample" / "judge_responses.jsonl"
PANDALM_FILES = ("testset-v1.json", "gpt-3.5-turbo-testset-v1.json", "pandalm-7b-testset-v1.json")


def _evaluate(database_url: str, *args: str) -> dict[str, Any]:
    result = cli_ok("judges", "evaluate", *args, "--json", database_url=database_url, timeout=900)
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _pandalm_slice(folder: Path, count: int) -> Path:
    """The first ``count`` records of the PandaLM files (the same records in each)."""
    folder.mkdir()
    for name in PANDALM_FILES:
        records = json.loads((PANDALM / name).read_text(encoding="utf-8"))[:count]
        (folder / name).write_text(json.dumps(records), encoding="utf-8")
    return folder


def _hashes(session: Session, judgment: Judgment) -> tuple[str, str]:
    shown = [session.get(Completion, judgment.completion_id)]
    assert judgment.other_completion_id is not None
    shown.append(session.get(Completion, judgment.other_completion_id))
    assert shown[0] is not None and shown[1] is not None
    return shown[0].content_hash, shown[1].content_hash


@pytest.mark.slow
def test_published_pandalm_verdicts_reproduce_exactly(database_url: str) -> None:
    """SOURCE.txt's figures: gpt-3.5-turbo 692 of 936 parseable (0.7393; 69.27% of 999),
    PandaLM-7B 667 of 999; stored against each judge and shown by `judges show`."""
    cli_ok("labels", "import", "pandalm", str(PANDALM), database_url=database_url)
    gpt = _evaluate(database_url, "--judge", "pandalm/gpt-3.5-turbo", "--labels", "pandalm-human")
    assert (gpt["n_labelled"], gpt["n_judged"], gpt["correct"]) == (999, 936, 692)
    assert round(gpt["agreement"], 4) == 0.7393
    assert round(gpt["agreement_all"], 4) == 0.6927
    assert gpt["coverage"] == pytest.approx(936 / 999)
    low, high = gpt["agreement_ci"]
    assert low < gpt["agreement"] < high
    panda = _evaluate(database_url, "--judge", "pandalm/pandalm-7b", "--labels", "pandalm-human")
    assert (panda["n_labelled"], panda["n_judged"], panda["correct"]) == (999, 999, 667)
    assert panda["agreement"] == pytest.approx(667 / 999)

    shown = json.loads(
        cli_ok(
            "judges", "show", "pandalm/gpt-3.5-turbo", "--json", database_url=database_url
        ).stdout
    )
    (evaluation,) = shown["evaluations"]
    assert evaluation["labels"] == "pandalm-human"
    assert evaluation["agreement"] == pytest.approx(692 / 936)

    def stored(session: Session) -> tuple[str, str, int]:
        row = session.scalars(select(JudgeEvaluation)).first()
        assert row is not None
        label_set = session.get(LabelSet, row.label_set_id)
        assert label_set is not None
        return row.label_set_hash, label_set.content_hash, row.n_judged

    label_hash, set_hash, judged = read_database(database_url, stored)
    assert label_hash == set_hash and evaluation["label_set_hash"] == set_hash
    assert judged == 936


@pytest.mark.slow
def test_the_bootstrap_resamples_prompts(sqlite_url: str) -> None:
    """Items of one prompt move together: the interval is wider than one over independent
    items would be, and the same seed gives the same interval."""
    cli_ok("labels", "import", "pandalm", str(PANDALM), database_url=sqlite_url)
    args = ("--judge", "pandalm/pandalm-7b", "--labels", "pandalm-human", "--resamples", "500")
    first, again = _evaluate(sqlite_url, *args), _evaluate(sqlite_url, *args)
    assert first["agreement_ci"] == again["agreement_ci"]
    assert first["interval"]["clusters"] == "prompts"
    # 999 items in 170 prompts: an item-level binomial interval would be about +-0.029.
    p, n = first["agreement"], first["n_judged"]
    binomial_half_width = 1.96 * math.sqrt(p * (1 - p) / n)
    low, high = first["agreement_ci"]
    assert (high - low) / 2 > binomial_half_width


@pytest.mark.model
@pytest.mark.slow
def test_a_model_judge_compares_pairs_in_both_orders(sqlite_url: str, tmp_path: Path) -> None:
    """Pairwise mode on labelled PandaLM pairs: both orders judged and stored; position
    consistency and agreement recomputed from the stored judgments. The judge is the tiny one
    of the embedded model's architecture (tests/tiny_model.py; its head gives the pairwise
    choices 1, 2 and 0 graded probabilities): the bookkeeping is under test, not its verdicts."""
    name = add_tiny_judge(sqlite_url, tmp_path)
    folder = _pandalm_slice(tmp_path / "pandalm", 8)
    cli_ok("labels", "import", "pandalm", str(folder), database_url=sqlite_url)
    report = _evaluate(
        sqlite_url, "--judge", name, "--mode", "pairwise", "--labels", "pandalm-human"
    )
    assert report["n_labelled"] == 8 and report["mode"] == "pairwise"

    def recompute(session: Session) -> tuple[int, int, int, int]:
        judge = session.scalars(
            select(JudgeConfig).where(JudgeConfig.name == f"{name}:pairwise")
        ).one()
        version = session.scalars(select(RubricVersion)).one()  # pandalm/general
        labels = list(session.scalars(select(Label)))
        items: dict[tuple[int, int], list[str]] = {}
        for label in labels:
            assert label.other_completion_id is not None
            items.setdefault((label.completion_id, label.other_completion_id), []).append(
                label.verdict or ""
            )

        def shown(one: Completion, other: Completion) -> Judgment:
            """The judgment of a pair (completions of one prompt) shown in this order."""
            key = pairwise_key(
                judge.config_hash,
                version.content_hash,
                one.prompt.content_hash,
                one.content_hash,
                other.content_hash,
            )
            return session.scalars(select(Judgment).where(Judgment.cache_key == key)).one()

        both = consistent = agree = 0
        for (a, b), votes in items.items():
            first, second = session.get(Completion, a), session.get(Completion, b)
            assert first is not None and second is not None
            forward, backward = shown(first, second), shown(second, first)
            # Stored with the completions shown, in order (the first record of that content).
            assert _hashes(session, forward) == (first.content_hash, second.content_hash)
            assert _hashes(session, backward) == (second.content_hash, first.content_hash)
            assert forward.status == backward.status == JudgmentStatus.OK
            both += 1
            mirrored = {"first": "second", "second": "first", "tie": "tie"}
            consistent += forward.verdict == mirrored[backward.verdict or ""]
            detail_f, detail_b = forward.detail or {}, backward.detail or {}
            combined = {
                "first": (detail_f["p_first"] + detail_b["p_second"]) / 2,
                "second": (detail_f["p_second"] + detail_b["p_first"]) / 2,
                "tie": (detail_f["p_tie"] + detail_b["p_tie"]) / 2,
            }
            verdict = max(combined, key=lambda k: combined[k])
            agree += verdict == majority(votes)
        judgments = session.scalar(
            select(func.count()).select_from(Judgment).where(Judgment.judge_config_id == judge.id)
        )
        return both, consistent, agree, judgments or 0

    both, consistent, agree, judgments = read_database(sqlite_url, recompute)
    assert report["n_judged"] == both == 8
    assert report["position"]["both_orders_judged"] == 8
    assert report["position"]["consistency"] == pytest.approx(consistent / 8)
    assert report["correct"] == agree
    assert judgments <= 16  # one judgment per distinct ordered pair, repeats shared

    again = _evaluate(
        sqlite_url, "--judge", name, "--mode", "pairwise", "--labels", "pandalm-human"
    )
    assert again["correct"] == report["correct"]
    assert read_database(sqlite_url, recompute)[3] == judgments  # all from the cache


def test_a_judge_of_the_wrong_kind_is_refused(sqlite_url: str, tmp_path: Path) -> None:
    folder = _pandalm_slice(tmp_path / "pandalm", 3)
    cli_ok("labels", "import", "pandalm", str(folder), database_url=sqlite_url)

    def refused(labels: str) -> str:
        """The error of evaluating the embedded judge in the group mode (it compares a
        prompt's completions all at once: neither a pair's verdict nor a score of each) on the
        label set ``labels``."""
        command = ("judges", "evaluate", "--judge", "embedded", "--mode", "group")
        return cli_error(*command, "--labels", labels, database_url=sqlite_url)

    error = refused("pandalm-human")
    assert "pass --mode pairwise" in error and len(error.splitlines()) == 1
    error = refused("no-such-set")
    assert "pandalm-human" in error  # the known sets are listed
