"""What every door of evolution (the trainer's ``reward.evolution``, the reward API's groups)
reads the same way: which version a request is judged under, a batch's prompt groups, and a
judged group as the evolution step takes it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy.orm import Session

from rubricsvc.evolution.step import GroupRollout
from rubricsvc.evolution.store import find_track
from rubricsvc.judging.failures import FailureClass
from rubricsvc.models import EvolutionTrack, Prompt, RubricVersion
from rubricsvc.rubrics.repository import resolve_version
from rubricsvc.scoring.rewards import RewardRequest, RewardResult, find_prompts


def routed_to_current(
    session: Session, run: str, requests: Sequence[RewardRequest]
) -> list[RewardRequest]:
    """Each request aimed at the version its prompt's track in ``run`` holds now; a prompt
    with no track yet keeps its request's rubric (the persistent version is resolved then)."""
    prompts = find_prompts(session, requests)
    current: dict[int, str | None] = {}
    for prompt in prompts:
        if prompt.id not in current:
            track = find_track(session, run, prompt.id)
            current[prompt.id] = None if track is None else track.current_version.ref
    # Marked evolved: the version is a draft no person approved, usable here because the
    # caller may use the run (checked where the run was named), never by naming it.
    return [
        request
        if current[prompt.id] is None
        else replace(request, rubric=current[prompt.id], evolved=True)
        for request, prompt in zip(requests, prompts, strict=True)
    ]


def prompt_groups(prompts: Sequence[Prompt]) -> dict[int, list[int]]:
    """The positions of each prompt's requests in a batch, by prompt id, in batch order."""
    groups: dict[int, list[int]] = defaultdict(list)
    for index, prompt in enumerate(prompts):
        groups[prompt.id].append(index)
    return dict(groups)


def evolvable(results: Sequence[RewardResult]) -> bool:
    """Whether a prompt's results are a group to evolve from: two or more, each scored under
    a rubric version."""
    return len(results) >= 2 and all(r.rubric is not None for r in results)


def persistent_version(
    session: Session, track: EvolutionTrack | None, results: Sequence[RewardResult]
) -> RubricVersion:
    """The version a prompt's track grew from; before its first step, the one its group was
    just scored under."""
    if track is not None:
        return track.persistent_version
    return resolve_version(session, str(results[0].rubric))


def group_rollouts(
    requests: Sequence[RewardRequest], results: Sequence[RewardResult]
) -> list[GroupRollout]:
    """A judged group as the evolution step reads it: each rollout's text, reward, verdicts
    (criterion id -> value; None: failed) and how many of them failed for a reason outside
    the response (the judge's or the infrastructure's: ``judging.failures``)."""
    return [
        GroupRollout(
            request.completion,
            result.reward,
            {
                int(e["criterion_id"]): None if e.get("value") is None else float(e["value"])
                for e in result.criteria
                if "criterion_id" in e
            },
            sum(
                1 for e in result.criteria if e.get("value") is None and e.get("failure") in OUTAGES
            ),
        )
        for request, result in zip(requests, results, strict=True)
    ]


# The failure classes that say nothing of the response: an outage of the judge or of what
# carries it.
OUTAGES = frozenset({FailureClass.INFRASTRUCTURE.value, FailureClass.JUDGE.value})
