"""``rubricsvc labels ...``: label sets, the labelled data judges are measured against."""

from __future__ import annotations

from pathlib import Path

import typer

from rubricsvc.cli.context import CliExit, console, db_session
from rubricsvc.cli.importing import print_report, stored_counts
from rubricsvc.cli.labels_build import labels_build
from rubricsvc.cli.render import build_table, dumps
from rubricsvc.importers.healthbench import LABEL_SET as HEALTHBENCH_LABEL_SET
from rubricsvc.importers.healthbench import import_healthbench_labels
from rubricsvc.importers.judgebench import import_judgebench
from rubricsvc.importers.labelled import LabelImport
from rubricsvc.importers.labels_jsonl import import_labels_jsonl
from rubricsvc.importers.pandalm import LABEL_SET as PANDALM_LABEL_SET
from rubricsvc.importers.pandalm import import_pandalm
from rubricsvc.importers.rewardbench2 import LABEL_SET as REWARDBENCH2_LABEL_SET
from rubricsvc.importers.rewardbench2 import import_rewardbench2
from rubricsvc.importers.rmbench import LABEL_SET as RMBENCH_LABEL_SET
from rubricsvc.importers.rmbench import import_rmbench
from rubricsvc.validation.labelsets import get_label_set, label_set_summary, list_label_sets

labels_app = typer.Typer(
    help="Label sets: labelled data that judges are measured against.", no_args_is_help=True
)

FORMATS = {
    "pandalm": f"PandaLM's test set folder (label set {PANDALM_LABEL_SET}, and two judges' verdicts)",
    "judgebench": "a JudgeBench data file (label set judgebench-<response model>, and the "
    "published judges' decisions in outputs/ beside data/)",
    "rm-bench": f"RM-Bench's data (a *_filtered.json or total_dataset.json, or their folder; "
    f"label set {RMBENCH_LABEL_SET})",
    "rewardbench2": f"RewardBench 2's data as JSON Lines (label set {REWARDBENCH2_LABEL_SET})",
    "healthbench": f"a HealthBench judge_responses.jsonl (label set {HEALTHBENCH_LABEL_SET})",
    "jsonl": "the project's own JSON Lines (docs/validation.md, 'Label sets')",
}


@labels_app.command("import")
def labels_import(
    fmt: str = typer.Argument(..., metavar="FORMAT", help=f"One of {', '.join(FORMATS)}."),
    path: Path = typer.Argument(..., help="The file (or the folder holding it)."),
    name: str | None = typer.Option(
        None, help="The label set's name (default: the format's own name; jsonl: the file stem)."
    ),
    rubric: str | None = typer.Option(
        None,
        help="jsonl: the rubric version (NAME@N) that pairwise and scalar labels are judged under.",
    ),
) -> None:
    """Import a label set; importing the same labels again under the same name adds nothing."""
    if fmt not in FORMATS:
        known = "; ".join(f"{key}: {about}" for key, about in FORMATS.items())
        raise CliExit(f"unknown label format {fmt!r}; formats: {known}", 2)
    if rubric is not None and fmt != "jsonl":
        raise CliExit(f"--rubric applies to jsonl labels; {fmt} labels name their own rubrics", 2)
    with db_session() as session:
        if fmt == "pandalm":
            result = import_pandalm(session, path, name=name or PANDALM_LABEL_SET)
        elif fmt == "judgebench":
            result = import_judgebench(session, path, name=name)
        elif fmt == "rm-bench":
            result = import_rmbench(session, path, name=name or RMBENCH_LABEL_SET)
        elif fmt == "rewardbench2":
            result = import_rewardbench2(session, path, name=name or REWARDBENCH2_LABEL_SET)
        elif fmt == "healthbench":
            result = import_healthbench_labels(session, path, name=name or HEALTHBENCH_LABEL_SET)
        else:
            result = import_labels_jsonl(session, path, name=name, rubric=rubric)
    _print_import(fmt, result)


def _print_import(fmt: str, result: LabelImport) -> None:
    saved, report = result.label_set, result.report
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(saved.labels.items()))
    state = "added" if saved.added else "already stored with this content: nothing added"
    lines = [
        f"imported {fmt} labels from {report.path}",
        f"  label set:   {saved.name}: {saved.total} labels ({kinds}); {state}",
    ]
    if fmt != "jsonl":
        lines += stored_counts(report)
    for judge in result.judges:
        lines.append(
            f"  judge {judge.judge}: {judge.records} verdicts, {judge.ok} parsed, "
            f"{judge.failed} unparseable (stored as failed); judgments {judge.added} added, "
            f"{judge.unchanged} already stored; {judge.repeats} records repeat an earlier "
            f"record's content ({judge.conflicts} with another verdict: the first is kept, the "
            "others are in its detail)"
        )
    if report.scores:
        lines.append(
            f"  scores:      {report.scores} computed from stored verdicts; "
            f"{report.scores_matching} of {report.scores_checked} equal the score the source states"
        )
    print_report(lines, report.notes)


@labels_app.command("list")
def labels_list(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List label sets with their labels by kind."""
    with db_session() as session:
        rows = list_label_sets(session)
    if as_json:
        console.print_json(dumps(rows))
        return
    cells = [
        [
            row["name"],
            str(row["labels"]),
            ", ".join(f"{kind} {count}" for kind, count in row["by_kind"].items()),
            row["rubric_version"] or "",
            row["source"] or "",
        ]
        for row in rows
    ]
    headers = ["name", "labels", "kinds", "rubric", "source"]
    table = build_table(
        f"{len(rows)} label set(s)", headers, cells, flexible="source", width=console.width
    )
    console.print(table)


@labels_app.command("show")
def labels_show(
    name: str = typer.Argument(..., help="The label set's name."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """A label set by kind: labels, items, labellers, majority share, labeller agreement."""
    with db_session() as session:
        summary = label_set_summary(session, get_label_set(session, name))
    if as_json:
        console.print_json(dumps(summary))
        return
    lines = [
        f"label set {summary['name']}: {summary['labels']} labels",
        f"  source:      {summary['source'] or '-'}",
        f"  rubric:      {summary['rubric_version'] or '- (each prompt its own)'}",
        f"  hash:        {summary['content_hash']}",
    ]
    if summary["description"]:
        lines.append(f"  description: {summary['description']}")
    for kind, part in summary["by_kind"].items():
        labellers = ", ".join(f"{who} {n}" for who, n in part["labellers"].items())
        lines.append(
            f"  {kind}: {part['labels']} labels on {part['items']} items "
            f"({part['items_with_several_labellers']} with several labellers); labellers: "
            f"{labellers}"
        )
        if part["majority_share"] is not None:
            agreement = part["labeller_agreement"]
            lines.append(
                f"    items with a majority: {part['majority_share']:.2%}; agreement between "
                "two labellers of an item: "
                + (f"{agreement:.2%}" if agreement is not None else "n/a (one labeller each)")
            )
    console.print("\n".join(lines), soft_wrap=True, markup=False)


labels_app.command("build")(labels_build)
