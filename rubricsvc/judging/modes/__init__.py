"""Verdict modes: which judgments a rubric needs, the calls that decide them, how a score
reads them. Modes are objects behind one protocol (``base.VerdictModeImpl``), registered
by name; a plugin adds one with ``register_mode``."""

from __future__ import annotations

from rubricsvc.judging.modes.base import (
    Assessment,
    AssessOptions,
    Call,
    CallBuilder,
    CallContext,
    Case,
    CompletionView,
    CriterionView,
    DocumentView,
    Item,
    JudgeSettings,
    ModeError,
    Parser,
    Plan,
    RubricCriterion,
    Ruling,
    VerdictModeImpl,
)
from rubricsvc.judging.modes.criterion import (
    CriterionProb,
    CriterionText,
    criterion_prob_calls,
    criterion_text_calls,
)
from rubricsvc.judging.modes.group import Group, group_calls
from rubricsvc.judging.modes.holistic import Holistic, holistic_calls
from rubricsvc.judging.modes.multi import MultiCriterion, multi_criterion_calls
from rubricsvc.judging.modes.pairwise import Pairwise, pairwise_calls
from rubricsvc.judging.modes.per_criterion import PerCriterionMode
from rubricsvc.judging.modes.reference import (
    REFERENCE_SCALE_MAX,
    ReferenceRelative,
    reference_relative_calls,
)
from rubricsvc.judging.modes.registry import (
    check_mode_name,
    get_mode,
    mode_names,
    modes_that,
    register_mode,
)
from rubricsvc.judging.modes.text import render_conversation

for _mode in (
    CriterionText(),
    CriterionProb(),
    MultiCriterion(),
    Holistic(),
    ReferenceRelative(),
    Pairwise(),
    Group(),
):
    register_mode(_mode)

__all__ = [
    "REFERENCE_SCALE_MAX",
    "AssessOptions",
    "Assessment",
    "Call",
    "CallBuilder",
    "CallContext",
    "Case",
    "CompletionView",
    "CriterionView",
    "DocumentView",
    "Item",
    "JudgeSettings",
    "ModeError",
    "Parser",
    "PerCriterionMode",
    "Plan",
    "RubricCriterion",
    "Ruling",
    "VerdictModeImpl",
    "check_mode_name",
    "criterion_prob_calls",
    "criterion_text_calls",
    "get_mode",
    "group_calls",
    "holistic_calls",
    "mode_names",
    "modes_that",
    "multi_criterion_calls",
    "pairwise_calls",
    "reference_relative_calls",
    "register_mode",
    "render_conversation",
]
