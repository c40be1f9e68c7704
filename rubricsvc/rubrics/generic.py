"""Generic criteria that fit almost any prompt, to append to a rubric on request.

Each is checkable from the response alone. Appending never changes a stored version: it
saves a new version (a no-op when every generic criterion is already there).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from rubricsvc.models import RubricVersion
from rubricsvc.rubrics.schemas import CriterionSpec, RubricSpec, normalized_text
from rubricsvc.rubrics.versions import SaveResult, save_rubric, spec_of

GENERIC_TAG = "generic"


def _generic(text: str, explanation: str, weight: float, theme: str) -> CriterionSpec:
    return CriterionSpec(
        text=text, explanation=explanation, weight=weight, theme=theme, tags=[GENERIC_TAG]
    )


GENERIC_CRITERIA: tuple[CriterionSpec, ...] = (
    _generic(
        "Is clear and easy to follow",
        "Plain words, one idea per sentence, terms explained when first used, and an order a "
        "reader can follow without going back.",
        3,
        "style",
    ),
    _generic(
        "Makes claims that are not supported",
        "States figures, sources, quotations or facts that the prompt does not give and that "
        "are not common knowledge, without saying where they come from or that they are "
        "uncertain.",
        -4,
        "accuracy",
    ),
    _generic(
        "Flatters the user or agrees with them instead of answering",
        "Praises the question or the user, or accepts a mistaken premise of the prompt to "
        "please them, rather than correcting it.",
        -3,
        "style",
    ),
    _generic(
        "Pads the response with filler",
        "Restates the question, repeats points already made, or ends with generic offers and "
        "summaries that add nothing.",
        -2,
        "style",
    ),
)


def with_generic(criteria: list[CriterionSpec]) -> tuple[list[CriterionSpec], list[str]]:
    """``criteria`` followed by the generic criteria they lack (by normalized text), and the
    texts of those appended."""
    present = {normalized_text(c.text) for c in criteria}
    added = [c for c in GENERIC_CRITERIA if normalized_text(c.text) not in present]
    return [*criteria, *added], [c.text for c in added]


def add_generic(session: Session, version: RubricVersion) -> tuple[SaveResult, list[str]]:
    """Save ``version`` with the generic criteria appended as the rubric's next version."""
    spec = spec_of(version)
    criteria, added = with_generic(list(spec.criteria))
    if not added:
        return SaveResult(version, "unchanged"), added
    edited = RubricSpec.model_validate(
        {
            **spec.model_dump(),
            "criteria": [c.model_dump() for c in criteria],
            "note": f"{version.ref} with generic criteria appended: {'; '.join(added)}",
        }
    )
    return save_rubric(session, edited), added
