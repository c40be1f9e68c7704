"""What an evolution run did, read back: per prompt, its steps and its criteria's lives.

Shared by ``rubricsvc rubrics evolution show`` and ``export`` (and, later, the review pages):
plain dictionaries, in the order things happened.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from rubricsvc.errors import NotFoundError
from rubricsvc.evolution.store import get_run
from rubricsvc.models import EvolutionRun, EvolutionTrack, Prompt, StepOutcome
from rubricsvc.prompts import find_prompt
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import prompt_spec_of, spec_of


def run_summary(run: EvolutionRun) -> dict[str, Any]:
    """The run's settings and one line per prompt."""
    return {
        "run": run.name,
        "settings": run.settings,
        "door": run.door.value if run.door is not None else None,
        "created_by": run.created_by,
        "keys": list(run.key_names),
        "prompts": [_track_summary(track) for track in run.tracks],
    }


def run_history(run: EvolutionRun) -> dict[str, Any]:
    """``run_summary`` with every prompt's ``track_history`` under ``histories`` (keyed by
    the prompt's external id, else its id): the whole run in one document."""
    return run_summary(run) | {
        "histories": {
            str(track.prompt.external_id or track.prompt.id): track_history(track)
            for track in run.tracks
        }
    }


def _track_summary(track: EvolutionTrack) -> dict[str, Any]:
    prompt = track.prompt
    return {
        "prompt_id": prompt.id,
        "external_id": prompt.external_id,
        "persistent": track.persistent_version.ref,
        "current": track.current_version.ref,
        "steps": len(track.steps),
        "evolved": sum(1 for s in track.steps if s.outcome == StepOutcome.EVOLVED),
        "active": sum(1 for c in track.criteria if c.state.value == "active"),
        "criteria": len(track.criteria),
        "generator_calls": track.generator_calls,
        "generator_failures": track.generator_failures,
    }


def resolve_track(session: Session, run_name: str, prompt: str) -> EvolutionTrack:
    """The track of ``prompt`` (an external id, or a numeric prompt id) in the run."""
    run = get_run(session, run_name)
    found: Prompt | None = None
    try:
        found = find_prompt(session, external_id=prompt)
    except NotFoundError:
        if not prompt.isdigit():
            raise
        found = find_prompt(session, prompt_id=int(prompt))
    track = next((t for t in run.tracks if t.prompt_id == found.id), None)
    if track is None:
        raise NotFoundError(f"evolution run {run_name!r} has not evolved prompt {prompt!r}")
    return track


def track_history(track: EvolutionTrack) -> dict[str, Any]:
    """The prompt's steps (what each read, added, pruned and refused) and each criterion's
    life (when it appeared, from which rollouts, its spread at each step, when it went)."""
    spreads: dict[int, list[dict[str, Any]]] = {}
    steps = []
    for step in track.steps:
        for spread in step.spreads:
            spreads.setdefault(spread.criterion_id, []).append(
                {
                    "step": step.step,
                    "spread": spread.spread,
                    "values": spread.values,
                    "weight": spread.weight,
                    "active": spread.active,
                }
            )
        steps.append(
            {
                "step": step.step,
                "outcome": step.outcome.value,
                "version_before": step.version_before.ref,
                "version_after": step.version_after.ref,
                "added": [c.text for c in track.criteria if c.step_id == step.id],
                "went_inactive": [s.criterion.text for s in step.spreads if not s.active],
                "refused": step.refused,
                "error": step.error,
                "rollouts": step.rollouts,
                "generator": step.generator,
            }
        )
    step_numbers = {s.id: s.step for s in track.steps}
    criteria = [
        {
            "id": c.id,
            "text": c.text,
            "category": c.category.value,
            "weight": c.weight,
            "state": c.state.value,
            "appeared_at": step_numbers[c.step_id],
            "inactive_at": c.inactive_step,
            "inactive_reason": c.inactive_reason,
            "spreads": spreads.get(c.id, []),
        }
        for c in track.criteria
    ]
    return {**_track_summary(track), "steps_taken": steps, "evolved_criteria": criteria}


def reviewable_spec(track: EvolutionTrack, name: str | None = None) -> RubricSpec:
    """The track's current evolved version as an ordinary rubric file for a person to review:
    with the prompt it belongs to (the stored version has none, so that scoring never picks
    it unasked) and, with ``name``, under that rubric's name (e.g. the persistent one's, to
    make it that rubric's next draft)."""
    spec = spec_of(track.current_version)
    data = spec.model_dump()
    data["prompt"] = prompt_spec_of(track.prompt).model_dump()
    if name is not None:
        data["name"] = name
    return RubricSpec.model_validate(data)
