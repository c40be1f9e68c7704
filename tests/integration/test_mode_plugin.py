"""A verdict mode from outside the package: defined and registered in this file alone, then
used to score a rubric in this process and on a Celery worker that loads this file as a
plugin (``RUBRICSVC_PLUGINS``), with the same model judging both times: the tiny judge of the
embedded model's architecture (tests/tiny_model.py), since the mode's path is under test, not
what the model says.

The toy mode asks one question per completion, whether the response meets the whole rubric
(every criterion, no pitfall), and scores the probability of "Yes"; its scores are stored
under an aggregation of its own. Nothing in ``rubricsvc/`` knows its name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from sqlalchemy import select

from rubricsvc import db
from rubricsvc.backends.provider import BackendProvider
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation
from rubricsvc.config import Settings
from rubricsvc.hashing import content_hash
from rubricsvc.judging import modes
from rubricsvc.judging import verdicts as v
from rubricsvc.judging.aggregation import Status
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes.text import framed, probs_of
from rubricsvc.models import Score
from rubricsvc.neutral import judged
from rubricsvc.scoring.scorer import ScoreOptions, score
from rubricsvc.scoring.selection import Selection
from tests.tiny_model import tiny_judge_spec
from tests.workers_harness import (
    REPO,
    MakeCluster,
    load_examples,
    score_via_celery,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.model]

TOY = "toy-all-met"
PROMPT = "demo-sleep"  # three completions: three judgments per run


class AllMet:
    """One choice per completion: does the response meet the whole rubric?"""

    name = TOY
    template = "criterion_prob"  # a bundled template; the question is the mode's own
    aggregation: str | None = TOY
    decodes = False  # one forward pass
    options: frozenset[str] = frozenset()
    wording = "1"  # the text of its question, below
    compares = False
    gives_probability = False  # P(yes), but of the whole rubric met, not of one criterion
    per_criterion = False  # one judgment for the whole rubric
    judges_pairs = False

    def plan(self, case: modes.Case) -> modes.Plan:
        key = content_hash(
            [TOY, case.judge_hash, case.rubric_hash, case.prompt_hash, case.response_hash]
        )
        return modes.Plan([modes.Item(key, None, rubric=tuple(c.view for c in case.criteria))], {})

    def count(self, criteria: Sequence[modes.RubricCriterion]) -> int:
        return 1

    def calls(self, context: modes.CallContext, items: Sequence[modes.Item]) -> list[modes.Call]:
        (item,) = items
        completion = context.completion
        # Judged text goes through the one neutralizing step, as in the built-in modes.
        wanted = "\n".join(
            f"- {'must avoid' if c.weight < 0 else 'must'}: {judged(c.text)}" for c in item.rubric
        )
        question = (
            f"Does the response meet every point below?\n{wanted}\nAnswer with one word: Yes or No."
        )
        chat = context.template.render(**framed(completion), question=question)

        def parse(result: Generation | ChoiceResult) -> dict[str, v.Verdict]:
            return {item.key: v.binary_from_probs(probs_of(result))}

        request = ChoiceRequest(chat, v.YES_TOKENS + v.NO_TOKENS, group=str(completion.id))
        return [modes.Call(request, (item.key,), parse)]

    def assess(
        self,
        case: modes.Case,
        plan: modes.Plan,
        rulings: Mapping[str, modes.Ruling],
        options: modes.AssessOptions,
    ) -> modes.Assessment:
        ruling = rulings.get(plan.items[0].key)
        if ruling is None or ruling.value is None:
            assessment = modes.Assessment(None, 0.0, Status.MASKED, ["the judgment failed"])
            assessment.failures[(ruling and ruling.failure) or "infrastructure"] += 1
            return assessment
        return modes.Assessment(ruling.value, 1.0, Status.OK, [], verdicts=[ruling.value])


modes.register_mode(AllMet())


def toy_judge() -> JudgeSpec:
    # Validated anew (not model_copy): the mode decides the template a spec reads.
    return JudgeSpec.model_validate({**tiny_judge_spec("toy").model_dump(), "mode": TOY})


@pytest.fixture
def plugin_env() -> Iterator[dict[str, str]]:
    """What a worker needs to load this file as a plugin."""
    yield {"RUBRICSVC_PLUGINS": __name__, "PYTHONPATH": str(REPO)}


def test_the_toy_mode_is_registered_and_hashed_apart() -> None:
    assert TOY in modes.mode_names()
    toy, other = JudgeSpec(name="toy", mode=TOY), JudgeSpec(name="toy", mode="criterion-prob")
    assert toy.sampling() == {}  # decodes = False, as criterion-prob
    assert toy.config_hash() != other.config_hash()  # the mode's name is hashed


def _stored_scores(url: str) -> dict[int, tuple[str, float | None, str]]:
    engine = db.make_engine(url)
    try:
        with db.session_scope(engine) as session:
            rows = session.scalars(select(Score).order_by(Score.completion_id)).all()
            return {r.completion_id: (r.aggregation, r.value, r.status) for r in rows}
    finally:
        engine.dispose()


def test_a_plugin_mode_scores_in_process_and_on_a_celery_worker(
    make_cluster: MakeCluster, plugin_env: dict[str, str], tmp_path: Path
) -> None:
    # In this process: the mode registered above, through the library's own scoring.
    local = make_cluster("redis", **plugin_env)
    load_examples(local, (toy_judge(),))
    engine = db.make_engine(local.database_url)
    judge = toy_judge()
    with BackendProvider.from_settings(Settings()) as provider, db.session_scope(engine) as session:
        report = score(
            session,
            judge,
            Selection(prompt_external_ids=(PROMPT,)),
            ScoreOptions(),
            provider.factory(judge),
        )
    engine.dispose()
    assert (report.aggregation, report.judgments, report.computed, report.failed) == (
        TOY,
        3,
        3,
        0,
    )
    in_process = _stored_scores(local.database_url)
    assert len(in_process) == 3
    assert all(agg == TOY and status == "ok" for agg, _, status in in_process.values())
    values = [value for _, value, _ in in_process.values()]
    assert all(value is not None and 0.0 < value < 1.0 for value in values)
    assert len(set(values)) > 1  # the model read each response

    # On a worker that knows the mode only through RUBRICSVC_PLUGINS.
    remote = make_cluster("redis", **plugin_env)
    load_examples(remote, (toy_judge(),))
    remote.start_worker("toy").wait_ready(timeout=120)
    job = score_via_celery(remote, "--prompt", PROMPT, judge="toy").json()
    assert (job["judgments"], job["computed"], job["failed"]) == (3, 3, 0)
    on_worker = _stored_scores(remote.database_url)
    # Same data loaded in the same order: the same ids, and the same model's values.
    assert on_worker.keys() == in_process.keys()
    for completion_id, (aggregation, value, status) in on_worker.items():
        local_value = in_process[completion_id][1]
        assert (aggregation, status) == (TOY, "ok")
        assert value == pytest.approx(local_value, abs=1e-6)


def test_a_worker_without_the_plugin_refuses_the_mode_by_name(
    make_cluster: MakeCluster,
) -> None:
    cluster = make_cluster("redis", RUBRICSVC_PLUGINS=__name__, PYTHONPATH=str(REPO))
    load_examples(cluster, (toy_judge(),))
    bare = make_cluster("redis", database_url=cluster.database_url)
    result = bare.cli("score", "--judge", "toy", "--via", "inprocess", "--json")
    assert result.code != 0
    assert f"unknown verdict mode {TOY!r}" in result.stderr
    assert "criterion-prob" in result.stderr  # the error lists the known modes
