"""The over-optimization lab's pool generator (``trainer/overopt_pool.py``) in real evolution
steps, with numbers a reader can check by hand.

The generator reads the real pool and task files (examples/overopt/). A table judge gives each
criterion a yes (1) or no (0) per rollout of a group of 4, so each spread is sqrt(p(1 - p))
for a share p of yeses: 2 of 4: 0.5; 1 of 4 (or 3 of 4): sqrt(3/16) = 0.433; 0 or 4 of 4: 0.
The pool proposes; the step's judging and pruning decide what stays.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.backends import create_backend, find_backend
from rubricsvc.backends.base import BackendError
from rubricsvc.backends.types import Generation
from rubricsvc.evolution.proposals import ShownRollout, evolution_chat, evolution_request
from rubricsvc.evolution.settings import EvolutionSettings
from rubricsvc.evolution.step import GroupRollout, StepReport, evolve_group
from rubricsvc.models import EvolutionTrack, Origin, RubricVersion
from rubricsvc.rubrics.generator import GeneratorSpec
from rubricsvc.rubrics.schemas import CriterionSpec
from rubricsvc.rubrics.versions import save_rubric
from tests.helpers import rubric_spec
from trainer.overopt_pool import BACKEND_NAME, PoolGenerator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "overopt"
POOL = str(EXAMPLES / "evolving_pool.yaml")
TASKS = str(EXAMPLES / "tasks.yaml")
SLEEP = "How can I sleep better? Give me short, practical advice."
PROXY = [
    {"text": "Recommends going to bed and getting up at the same time every day", "weight": 3},
    {"text": "Recommends keeping screens out of the last hour before bed", "weight": 2},
]
ROLLOUTS = ["A", "B", "C", "D"]
# Each pool criterion's verdict on A, B, C, D (1: met): the first three are overopt-sleep's
# own pool, the next three the first of the shared ones (the order of evolving_pool.yaml).
VERDICTS = {
    "Suggests a dark, quiet and cool bedroom": [1, 1, 0, 0],  # 0.5
    "Mentions limiting caffeine later in the day": [1, 0, 0, 0],  # 0.433
    "Gives advice about something other than sleep": [0, 0, 0, 0],  # 0
    "Answers the question that was asked rather than a different one": [1, 1, 1, 1],  # 0
    "Stops mid-sentence or mid-list": [0, 0, 1, 1],  # 0.5
    "Repeats the same sentence or point": [0, 0, 0, 1],  # 0.433
}
# DR Tulu's +1 / -1: the lab's arm weighs the categories the pool maps to 1 and -1.
UNIT_WEIGHTS = {"essential": 1, "important": 1, "optional": 1, "pitfall": -1}


class TableJudge:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(
        self,
        messages: Sequence[dict[str, Any]],
        criteria: Sequence[CriterionSpec],
        responses: Sequence[str],
    ) -> list[list[float | None]]:
        self.asked += [c.text for c in criteria]
        return [[float(v) for v in VERDICTS[c.text]] for c in criteria]


def _settings(max_active: int = 2) -> EvolutionSettings:
    generator = GeneratorSpec(
        backend=BACKEND_NAME,
        template="rubric_evolution",
        retries=0,
        category_weights=UNIT_WEIGHTS,
        backend_options={"pool": POOL, "tasks": TASKS},
    )
    return EvolutionSettings(generator=generator, max_new=3, max_active=max_active)


def _step(session: Session, step: int, backend: PoolGenerator, judge: TableJudge) -> StepReport:
    persistent = save_rubric(
        session,
        rubric_spec(
            "overopt-sleep/proxy",
            prompt={"text": SLEEP, "external_id": "overopt-sleep"},
            criteria=PROXY,
        ),
    ).version
    assert persistent.rubric.prompt is not None
    return evolve_group(
        session,
        run="pool-run",
        prompt=persistent.rubric.prompt,
        persistent=persistent,
        group=[GroupRollout(text, 1.0 - i / 4) for i, text in enumerate(ROLLOUTS)],
        step=step,
        settings=_settings(),
        generator=lambda: backend,
        judge=judge,
    )


def test_the_pool_proposes_max_new_untried_criteria_and_the_step_keeps_the_separating_ones(
    session: Session,
) -> None:
    """Step 0: the pool offers overopt-sleep's own three; "other than sleep" (0 of 4) goes
    inactive, the bedroom (0.5) and caffeine (0.433) stay. Step 1: it offers the first three
    shared ones, not the three it tried; of the five candidates max_active 2 keeps the two at
    0.5 (the bedroom, and the new pitfall "Stops mid-sentence"), so caffeine is pruned."""
    backend = PoolGenerator(pool=POOL, tasks=TASKS)
    judge = TableJudge()

    first = _step(session, 0, backend, judge)
    assert judge.asked == list(VERDICTS)[:3]
    assert first.added == [
        "Suggests a dark, quiet and cool bedroom",
        "Mentions limiting caffeine later in the day",
    ]
    assert first.born_inactive == ["Gives advice about something other than sleep"]
    assert first.spreads["Mentions limiting caffeine later in the day"] == pytest.approx(
        0.433, abs=1e-3
    )

    second = _step(session, 1, backend, judge)
    # The two active ones are judged again (the group carries no verdicts for them), then the
    # three new ones.
    assert judge.asked[3:] == [
        "Suggests a dark, quiet and cool bedroom",
        "Mentions limiting caffeine later in the day",
        *list(VERDICTS)[3:],
    ]
    assert second.refused == []
    assert second.added == ["Stops mid-sentence or mid-list"]
    assert second.pruned == ["Mentions limiting caffeine later in the day"]
    assert second.born_inactive == [
        "Answers the question that was asked rather than a different one",
        "Repeats the same sentence or point",
    ]
    # A process started again forgets what its backend proposed: a fresh one offers the
    # three tried and inactive (not current) criteria again, and the step refuses them all.
    restarted = _step(session, 2, PoolGenerator(pool=POOL, tasks=TASKS), judge)
    assert [(r.text, r.reason) for r in restarted.refused] == [
        ("Mentions limiting caffeine later in the day", "duplicate"),
        ("Gives advice about something other than sleep", "duplicate"),
        ("Answers the question that was asked rather than a different one", "duplicate"),
    ]
    assert restarted.added == [] and restarted.pruned == []
    track = session.scalars(select(EvolutionTrack)).one()
    version = session.get(RubricVersion, track.current_version_id)
    assert version is not None and version.origin == Origin.EVOLVED
    assert [(c.text, c.weight) for c in version.criteria] == [
        (PROXY[0]["text"], 3),
        (PROXY[1]["text"], 2),
        ("Suggests a dark, quiet and cool bedroom", 1),  # +1 in the pool
        ("Stops mid-sentence or mid-list", -1),  # -1 in the pool: a pitfall
    ]


def _ask(backend: PoolGenerator, current: list[str], max_new: int = 3) -> Generation | BackendError:
    spec = _settings().generator
    chat = evolution_chat(
        spec,
        [{"role": "user", "content": SLEEP}],
        [CriterionSpec(text=t, weight=1) for t in current],
        [ShownRollout("an answer", 0.5), ShownRollout("another", 0.2)],
        max_new,
    )
    (answer,) = backend.generate([evolution_request(spec, chat, max_new, 0)])
    return answer


def _texts(answer: Generation | BackendError) -> list[str]:
    assert isinstance(answer, Generation)
    return [c["text"] for c in json.loads(answer.text)["criteria"]]


def test_the_pool_skips_current_criteria_and_runs_out() -> None:
    """9 criteria for overopt-sleep (3 of its own, 6 shared): one is current, so 8 are offered,
    3 + 3 + 2 over three requests, then none."""
    backend = PoolGenerator(pool=POOL, tasks=TASKS)
    current = ["Suggests a dark, quiet and cool bedroom"]
    answers = [_texts(_ask(backend, current)) for _ in range(4)]
    assert [len(a) for a in answers] == [3, 3, 2, 0]
    assert answers[0][0] == "Mentions limiting caffeine later in the day"
    assert "Suggests a dark, quiet and cool bedroom" not in [t for a in answers for t in a]
    assert answers[2] == [
        "Includes program code where the question is not about programming",
        "Opens with filler such as 'Here are some tips' before any content",
    ]
    # max_new comes from the request's schema.
    fresh = PoolGenerator(pool=POOL, tasks=TASKS)
    assert len(_texts(_ask(fresh, [], max_new=1))) == 1


def test_a_prompt_outside_the_task_file_is_a_generator_failure() -> None:
    backend = PoolGenerator(pool=POOL, tasks=TASKS)
    spec = _settings().generator
    chat = evolution_chat(
        spec, [{"role": "user", "content": "Tell me a joke."}], [], [ShownRollout("x", 1.0)], 3
    )
    (answer,) = backend.generate([evolution_request(spec, chat, 3, 0)])
    assert isinstance(answer, BackendError) and not answer.retryable
    assert "not one of the task file's" in str(answer)


def test_the_plugin_registers_the_backend_by_name() -> None:
    registered = find_backend(BACKEND_NAME)
    assert registered is not None
    backend = create_backend(BACKEND_NAME, pool=POOL, tasks=TASKS)
    assert isinstance(backend, PoolGenerator)
