"""Turning stored objects into tables and JSON for the CLI, and what the ingest commands
(``completions add``, ``prompts add``, ``prompts assign``) share: their tag rules and reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from rubricsvc.assignments import TagRule, load_rule_file, parse_rule
from rubricsvc.cli.context import console, err_console
from rubricsvc.models import RubricVersion
from rubricsvc.rubrics.diff import RubricDiff
from rubricsvc.rubrics.versions import authored_fields


def version_summary(version: RubricVersion) -> dict[str, Any]:
    positive = sum(c.weight for c in version.criteria if c.weight > 0)
    return {
        "id": version.id,
        "ref": version.ref,
        "name": version.rubric.name,
        "number": version.number,
        "status": version.status.value,
        "origin": version.origin.value,
        "parent_id": version.parent_id,
        "prompt_id": version.rubric.prompt_id,
        "criteria": len(version.criteria),
        "pitfalls": sum(1 for c in version.criteria if c.weight < 0),
        "positive_points": positive,
        "content_hash": version.content_hash,
        "created_at": version.created_at.isoformat() if version.created_at else None,
    }


def version_detail(version: RubricVersion) -> dict[str, Any]:
    detail = version_summary(version)
    detail.update(
        title=version.title,
        dimension_weights=version.dimension_weights,
        description=version.rubric.description,
        origin_detail=version.origin_detail,
        note=version.note,
        reviewed_by=version.reviewed_by,
        reviewed_at=version.reviewed_at.isoformat() if version.reviewed_at else None,
        review_note=version.review_note,
        prompt=version.rubric.prompt.messages if version.rubric.prompt else None,
        criteria=[
            {"id": c.id, "position": c.position, **authored_fields(c)} for c in version.criteria
        ],
    )
    return detail


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def build_table(
    title: str, headers: list[str], rows: list[list[str]], flexible: str, width: int = 80
) -> Table:
    """A table whose short columns keep their full width; ``flexible`` is clipped to fit ``width``."""
    table = Table(title=title)
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    fixed = sum(w for h, w in zip(headers, widths, strict=True) if h != flexible)
    # Each column costs its padding and a border: 3 characters, plus the closing border.
    room = max(10, width - fixed - 3 * len(headers) - 1)
    for header, column_width in zip(headers, widths, strict=True):
        if header == flexible:
            table.add_column(header, no_wrap=True, overflow="ellipsis", max_width=room)
        else:
            table.add_column(header, no_wrap=True, min_width=column_width)
    for row in rows:
        table.add_row(*row)
    return table


def versions_table(versions: list[RubricVersion], width: int = 80) -> Table:
    rows = []
    for v in versions:
        s = version_summary(v)
        prompt = v.rubric.prompt.text if v.rubric.prompt else "(shared)"
        rows.append(
            [
                str(v.id),
                v.rubric.name,
                str(v.number),
                s["status"],
                str(s["criteria"]),
                " ".join(prompt.split()),
            ]
        )
    headers = ["id", "rubric", "ver", "status", "criteria", "prompt"]
    return build_table(
        f"{len(versions)} rubric version(s)", headers, rows, flexible="prompt", width=width
    )


def criteria_table(version: RubricVersion) -> Table:
    table = Table(title=f"{version.ref} ({version.status.value}, {len(version.criteria)} criteria)")
    for column in ("#", "weight", "category", "theme", "kind", "criterion"):
        table.add_column(column, justify="right" if column in {"#", "weight"} else "left")
    for c in version.criteria:
        flags = " [required]" if c.required else ""
        table.add_row(
            str(c.position + 1),
            f"{c.weight:g}",
            c.category.value,
            c.theme or "",
            c.kind.value,
            c.text + flags,
        )
    return table


def diff_lines(diff: RubricDiff) -> list[str]:
    lines = [f"--- {diff.old}", f"+++ {diff.new}"]
    if diff.title:
        lines.append(f"~ title: {diff.title[0]!r} -> {diff.title[1]!r}")
    lines += [f"- [{c.category.value} {c.weight:g}] {c.text}" for c in diff.removed]
    lines += [f"+ [{c.category.value} {c.weight:g}] {c.text}" for c in diff.added]
    for change in diff.changed:
        fields = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in change.changes.items())
        lines.append(f"~ {change.text}: {fields}")
    if diff.reordered:
        lines.append("~ criteria reordered")
    if diff.empty:
        lines.append("(no differences)")
    return lines


ASSIGN_HELP = (
    "Assign a shared rubric to the prompts with a tag: 'KEY:VALUE -> RUBRIC' "
    "(e.g. 'scenario:writing_advertisement -> autoj/writing_advertisement'); repeatable."
)
RULES_HELP = "A file of such rules, one per line ('#' starts a comment)."


def tag_rules(assign: list[str], rules_file: Path | None) -> list[TagRule]:
    """The rules given on the command line and in the rule file, all checked first."""
    rules = [parse_rule(text) for text in assign]
    return rules + (load_rule_file(rules_file) if rules_file is not None else [])


def print_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        err_console.print(f"[yellow]warning[/yellow]: {warning}", soft_wrap=True)


def report_ingest(noun: str, result: Any, rule_report: Any | None) -> None:
    """What an ingest stored (an ``IngestResult`` or a prompts result), what its tag rules
    assigned, and its warnings."""
    console.print(
        f"{result.added} {noun}(s) added, {result.unchanged} already stored"
        + (f"; {result.assigned} rubric assignment(s) added" if result.assigned else "")
    )
    if rule_report is not None:
        report_rules(rule_report.assigned, rule_report.unmatched_rules)
    print_warnings(result.warnings)


def report_rules(assigned: int, unmatched: list[str] | None) -> None:
    console.print(f"{assigned} prompt assignment(s) added by tag rules")
    for rule in unmatched or []:
        err_console.print(f"[yellow]warning[/yellow]: rule {rule!r} matched no prompt")
