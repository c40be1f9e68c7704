"""The over-optimization lab's stand-in for a strong criteria generator (the ``evolving-pool``
arm, docs/overoptimization.md): a scripted generator backend, ``overopt-pool``, that answers an
evolution step's request from a hand-written pool of criteria (``examples/overopt/evolving_pool.yaml``)
instead of a model.

It is a plugin (``RUBRICSVC_PLUGINS=trainer.overopt_pool``) and is named like any backend in
an evolution's generator configuration::

    generator:
      backend: overopt-pool
      backend_options: {pool: examples/overopt/evolving_pool.yaml, tasks: examples/overopt/tasks.yaml}

What it does, exactly. The request carries the prompt's text (the ``rubric_evolution``
template's "Prompt:" section), not its id, so the task file maps the text back to the task's
id, and the pool is keyed by that id. The answer is the prompt's own pool criteria, then the
``shared`` ones, in the file's order, leaving out those the request lists as current criteria
and those this backend has already proposed for the prompt in this process, at most as many
as the request's JSON schema allows (the step's ``max_new``); an empty list once the pool is
used up. It does **not** judge anything and does not choose by separation itself: the
evolution step judges what it proposes over the group with the run's judge (the embedded
one), like any criterion, and its pruning keeps those whose verdicts spread (at most
``max_active``, the highest spread first). So "the pool criteria that best separate the group"
is what the step's pruning leaves of them, tried ``max_new`` at a time. A process started
again forgets what it proposed: it offers those criteria again, and the step refuses the ones
already tried as duplicates.

Weights: +1 becomes the category ``important``, -1 ``pitfall`` (a configuration weighing
those 1 and -1 keeps the pool's signs and sizes, as DR Tulu's evolved criteria have). The
theme is ``theme`` (an option; ``coverage`` by default). The pool is never part of gold.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rubricsvc.backends import BackendError, register_backend
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import describe_validation_error, load_yaml
from rubricsvc.neutral import judged
from rubricsvc.rubrics.schemas import normalized_text
from trainer.overopt import load_task_set

BACKEND_NAME = "overopt-pool"
# The sections of the rubric_evolution template's user message this backend reads.
PROMPT_HEADING = "Prompt:\n"
CRITERIA_HEADING = "\n\nCurrent criteria:\n"
RESPONSES_HEADING = "\n\nResponses, best first:\n"


class PoolCriterion(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str = Field(min_length=1)
    weight: Literal[-1, 1]  # DR Tulu's signs: what the best do, or a failure or gaming mode

    def answered(self, theme: str) -> dict[str, str]:
        """The criterion as a generator's answer writes it."""
        category = "pitfall" if self.weight < 0 else "important"
        return {"text": self.text, "category": category, "theme": theme}


class Pool(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    shared: tuple[PoolCriterion, ...] = ()
    pools: dict[str, tuple[PoolCriterion, ...]]

    def offered(self, task_id: str) -> list[PoolCriterion]:
        """The task's own criteria, then the shared ones."""
        return [*self.pools.get(task_id, ()), *self.shared]


def load_pool(path: Path) -> Pool:
    try:
        pool = Pool.model_validate(load_yaml(path))
    except ValidationError as err:
        raise ValidationFailed(f"{path}: {describe_validation_error(err)}") from None
    return pool


class PoolGenerator:
    """See the module docstring. ``pool``: the pool file; ``tasks``: the task file whose
    prompts key it; ``theme``: the theme every answered criterion gets."""

    name = BACKEND_NAME

    def __init__(self, pool: str, tasks: str, theme: str = "coverage", model: str = "") -> None:
        self.model = model or f"{BACKEND_NAME}:{Path(pool).name}"
        self.pool = load_pool(Path(pool))
        task_set = load_task_set(Path(tasks))
        # The prompt as the template shows it (neutralized, as every prompt is): its task id.
        self._task_of_prompt = {judged(t.prompt): t.id for t in task_set.tasks}
        unknown = sorted(set(self.pool.pools) - {t.id for t in task_set.tasks})
        if unknown:
            raise ValidationFailed(f"{pool}: no task in {tasks} has the id {', '.join(unknown)}")
        self.theme = theme
        self._proposed: dict[str, set[str]] = {}  # task id -> normalized texts proposed
        self._lock = threading.Lock()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        return [self._answer(request) for request in requests]

    def _answer(self, request: GenerationRequest) -> Generation | BackendError:
        sections = _sections(request.chat[-1]["content"] if request.chat else "")
        if sections is None:
            return BackendError(
                f"{BACKEND_NAME}: the request is not a rubric_evolution request "
                "(no Prompt / Current criteria sections)",
                retryable=False,
            )
        prompt, current = sections
        task_id = self._task_of_prompt.get(prompt)
        if task_id is None:
            return BackendError(
                f"{BACKEND_NAME}: the prompt {prompt[:60]!r} is not one of the task file's",
                retryable=False,
            )
        limit = _max_items(request.json_schema)
        if limit is None:
            return BackendError(
                f"{BACKEND_NAME}: needs the answer's JSON schema (structured_output: true) "
                "to know how many criteria it may propose",
                retryable=False,
            )
        with self._lock:
            tried = self._proposed.setdefault(task_id, set())
            chosen = [
                c
                for c in self.pool.offered(task_id)
                if normalized_text(c.text) not in tried | current
            ][:limit]
            tried.update(normalized_text(c.text) for c in chosen)
        text = json.dumps({"criteria": [c.answered(self.theme) for c in chosen]})
        return Generation(text, 0, len(chosen), "stop")

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        error = BackendError(
            f"{BACKEND_NAME} only proposes criteria; it judges none", retryable=False
        )
        return [error for _ in requests]

    def close(self) -> None:
        pass


def _sections(content: str) -> tuple[str, set[str]] | None:
    """The prompt and the current criteria's normalized texts of a rubric_evolution request."""
    start = content.find(PROMPT_HEADING)
    middle = content.find(CRITERIA_HEADING, start)
    end = content.find(RESPONSES_HEADING, middle)
    if start < 0 or middle < 0 or end < 0:
        return None
    prompt = content[start + len(PROMPT_HEADING) : middle]
    current = set()
    for line in content[middle + len(CRITERIA_HEADING) : end].splitlines():
        # "N. [category] text", as proposals.evolution_chat lists them.
        _, bracket, rest = line.partition("] ")
        if bracket:
            current.add(normalized_text(rest))
    return prompt, current


def _max_items(schema: dict[str, Any] | None) -> int | None:
    try:
        return int(schema["properties"]["criteria"]["maxItems"]) if schema else None
    except (KeyError, TypeError, ValueError):
        return None


register_backend(BACKEND_NAME, "trainer.overopt_pool:PoolGenerator")
