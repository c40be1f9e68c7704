"""The edit form of a rubric version: its fields, and turning a post back into a rubric.

A posted form becomes a ``RubricSpec`` validated by the same rules as a rubric file; each
error is attached to the form field it concerns, so the page can show it beside that field.
Rows carry the position of the criterion they came from (``source``), so a criterion keeps
its scale, check, required flag and tags through an edit of its text or weight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from starlette.datastructures import FormData

from rubricsvc.models import Category, RubricVersion
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import authored_fields, spec_of

CATEGORIES = [c.value for c in Category]
EDITED_FIELDS = ("text", "explanation", "weight", "category", "theme")


@dataclass
class Row:
    """One criterion row of the form, as shown and as posted."""

    index: int
    source: str  # the edited version's criterion position, or "new"
    position: str
    text: str = ""
    explanation: str = ""
    weight: str = ""
    category: str = ""
    theme: str = ""
    remove: bool = False
    kind: str = "judge"

    @property
    def blank(self) -> bool:
        return self.source == "new" and not self.text.strip()


@dataclass
class EditForm:
    rows: list[Row]
    note: str = ""
    errors: dict[str, str] = field(default_factory=dict)  # field name -> message


def form_of(version: RubricVersion) -> EditForm:
    """The form for editing ``version``: its criteria in order, and one blank new row."""
    rows = [
        Row(
            index=i,
            source=str(c.position),
            position=str(i + 1),
            text=c.text,
            explanation=c.explanation or "",
            weight=f"{c.weight:g}",
            category=c.category.value,
            theme=c.theme or "",
            kind=c.kind.value,
        )
        for i, c in enumerate(version.criteria)
    ]
    rows.append(_blank_row(len(rows)))
    return EditForm(rows)


def _blank_row(index: int) -> Row:
    return Row(index=index, source="new", position=str(index + 1), category="")


def posted_form(form: FormData, version: RubricVersion) -> EditForm:
    """The rows as posted (at most the version's criteria and a few new ones)."""
    rows = []
    for index in range(len(version.criteria) + 20):
        source = form.get(f"c-{index}-source")
        if not isinstance(source, str):
            break
        values = {name: str(form.get(f"c-{index}-{name}") or "") for name in EDITED_FIELDS}
        rows.append(
            Row(
                index=index,
                source=source,
                position=str(form.get(f"c-{index}-position") or index + 1),
                remove=form.get(f"c-{index}-remove") is not None,
                **values,
            )
        )
    return EditForm(rows, note=str(form.get("note") or ""))


def edited_spec(version: RubricVersion, edit: EditForm, author: str) -> RubricSpec | None:
    """The rubric the form describes, or None with ``edit.errors`` filled in."""
    by_position = {str(c.position): c for c in version.criteria}
    kept: list[tuple[float, Row]] = []
    for row in edit.rows:
        if row.remove or row.blank:
            continue
        if row.source != "new" and row.source not in by_position:
            edit.errors[f"c-{row.index}-text"] = "This row names no criterion of the version."
            continue
        try:
            order = float(row.position)
        except ValueError:
            edit.errors[f"c-{row.index}-position"] = "The position is a number (1 = first)."
            continue
        kept.append((order, row))
    kept.sort(key=lambda pair: (pair[0], pair[1].index))  # stable: ties keep the form's order
    if edit.errors:
        return None
    criteria = [_criterion(row, by_position.get(row.source)) for _, row in kept]
    data = spec_of(version).model_dump(mode="json", exclude_none=True)
    data.update(
        criteria=criteria,
        origin="human",
        origin_detail={"saved_by": author, "edited_from": version.ref},
        note=edit.note.strip() or None,
    )
    try:
        return RubricSpec.model_validate(data)
    except ValidationError as err:
        rows = [row for _, row in kept]
        for error in err.errors():
            edit.errors.setdefault(_field_of(error["loc"], rows), _message(error))
        return None


def _criterion(row: Row, source: Any) -> dict[str, Any]:
    """The criterion a row describes: the source criterion's fields with the row's edits."""
    base = authored_fields(source) if source is not None else {}
    base = {k: v for k, v in base.items() if v is not None}
    base.update(
        text=row.text.strip(),
        explanation=row.explanation.strip() or None,
        weight=row.weight.strip(),
        theme=row.theme.strip() or None,
    )
    if row.category:
        base["category"] = row.category
    else:
        base.pop("category", None)  # derived from the weight by the schema
    return {k: v for k, v in base.items() if v is not None}


def _field_of(loc: tuple[int | str, ...], rows: list[Row]) -> str:
    """The form field a validation error's location names (``criteria.3.weight`` -> the
    weight input of the row that became criterion 3); the note field for the rest."""
    if len(loc) >= 2 and loc[0] == "criteria" and isinstance(loc[1], int) and loc[1] < len(rows):
        name = str(loc[2]) if len(loc) > 2 else "text"
        name = name if name in EDITED_FIELDS else "text"
        return f"c-{rows[loc[1]].index}-{name}"
    return "form"


# Pydantic's wording for the errors a person typing into the form makes most.
FRIENDLY = {
    "float_parsing": "Not a number: try 2, or -1.5 for a pitfall.",
    "finite_number": "Not a finite number.",
    "string_too_short": "Write something here.",
}


def _message(error: Any) -> str:
    friendly = FRIENDLY.get(str(error.get("type")))
    return friendly or str(error["msg"]).removeprefix("Value error, ")
