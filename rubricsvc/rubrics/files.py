"""Loading rubric files into validated ``RubricSpec`` objects, or failing with one clear line."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_items
from rubricsvc.rubrics.schemas import RubricSpec


def parse_rubric(location: str, data: Any) -> RubricSpec:
    if not isinstance(data, dict):
        kind = "nothing" if data is None else type(data).__name__
        raise ValidationFailed(f"{location}: a rubric must be a mapping, got {kind}")
    name = data.get("name")
    label = f"rubric {name!r}" if isinstance(name, str) and name else "rubric (no name)"
    try:
        return RubricSpec.model_validate(data)
    except ValidationError as err:
        raise ValidationFailed(f"{location}: {label}: {describe_validation_error(err)}") from None


def load_rubric_files(paths: Iterable[Path]) -> list[RubricSpec]:
    """Every rubric in ``paths``, all validated before anything is returned.

    A name may appear only once across the files of one call: two different contents
    under one name would make the resulting version depend on argument order.
    """
    specs: list[RubricSpec] = []
    where: dict[str, str] = {}
    for path in paths:
        for location, data in read_items(path, "rubric", key="rubrics"):
            spec = parse_rubric(location, data)
            if spec.name in where:
                raise ValidationFailed(
                    f"{location}: rubric {spec.name!r} is also defined at {where[spec.name]}"
                )
            where[spec.name] = location
            specs.append(spec)
    return specs


def dump_jsonl(specs: Iterable[RubricSpec]) -> str:
    """Rubrics in the JSON Lines rubric format, one per line: ``rubrics add`` reads them back
    as they were (floats, texts and ``origin_detail`` exactly)."""
    return "".join(spec.model_dump_json(exclude_none=True) + "\n" for spec in specs)
