"""The plugin surface: the one module a plugin imports, and a stable one.

A plugin is a module that registers things the platform looks up by name, when it is imported
(``rubricsvc.plugins`` says which processes import it and when: every CLI command, the API app,
every Celery worker, the trainer's launcher and the verl adapter, from ``RUBRICSVC_PLUGINS`` or
the ``rubricsvc.plugins`` entry-point group). It imports this module and nothing else of
``rubricsvc``; the names below keep their meaning from release to release, while the modules
they come from may move. The built-in modes, backends and rubric formats are registered
through these same calls.

- Verdict modes: ``register_mode(mode)``, a ``VerdictModeImpl`` (the protocol types below;
  ``PerCriterionMode`` with ``criterion_prob_calls`` or ``criterion_text_calls`` is the base
  of a mode that judges each criterion on its own).
- Judge backends: ``register_backend(name, factory, ...)``, where ``factory`` makes a
  ``JudgeBackend`` from a judge's ``backend_options`` (and ``model``).
- Rubric formats: ``register_rubric_format(name, reader)``, where ``reader`` turns a file or
  folder into ``RubricSpec`` objects (or a ``RubricBatch``); ``rubricsvc rubrics import
  --format NAME`` then reads it.
- Tool environments: ``register_environment(name, factory, rollout)``, for a training config's
  ``environment: NAME`` (``rubricsvc.environments`` says what the two callables do).

Reward adapters (verl, OpenRLHF, TRL) are files and classes a training framework is pointed
at, not looked up by name, so there is no adapter registry: a plugin's mode or backend reaches
them through the judge config they score with.
"""

from __future__ import annotations

from rubricsvc.backends import (
    BackendError,
    BackendFactory,
    ContextLengthError,
    JudgeBackend,
    backend_names,
    register_backend,
)
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.environments import environment_names, register_environment
from rubricsvc.errors import ValidationFailed
from rubricsvc.hashing import content_hash
from rubricsvc.importers.common import RubricBatch
from rubricsvc.importers.rubric_formats import (
    RubricReader,
    register_rubric_format,
    rubric_format_names,
)
from rubricsvc.judging.aggregation import Status
from rubricsvc.judging.modes import (
    Assessment,
    AssessOptions,
    Call,
    CallContext,
    Case,
    CompletionView,
    CriterionView,
    Item,
    ModeError,
    Parser,
    PerCriterionMode,
    Plan,
    RubricCriterion,
    Ruling,
    VerdictModeImpl,
    criterion_prob_calls,
    criterion_text_calls,
    mode_names,
    register_mode,
)
from rubricsvc.judging.modes.text import framed, probs_of, text_of
from rubricsvc.judging.verdicts import (
    NO_TOKENS,
    YES_TOKENS,
    Verdict,
    binary_from_probs,
    binary_from_text,
)
from rubricsvc.neutral import judged
from rubricsvc.rubrics.schemas import RubricSpec

__all__ = [
    "NO_TOKENS",
    "YES_TOKENS",
    "AssessOptions",
    "Assessment",
    "BackendError",
    "BackendFactory",
    "Call",
    "CallContext",
    "Case",
    "ChoiceRequest",
    "ChoiceResult",
    "CompletionView",
    "ContextLengthError",
    "CriterionView",
    "Generation",
    "GenerationRequest",
    "Item",
    "JudgeBackend",
    "ModeError",
    "Parser",
    "PerCriterionMode",
    "Plan",
    "RubricBatch",
    "RubricCriterion",
    "RubricReader",
    "RubricSpec",
    "Ruling",
    "Status",
    "ValidationFailed",
    "Verdict",
    "VerdictModeImpl",
    "backend_names",
    "binary_from_probs",
    "binary_from_text",
    "content_hash",
    "criterion_prob_calls",
    "criterion_text_calls",
    "environment_names",
    "framed",
    "judged",
    "mode_names",
    "probs_of",
    "register_backend",
    "register_environment",
    "register_mode",
    "register_rubric_format",
    "rubric_format_names",
    "text_of",
]
