"""What ``judges distill`` and ``judges reinforce`` share on the command line: both read their
settings from one YAML or JSON mapping, and both run a judge-training run the same way (the
run's messages and progress bar on the terminal, the session committed at each checkpoint,
the report printed or given as JSON). Kept in one place so the two commands cannot drift."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.cli.context import console, db_session, err_console
from rubricsvc.cli.progress import progress_bar
from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_records

SettingsT = TypeVar("SettingsT", bound=BaseModel)


def read_settings_file(path: Path | None, model: type[SettingsT], what: str) -> SettingsT:
    """``model``'s defaults without ``path``; else the one mapping the file holds, validated
    (``what`` names the settings when the file holds anything else)."""
    if path is None:
        return model()
    records = list(read_records(path))
    if len(records) != 1 or not isinstance(records[0][1], dict):
        raise ValidationFailed(f"{path}: expected one mapping of {what}")
    location, data = records[0]
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ValidationFailed(f"{location}: {describe_validation_error(err)}") from None


def run_judge_training(
    run: Callable[..., dict[str, Any]],
    request: Any,
    backends: BackendProvider,
    *,
    label: str,
    as_json: bool,
    print_report: Callable[[dict[str, Any]], None],
) -> None:
    """``run(session, request, factory, say=, progress=, checkpoint=)`` (``distill`` or
    ``reinforce``) with its messages on stderr and a progress bar named ``label`` (neither
    with ``as_json``), each checkpoint a commit; then its report, as JSON or printed."""
    say = (lambda _: None) if as_json else (lambda text: err_console.print(text))
    with (
        backends,
        db_session() as session,
        progress_bar(label, enabled=not as_json, detail=True) as bar,
    ):
        report = run(
            session,
            request,
            backends.factory,
            say=say,
            progress=bar,
            checkpoint=session.commit,
        )
    if as_json:
        console.print_json(json.dumps(report))
        return
    print_report(report)
