"""Trajectory criteria and checks: what the judge is shown, the real model's verdicts, masking,
and criterion hashes that do not move for criteria on the response."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from rubricsvc.backends.types import ChoiceRequest
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec
from rubricsvc.judging.modes import (
    CallContext,
    Case,
    CompletionView,
    CriterionView,
    RubricCriterion,
    get_mode,
)
from rubricsvc.judging.modes.assess import NO_TRAJECTORY, assess_criteria
from rubricsvc.judging.modes.base import AssessOptions
from rubricsvc.judging.readers.checks import run_trajectory_check
from rubricsvc.rubrics import versions as rubrics
from rubricsvc.rubrics.schemas import CriterionSpec, RubricSpec
from tests.requirements import require_module

PROMPT = [{"role": "user", "content": "What is the population of Lyon? Look it up."}]
ANSWER = "Lyon has about 520,000 inhabitants."
SEARCHED = (
    {
        "role": "assistant",
        "content": "I will search for it.",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "web_search", "arguments": '{"query": "Lyon population"}'},
            }
        ],
    },
    {"role": "tool", "content": "Lyon: population 522,250 (2021 census), INSEE."},
    {"role": "assistant", "content": ANSWER},
)
DID_NOT_SEARCH = ({"role": "assistant", "content": ANSWER},)
LOOPED = (
    *tuple(
        m
        for _ in range(3)
        for m in (SEARCHED[0], {"role": "tool", "content": "Error: rate limited"})
    ),
    {"role": "assistant", "content": ANSWER},
)

SEARCH_CRITERION = CriterionView(
    1,
    "The assistant called the web_search tool before answering",
    None,
    1.0,
    {"type": "binary"},
    target="trajectory",
)


def _case(trajectory: tuple[dict[str, object], ...] | None, *criteria: RubricCriterion) -> Case:
    completion = CompletionView(1, PROMPT, ANSWER, response_hash="r", trajectory=trajectory)
    return Case(
        completion, criteria, "judge", "rubric", "prompt", "r", spec=BUILTIN_JUDGES["embedded"]
    )


def test_the_loop_and_ignored_error_checks_fail_a_looping_trajectory() -> None:
    loop = RubricCriterion(
        1,
        0,
        CriterionView(1, "no loop", None, 1.0, {"type": "binary"}),
        "c1",
        check={"type": "tool_loop", "min_repeats": 3},
    )
    errors = RubricCriterion(
        2,
        1,
        CriterionView(2, "no ignored error", None, 1.0, {"type": "binary"}),
        "c2",
        check={"type": "tool_errors_ignored"},
    )
    mode = get_mode("criterion-prob")
    for trajectory, verdicts in ((LOOPED, ["fail", "fail"]), (SEARCHED, ["pass", "pass"])):
        case = _case(trajectory, loop, errors)
        assessment = assess_criteria(case, mode.plan(case), {}, AssessOptions())
        assert [c["verdict"] for c in assessment.criteria] == verdicts
    case = _case(LOOPED, loop, errors)
    assert assess_criteria(case, mode.plan(case), {}, AssessOptions()).value == 0.0


@pytest.mark.parametrize("mode", ["criterion-prob", "criterion-text", "multi-criterion"])
def test_a_trajectory_criterion_is_shown_the_rendered_trajectory_and_keyed_on_it(mode: str) -> None:
    impl = get_mode(mode)
    spec = JudgeSpec(name="j", backend="scripted", mode=mode)
    on_response = CriterionView(2, "States a number", None, 1.0, {"type": "binary"})
    criteria = (
        RubricCriterion(1, 0, SEARCH_CRITERION, "t1"),
        RubricCriterion(2, 1, on_response, "r2"),
    )
    case = _case(SEARCHED, *criteria)
    plan = impl.plan(case)
    calls = impl.calls(CallContext(spec, spec.prompt_template(), case.completion), plan.items)
    users = [call.request.chat[-1]["content"] for call in calls]
    shown = [u for u in users if "<trajectory>" in u]
    assert len(shown) == 1 and len(users) == 2  # the response criterion is asked without it
    assert '[tool call] web_search({"query":"Lyon population"})' in shown[0]
    assert "[tool result] Lyon: population 522,250" in shown[0]
    other = _case(DID_NOT_SEARCH, *criteria)
    other_plan = impl.plan(other)
    assert other_plan.key_of[1] != plan.key_of[1]  # the trajectory is part of its key
    assert other_plan.key_of[2] == plan.key_of[2]  # the response criterion's is not


def test_a_completion_without_a_trajectory_is_masked_on_a_trajectory_criterion() -> None:
    impl = get_mode("criterion-prob")
    case = _case(None, RubricCriterion(1, 0, SEARCH_CRITERION, "t1"))
    plan = impl.plan(case)
    assert plan.items == []
    assessment = assess_criteria(case, plan, {}, AssessOptions())
    (entry,) = assessment.criteria
    assert entry["status"] == "failed" and entry["value"] is None
    assert entry["error"] == NO_TRAJECTORY and entry["failure"] == "infrastructure"
    assert assessment.value is None  # masked, never 0


@pytest.mark.model
def test_the_real_model_judges_the_rendered_trajectory() -> None:
    require_module("transformers", "transformers")
    from rubricsvc.backends.transformers import TransformersBackend

    spec = BUILTIN_JUDGES["embedded"]
    impl = get_mode("criterion-prob")
    requests = []
    for trajectory in (SEARCHED, DID_NOT_SEARCH):
        case = _case(trajectory, RubricCriterion(1, 0, SEARCH_CRITERION, "t1"))
        (call,) = impl.calls(
            CallContext(spec, spec.prompt_template(), case.completion), impl.plan(case).items
        )
        assert isinstance(call.request, ChoiceRequest)
        requests.append(call.request)
    assert "web_search" in requests[0].chat[-1]["content"]
    assert "[tool call]" not in requests[1].chat[-1]["content"]
    backend = TransformersBackend(batch_size=2)
    try:
        searched, skipped = backend.choice_probs(requests)
    finally:
        backend.close()
    yes = [sum(p for c, p in r.probs.items() if c.lower() == "yes") for r in (searched, skipped)]
    total = [sum(r.probs.values()) for r in (searched, skipped)]
    print(f"P(yes): searched {yes[0]:.4f}, did not search {yes[1]:.4f} (of {total})")
    # The verdicts come from the model: probabilities, not a scripted 0 or 1, and they differ
    # because what the model was shown differs.
    assert all(0.0 < y < 1.0 for y in yes)
    assert yes[0] != pytest.approx(yes[1], abs=1e-6)


def test_the_hash_moves_only_for_trajectory_criteria(session: Session) -> None:
    old = {"text": "Is kind", "explanation": None, "scale": {"type": "binary"}, "check": None}
    response = CriterionSpec(text="Is kind", weight=1.0)
    assert content_hash(response.judged_content()) == content_hash(old)
    assert "target" not in response.stored()
    on_trajectory = CriterionSpec(text="Is kind", weight=1.0, target="trajectory")
    assert content_hash(on_trajectory.judged_content()) != content_hash(old)
    spec = RubricSpec(
        name="t/traj",
        criteria=[response, on_trajectory.model_copy(update={"text": "Searched first"})],
    )
    version = rubrics.save_rubric(session, spec).version
    assert [c.target for c in version.criteria] == ["response", "trajectory"]
    again = rubrics.spec_of(version)
    assert [c.target.value for c in again.criteria] == ["response", "trajectory"]
    assert again.content_hash() == spec.content_hash()
    with pytest.raises(ValueError, match="target: trajectory is for judged criteria"):
        CriterionSpec(
            text="x", weight=1.0, kind="check", check={"type": "tool_loop"}, target="trajectory"
        )


def test_trl_tool_calling_rollouts_give_their_trajectory() -> None:
    from trainer.rewards import completion_text, completion_trajectory

    # As TRL 1.16's GRPOTrainer builds them: dict arguments, failed tools as str({"error": ...}).
    failed = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "search", "arguments": {"q": "x"}}}
            ],
        },
        {"role": "tool", "name": "search", "content": str({"error": "Tool search timed out"})},
        {"role": "assistant", "content": "It is 4."},
    ]
    looping = failed[:2] * 3 + [{"role": "assistant", "content": "The search failed."}]
    assert completion_text(failed) == "It is 4."
    assert completion_trajectory("plain text") is None
    checks = [{"type": "tool_loop"}, {"type": "tool_errors_ignored"}]
    results = {}
    for name, rollout in (("failed", failed), ("looping", looping)):
        trajectory = completion_trajectory(rollout)
        assert trajectory is not None
        results[name] = [run_trajectory_check(check, trajectory) for check in checks]
    assert results == {"failed": [True, False], "looping": [False, True]}
