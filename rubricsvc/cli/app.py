"""Entry point: the typer app, its sub-commands, and one-line errors instead of tracebacks."""

from __future__ import annotations

import sys

import typer

from rubricsvc.cli import (
    audit,
    calibration,
    completions,
    db,
    distill,
    evolution,
    importing,
    jobs,
    judges,
    keys,
    labels,
    models,
    prompts,
    reinforce,
    rubrics,
    score,
    scores,
    serve,
    train,
    validation,
    worker,
)
from rubricsvc.cli.context import CliExit, fail, load_configured_plugins
from rubricsvc.errors import RubricsvcError
from rubricsvc.inputpolicy import text_problem

app = typer.Typer(
    name="rubricsvc",
    help="Rubric rewards: per-prompt rubrics, generative judges, batch scoring, RL rewards.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(db.db_app, name="db")
app.add_typer(models.models_app, name="models")
rubrics.app.add_typer(evolution.app, name="evolution")
app.add_typer(rubrics.app, name="rubrics")
app.add_typer(completions.completions_app, name="completions")
app.add_typer(prompts.prompts_app, name="prompts")
judges.judges_app.command("audit")(audit.judges_audit)
judges.judges_app.command("audit-generator")(audit.judges_audit_generator)
judges.judges_app.command("calibrate")(calibration.judges_calibrate)
judges.judges_app.command("distill")(distill.judges_distill)
judges.judges_app.command("evaluate")(validation.judges_evaluate)
judges.judges_app.command("import")(validation.judges_import)
judges.judges_app.command("reinforce")(reinforce.judges_reinforce)
judges.judges_app.command("compare")(validation.judges_compare)
judges.judges_app.command("show")(validation.judges_show)
app.add_typer(judges.judges_app, name="judges")
app.add_typer(scores.scores_app, name="scores")
app.command("score")(score.score_command)
app.add_typer(importing.import_app, name="import")
app.add_typer(labels.labels_app, name="labels")
app.add_typer(jobs.jobs_app, name="jobs")
app.command("worker")(worker.worker_command)
app.add_typer(train.train_app, name="train")
app.add_typer(keys.keys_app, name="keys")
app.command("serve")(serve.serve_command)


def _check_arguments(arguments: list[str]) -> None:
    """Arguments held to the input policy: bytes that are not UTF-8 reach Python as lone
    surrogates (U+DC80-U+DCFF), which no name, reference or text may hold."""
    for number, argument in enumerate(arguments, start=1):
        problem = text_problem(argument)
        if problem is not None:
            raise CliExit(f"argument {number} {problem} (is it UTF-8?)", 2)


def main() -> None:
    try:
        _check_arguments(sys.argv[1:])
        load_configured_plugins()
        app()
    except CliExit as err:
        fail(str(err), err.code)
    except RubricsvcError as err:
        fail(str(err), err.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
