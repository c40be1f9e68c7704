"""``rubricsvc judges calibrate``: fit a monotone map from a judge's probabilities to how often
labellers agree, measure it on held-out prompts, and store the calibrated judge."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict
from typing import Any

import typer

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.cli.context import CliExit, console, db_session
from rubricsvc.cli.progress import progress_bar
from rubricsvc.cli.render import build_table
from rubricsvc.config import get_settings
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec
from rubricsvc.judging.modes import get_mode, modes_that
from rubricsvc.scoring.judge_configs import ensure_judge_config, find_judge
from rubricsvc.validation.calibration import (
    CalibrationPoint,
    CalibrationResult,
    Measured,
    calibrate,
)
from rubricsvc.validation.evaluation import pointwise_observations
from rubricsvc.validation.labelsets import get_label_set


class MethodChoice(enum.StrEnum):
    AUTO = "auto"
    ISOTONIC = "isotonic"
    PLATT = "platt"


def judges_calibrate(
    judge: str = typer.Option(..., help="The judge to calibrate (criterion-prob)."),
    labels: str = typer.Option(..., help="The label set (pointwise labels) to calibrate on."),
    method: MethodChoice = typer.Option(
        MethodChoice.AUTO,
        help="auto: isotonic with at least 1000 fit labels, else platt (a sigmoid).",
    ),
    holdout: float = typer.Option(
        0.5, help="The share of the labelled prompts held out to measure the map on."
    ),
    seed: int = typer.Option(0, help="Seed of the prompt split and of the bootstrap."),
    into: str | None = typer.Option(
        None, help="The calibrated judge's name (default: NAME-calibrated)."
    ),
    resamples: int = typer.Option(1000, min=100, help="Bootstrap resamples for the intervals."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Fit a monotone map (isotonic or Platt) from the judge's probabilities to the labels on
    part of the labelled prompts, report the calibration error (ECE, Brier) before and after
    on the held-out prompts, and store the calibrated judge as a new judge config."""
    if not 0.0 < holdout < 1.0:
        raise CliExit(f"--holdout is a share of the prompts between 0 and 1, not {holdout}", 2)
    target = into or f"{judge}-calibrated"
    backends = BackendProvider.from_settings(get_settings())
    with backends, db_session() as session:
        spec = find_judge(session, judge)
        _check_calibratable(spec, target)
        label_set = get_label_set(session, labels)
        with progress_bar("judging", enabled=not as_json, lines=True) as update:
            observations = pointwise_observations(
                session,
                spec,
                label_set,
                backends.factory(spec),
                progress=update,
                checkpoint=session.commit,
            )
        if not observations:
            raise ValidationFailed(
                f"label set {labels!r} has no pointwise labels with a majority to calibrate on"
            )
        points = [
            CalibrationPoint(o.prompt_id, o.judged, o.label)
            for o in observations
            if o.judged is not None
        ]
        try:
            result = calibrate(
                points, method=method.value, holdout=holdout, seed=seed, resamples=resamples
            )
        except ValueError as err:
            raise ValidationFailed(
                f"cannot calibrate judge {judge!r} on {labels!r}: {err}"
            ) from None
        report = _report(spec, label_set.name, label_set.content_hash, result)
        report["unjudged"] = len(observations) - len(points)
        calibrated = JudgeSpec.model_validate(
            {
                **spec.model_dump(),
                "name": target,
                "calibration": result.calibration.model_dump(),
            }
        )
        row = ensure_judge_config(session, calibrated, origin={"calibrated": report})
        report["calibrated_judge"] = {
            "name": row.name,
            "config_hash": row.config_hash,
            "judge_config_id": row.id,
        }
        report["use"] = f"rubricsvc score --judge {row.name}"
    if as_json:
        console.print_json(json.dumps(report))
        return
    _print(report, result)


def _check_calibratable(spec: JudgeSpec, target: str) -> None:
    """Refuse, before anything is judged, a judge whose verdicts cannot be calibrated."""
    if spec.jury is not None:
        raise ValidationFailed(
            f"judge {spec.name!r} is a jury: calibrate its members, then make a jury of them"
        )
    if not get_mode(spec.mode).gives_probability:
        raise ValidationFailed(
            f"judge {spec.name!r} gives {spec.mode} verdicts, not probabilities: only "
            f"{', '.join(modes_that(gives_probability=True))} judges can be calibrated"
        )
    if spec.calibration is not None:
        raise ValidationFailed(
            f"judge {spec.name!r} is calibrated already: calibrate the judge it was made from"
        )
    if target == spec.name or target in BUILTIN_JUDGES:
        raise ValidationFailed(
            f"--into {target!r} names an existing judge: the calibrated judge needs a new name"
        )


def _measured(figures: Measured) -> dict[str, Any]:
    return {
        "ece": figures.ece,
        "ece_interval": list(figures.ece_interval) if figures.ece_interval else None,
        "brier": figures.brier,
        "bins": [asdict(b) for b in figures.bins],
    }


def _report(
    spec: JudgeSpec, label_set: str, label_set_hash: str, result: CalibrationResult
) -> dict[str, Any]:
    return {
        "judge": spec.name,
        "judge_config_hash": spec.config_hash(),
        "label_set": label_set,
        "label_set_hash": label_set_hash,
        "method": result.method,
        "reason": result.reason,
        "calibration": result.calibration.model_dump(),
        "holdout": result.holdout,
        "seed": result.seed,
        "fit": {"labels": result.n_fit, "prompts": len(result.fit_prompts)},
        "held_out": {"labels": result.n_held_out, "prompts": len(result.held_out_prompts)},
        "fit_prompt_ids": result.fit_prompts,
        "held_out_prompt_ids": result.held_out_prompts,
        # Both measured on the held-out prompts only: the map never saw them.
        "before": _measured(result.before),
        "after": _measured(result.after),
        "ece_change": result.ece_change,
        "ece_change_interval": (
            list(result.ece_change_interval) if result.ece_change_interval else None
        ),
        "notes": result.notes,
    }


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _interval(bounds: Any, signed: bool = False) -> str:
    if not bounds:
        return ""
    return f" [{_fmt(bounds[0], signed)}, {_fmt(bounds[1], signed)}]"


def _print(report: dict[str, Any], result: CalibrationResult) -> None:
    before, after = report["before"], report["after"]
    lines = [
        f"judge {report['judge']} on label set {report['label_set']}: {result.calibration.describe()}",
        f"  method:   {report['reason']}",
        f"  split:    fit on {report['fit']['labels']} labels of {report['fit']['prompts']} "
        f"prompts; measured on {report['held_out']['labels']} labels of "
        f"{report['held_out']['prompts']} held-out prompts (holdout {report['holdout']:g}, "
        f"seed {report['seed']})",
    ]
    if report["unjudged"]:
        lines.append(f"  unjudged: {report['unjudged']} labels without a valid verdict, left out")
    lines += [
        "  on the held-out prompts (95% intervals, prompts resampled):",
        f"    ECE   before {_fmt(before['ece'])}{_interval(before['ece_interval'])}, after "
        f"{_fmt(after['ece'])}{_interval(after['ece_interval'])}; change "
        f"{_fmt(report['ece_change'], True)}{_interval(report['ece_change_interval'], True)}",
        f"    Brier before {_fmt(before['brier'])}, after {_fmt(after['brier'])}",
    ]
    lines += [f"  note: {note}" for note in report["notes"]]
    console.print("\n".join(lines), soft_wrap=True, markup=False)
    rows = [
        [
            f"{b['low']:.1f}-{b['high']:.1f}",
            str(b["count"]),
            _fmt(b["mean_prob"]),
            _fmt(b["frequency"]),
            str(a["count"]),
            _fmt(a["mean_prob"]),
            _fmt(a["frequency"]),
        ]
        for b, a in zip(before["bins"], after["bins"], strict=True)
    ]
    headers = ["bin", "before n", "before p", "before met", "after n", "after p", "after met"]
    title = "held-out reliability: mean probability p and share met, per bin of p"
    console.print(build_table(title, headers, rows, flexible="bin", width=console.width))
    judge = report["calibrated_judge"]
    console.print(
        f"stored judge {judge['name']} ({judge['config_hash'][:12]}): its verdicts are judged "
        "anew (the map is part of its config hash), each keeping the judge's own value in its "
        f"detail (uncalibrated)\nuse it with: {report['use']}",
        soft_wrap=True,
        markup=False,
    )
