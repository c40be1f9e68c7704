"""Prometheus score rubrics (prometheus-eval): a criterion with a description per score 1-5.

A record is ``{criteria, score1_description, ..., score5_description}``, the shape of
prometheus-eval's ``SCORE_RUBRIC_TEMPLATE`` fields; the Feedback Collection's ``orig_criteria``,
``orig_score1_description``, ... are read the same way. A file is JSON (one record or a list)
or JSON Lines. Other fields of a record (the instruction, a graded response, its feedback) are
not rubric content and are not read.

Each distinct rubric becomes a shared rubric (no prompt) ``prometheus/<first 12 hex of its
content hash>`` with one criterion: text = ``criteria``, weight 1, an ordinal scale 1..5 whose
levels carry the descriptions. The Feedback Collection repeats a rubric for every graded
response; a repeat is stored once and counted in the import's notes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import read_items
from rubricsvc.hashing import content_hash
from rubricsvc.importers.common import RubricBatch, located, parse
from rubricsvc.rubrics.schemas import RubricSpec

LEVELS = range(1, 6)
FEEDBACK_COLLECTION_PREFIX = "orig_"


class _ScoreRubric(BaseModel):
    # Records carry more than the rubric (instruction, response, feedback): not read.
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    criteria: str = Field(min_length=1)
    score1_description: str = Field(min_length=1)
    score2_description: str = Field(min_length=1)
    score3_description: str = Field(min_length=1)
    score4_description: str = Field(min_length=1)
    score5_description: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _feedback_collection_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        names = ["criteria", *(f"score{n}_description" for n in LEVELS)]
        renamed = {
            name: data[FEEDBACK_COLLECTION_PREFIX + name]
            for name in names
            if name not in data and FEEDBACK_COLLECTION_PREFIX + name in data
        }
        return {**data, **renamed}

    def descriptions(self) -> list[str]:
        return [getattr(self, f"score{n}_description") for n in LEVELS]


def read_prometheus_rubrics(path: Path) -> RubricBatch:
    """One one-criterion rubric per distinct score rubric in the JSON or JSON Lines ``path``."""
    if path.suffix.lower() not in {".json", ".jsonl"}:
        raise ValidationFailed(f"{path}: expected a .json or .jsonl file of score rubrics")
    batch = RubricBatch(source="prometheus", path=str(path), specs=[])
    seen: set[str] = set()
    repeats = 0
    for location, data in read_items(path, "score rubric"):
        rubric = parse(_ScoreRubric, location, data)
        with located(location):
            spec = _rubric_spec(rubric, path)
        if spec.name in seen:
            repeats += 1
            continue
        seen.add(spec.name)
        batch.specs.append(spec)
    if repeats:
        batch.notes.append(f"{repeats} repeated score rubric(s) stored once")
    return batch


def _rubric_spec(rubric: _ScoreRubric, path: Path) -> RubricSpec:
    descriptions = rubric.descriptions()
    digest = content_hash({"criteria": rubric.criteria, "descriptions": descriptions})
    levels = [
        {"score": score, "description": text}
        for score, text in zip(LEVELS, descriptions, strict=True)
    ]
    return RubricSpec.model_validate(
        {
            "name": f"prometheus/{digest[:12]}",
            "criteria": [
                {
                    "text": rubric.criteria,
                    "weight": 1,
                    "scale": {"type": "ordinal", "levels": levels},
                }
            ],
            "origin": "imported",
            "origin_detail": {"source": "prometheus", "path": str(path)},
        }
    )
