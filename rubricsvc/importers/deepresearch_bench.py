"""DeepResearch Bench (Du et al. 2025): tasks, their RACE criteria, and generated reports.

Read from the repository root:
- ``data/prompt_data/query.jsonl`` {id, topic, language, prompt}: one prompt per task, external
  id ``drb/<id>``, tags ``topic`` and ``language``;
- ``data/criteria_data/criteria.jsonl`` {id, prompt, dimension_weight, criterions{dimension:
  [{criterion, explanation, weight}]}}: one rubric ``drb/<id>`` per task (origin imported, a
  draft), ``dimension_weights`` = ``dimension_weight``, one criterion per item, dimension by
  dimension, theme = the dimension, weight and explanation as given (floats kept exactly);
- ``data/test_data/cleaned_data/<model>.jsonl`` {id, prompt, article} (or the one file given as
  ``reports``): each article a completion of its task, source = the file stem (the model),
  external id ``drb/<id>/<model>``.

No judgments are imported: the benchmark ships RACE scores, each relative to a reference report
that is not part of the data, and no per-criterion verdicts.

Nothing is dropped (see ``common.plan_criteria``): fields a criterion has no room for
(``comment``, ``aspect``, ``rationale_for_weight`` on a few tasks) go to the version's
``origin_detail.extra_fields``; a zero weight or a repeated text (none in the published data)
is handled as for HealthBench. A task or report whose prompt differs from its query is refused.

``read_deepresearch_bench_rubrics`` reads the rubrics alone with the same mapping (``rubricsvc
rubrics import --format deepresearch-bench``), from the repository or from ``criteria.jsonl``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from rubricsvc.errors import ValidationFailed
from rubricsvc.importers.common import (
    ImportReport,
    Record,
    RubricBatch,
    SourceItem,
    ensure_completion,
    ensure_prompt,
    located,
    parse,
    plan_criteria,
    read_jsonl,
    save_imported_rubric,
)
from rubricsvc.models import Prompt
from rubricsvc.rubrics.schemas import PromptSpec, RubricSpec

QUERY_FILE = Path("data/prompt_data/query.jsonl")
CRITERIA_FILE = Path("data/criteria_data/criteria.jsonl")
REPORTS_DIR = Path("data/test_data/cleaned_data")


class _Entry(BaseModel):
    id: int | str


Entry = TypeVar("Entry", bound=_Entry)


class _Query(_Entry):
    topic: str | None = None
    language: str | None = None
    prompt: str = Field(min_length=1)


class _Criterion(BaseModel):
    # Extra fields are allowed here and kept in origin_detail, never dropped.
    model_config = ConfigDict(extra="allow")

    criterion: str = Field(min_length=1)
    explanation: str | None = None
    weight: float


class _Task(_Entry):
    prompt: str
    dimension_weight: dict[str, float] = Field(min_length=1)
    criterions: dict[str, list[_Criterion]] = Field(min_length=1)


class _Report(_Entry):
    prompt: str
    article: str


def import_deepresearch_bench(
    session: Session, path: Path, reports: Path | None = None
) -> ImportReport:
    """Import tasks, rubrics and reports from the repository at ``path``; the caller commits."""
    if not path.is_dir():
        raise ValidationFailed(f"{path}: expected the DeepResearch Bench repository folder")
    queries = _by_id(_read(path / QUERY_FILE, _Query))
    tasks = _by_id(_read(path / CRITERIA_FILE, _Task))
    files = [reports] if reports else sorted((path / REPORTS_DIR).glob("*.jsonl"))
    articles = [(file.stem, entry) for file in files for entry in _read(file, _Report)]
    report = ImportReport(source="deepresearch-bench", path=str(path))
    prompts = _import_prompts(session, queries, report)
    for location, task in tasks.values():
        with located(location):
            _check_prompt(task.prompt, queries, task.id)
            spec = _rubric_spec(task, prompts[str(task.id)][0], path / CRITERIA_FILE)
            save_imported_rubric(session, spec, report)
    for model, (location, entry) in articles:
        with located(location):
            _check_prompt(entry.prompt, queries, entry.id)
            _add_article(session, location, prompts[str(entry.id)][1], model, entry, report)
    return report


def read_deepresearch_bench_rubrics(path: Path) -> RubricBatch:
    """The rubrics of ``criteria.jsonl``, or of the repository at ``path`` (prompts tagged from
    ``query.jsonl`` as the full import does); no reports."""
    file = path / CRITERIA_FILE if path.is_dir() else path
    tasks = _by_id(_read(file, _Task))
    queries = _by_id(_read(path / QUERY_FILE, _Query)) if path.is_dir() else None
    batch = RubricBatch(source="deepresearch-bench", path=str(file), specs=[])
    for location, task in tasks.values():
        with located(location):
            if queries is None:
                prompt = PromptSpec(text=task.prompt, external_id=f"drb/{task.id}")
            else:
                _check_prompt(task.prompt, queries, task.id)
                prompt = _prompt_spec(queries[str(task.id)][1])
            batch.specs.append(_rubric_spec(task, prompt, file))
    return batch


def _import_prompts(
    session: Session, queries: dict[str, tuple[str, _Query]], report: ImportReport
) -> dict[str, tuple[PromptSpec, Prompt]]:
    """Every task's prompt, stored (also a task without criteria: its reports still count)."""
    prompts = {}
    for key, (location, query) in queries.items():
        with located(location):
            spec = _prompt_spec(query)
            prompts[key] = (spec, ensure_prompt(session, spec, report))
    return prompts


def _read(file: Path, model: type[Record]) -> list[tuple[str, Record]]:
    return [(location, parse(model, location, data)) for location, data in read_jsonl(file)]


def _by_id(entries: list[tuple[str, Entry]]) -> dict[str, tuple[str, Entry]]:
    """Entries by task id; a repeated id is refused (one of the two would be lost)."""
    found: dict[str, tuple[str, Entry]] = {}
    for location, entry in entries:
        key = str(entry.id)
        if key in found:
            raise ValidationFailed(f"{location}: task id {key} is also at {found[key][0]}")
        found[key] = (location, entry)
    return found


def _check_prompt(prompt: str, queries: dict[str, tuple[str, _Query]], task_id: int | str) -> None:
    known = queries.get(str(task_id))
    if known is None:
        raise ValidationFailed(f"task id {task_id} is not in {QUERY_FILE.name}")
    if prompt.strip() != known[1].prompt.strip():
        raise ValidationFailed(f"task {task_id}: the prompt differs from the query at {known[0]}")


def _prompt_spec(query: _Query) -> PromptSpec:
    tags = {"topic": query.topic, "language": query.language}
    return PromptSpec(
        text=query.prompt,
        external_id=f"drb/{query.id}",
        tags={k: v for k, v in tags.items() if v is not None},
    )


def _rubric_spec(task: _Task, prompt: PromptSpec, file: Path) -> RubricSpec:
    plan = plan_criteria(_source_items(task))
    return RubricSpec(
        name=f"drb/{task.id}",
        prompt=prompt,
        criteria=plan.criteria,
        dimension_weights=task.dimension_weight,
        origin="imported",
        origin_detail={"source": "deep_research_bench", "path": str(file), **plan.detail},
    )


def _source_items(task: _Task) -> list[SourceItem]:
    entries = [(dim, item) for dim, items in task.criterions.items() for item in items]
    return [
        SourceItem(
            number=number,
            text=item.criterion,
            weight=item.weight,
            explanation=item.explanation,
            theme=dimension,
            extra=dict(item.model_extra or {}),
        )
        for number, (dimension, item) in enumerate(entries, start=1)
    ]


def _add_article(
    session: Session,
    location: str,
    prompt: Prompt,
    model: str,
    entry: _Report,
    report: ImportReport,
) -> None:
    record = {
        "text": entry.article,
        "source": model,
        "external_id": f"drb/{entry.id}/{model}",
        "metadata": {"imported_from": location},
    }
    ensure_completion(session, "article", prompt, record, report)
