"""``rubricsvc labels build``: a criterion-level training set with contrast, as a label set."""

from __future__ import annotations

from typing import Any

import typer

from rubricsvc.cli.context import console, db_session
from rubricsvc.cli.render import build_table, dumps
from rubricsvc.genrm.dataset import BuildRequest, build_training_set
from rubricsvc.genrm.perturb import KINDS


def labels_build(
    name: str = typer.Argument(..., help="The new label set's name."),
    labeller: str = typer.Option(
        ...,
        help="checks:PATTERN (each prompt's rubric of checks, e.g. checks:{prompt_id}/gold) or "
        "a stored label set's name (its labels as they are).",
    ),
    prompts: str | None = typer.Option(
        None, help="Prompts by external id, comma-separated (default: all the labeller covers)."
    ),
    perturb: str | None = typer.Option(
        None,
        help=f"Perturbed copies to add, comma-separated kinds: {', '.join(KINDS)} "
        "(checks labellers only).",
    ),
    pitfall: list[str] = typer.Option(
        [], "--pitfall", help="A sentence insert_pitfall inserts (repeat for several)."
    ),
    onto: str | None = typer.Option(
        None,
        help="A judged rubric pattern (e.g. {prompt_id}/proxy) whose criteria the check labels "
        "are for, matched by text: what judges distill learns.",
    ),
    seed: int = typer.Option(0, help="Seeds the perturbations, the split and the balancing."),
    test_share: float = typer.Option(0.3, help="The share of prompts held out of training."),
    max_ratio: float = typer.Option(
        3.0,
        help="Per criterion, at most this many training labels of its majority value per "
        "label of its minority.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Label every stored completion of the prompts per criterion (and perturbed copies of
    them), split by prompt, balance each criterion's training labels, and store them as the
    label set NAME (for judges distill --labels NAME); nothing is stored if any step fails."""
    request = BuildRequest(
        name=name,
        labeller=labeller,
        prompts=_listed(prompts),
        perturb=_listed(perturb),
        seed=seed,
        test_share=test_share,
        max_ratio=max_ratio,
        onto=onto,
        pitfalls=tuple(pitfall),
    )
    with db_session() as session:
        report = build_training_set(session, request)
    if as_json:
        console.print_json(dumps(report))
        return
    _print(report)


def _listed(text: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (text or "").split(",") if part.strip())


def _print(report: dict[str, Any]) -> None:
    completions, labels, prompts = report["completions"], report["labels"], report["prompts"]
    perturbed = ", ".join(
        f"{kind} {n} ({completions['not_applicable'][kind]} n/a)"
        for kind, n in completions["perturbed"].items()
    )
    lines = [
        f"label set {report['label_set']}: data {report['data_hash'][:12]}; labeller "
        f"{report['labeller']}" + (f" onto {report['onto']}" if report["onto"] else ""),
        f"  prompts:     {len(prompts['train'])} train, {len(prompts['test'])} held out "
        f"({', '.join(prompts['test'])})",
        f"  completions: {completions['original']} stored; perturbed: {perturbed or 'none'}",
        f"  labels:      {labels['train']} train ({labels['train_dropped']} dropped to balance, "
        f"max ratio {report['max_ratio']:g}), {labels['test']} held out",
    ]
    if report["criteria_left_out"]:
        left = "; ".join(f"{n} {why}" for why, n in report["criteria_left_out"].items())
        lines.append(
            f"  left out:    {sum(report['criteria_left_out'].values())} criteria ({left})"
        )
    console.print("\n".join(lines), soft_wrap=True, markup=False)
    rows = [
        [
            row["prompt"],
            row["text"],
            row["side"],
            _pair(row["train_before"], "train" in row["side"]),
            _pair(row["train_after"], "train" in row["side"]),
            _pair(row["test"], "test" in row["side"]),
            "yes" if row["contrast"] else "NO (one-valued)",
        ]
        for row in report["criteria"]
    ]
    headers = ["prompt", "criterion", "side", "train yes/no", "balanced", "test yes/no", "contrast"]
    title = (
        f"{report['criteria_with_contrast']} of {len(rows)} criteria with contrast "
        f"({report['contrast_share']:.0%})"
    )
    console.print(build_table(title, headers, rows, flexible="criterion", width=console.width))
    distill = report["distill"]
    console.print(
        f"distill: {distill['learnable_labels']} labels it learns; {distill['command']}"
        + (f" ({distill['note']})" if distill["note"] else ""),
        soft_wrap=True,
        markup=False,
    )


def _pair(counts: dict[str, int], on_this_side: bool) -> str:
    return f"{counts['yes']}/{counts['no']}" if on_this_side else "-"
