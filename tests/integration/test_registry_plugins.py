"""A backend and verdict modes from outside the package, registered in this file alone through
the public functions, as a plugin registers them (``RUBRICSVC_PLUGINS`` names this module).

The toy backend answers every choice with a fixed probability of "Yes"; a judge config names it
and the CLI scores with it in process. Two toy modes differ only in whether they declare their
verdicts probabilities: only the one that does may carry a calibration. Nothing in
``rubricsvc/`` knows these names.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import ValidationError

from rubricsvc.backends import (
    BackendError,
    backend_names,
    create_backend,
    get_backend,
    register_backend,
)
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.judging.calibration import CalibrationMap
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import CriterionProb, modes_that, register_mode
from tests.cli_runner import ALWAYS_SUBPROCESS, cli_error, cli_ok
from tests.helpers import approve_rubrics, rubric_dict

REPO = Path(__file__).resolve().parents[2]
TOY_BACKEND = "toy-constant"
RUBRIC = rubric_dict("toy/one", criteria=[{"text": "Recommends a regular schedule", "weight": 1}])
PROMPT = RUBRIC["prompt"]["external_id"]


class ConstantBackend:
    """Every choice: P("Yes") = ``p_yes``; it decodes nothing. Takes no ``model_dir``: it does
    not declare that it runs the embedded model."""

    name = TOY_BACKEND
    made: ClassVar[list[ConstantBackend]] = []

    def __init__(self, model: str = "constant", *, p_yes: float = 0.5) -> None:
        self.model = model
        self.p_yes = p_yes
        self.asked = 0
        ConstantBackend.made.append(self)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        return [BackendError("the toy backend decodes nothing", retryable=False) for _ in requests]

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        self.asked += len(requests)
        return [ChoiceResult({"Yes": self.p_yes, "No": 1.0 - self.p_yes}, 10) for _ in requests]

    def close(self) -> None:
        pass


class ToyProbability(CriterionProb):
    """criterion-prob's questions under another name, declaring its values probabilities."""

    name = "toy-probability"
    gives_probability = True


class ToyDecoded(CriterionProb):
    """The same, declaring they are not."""

    name = "toy-decoded"
    gives_probability = False


register_backend(TOY_BACKEND, ConstantBackend)
register_mode(ToyProbability())
register_mode(ToyDecoded())

TOY_JUDGE = JudgeSpec(
    name="toy-judge",
    backend=TOY_BACKEND,
    model="constant-0.8",
    mode="criterion-prob",
    backend_options={"p_yes": 0.8},
)
PLATT = CalibrationMap(method="platt", params={"a": 1.0, "b": 0.0})


@pytest.fixture
def plugin_env() -> dict[str, str]:
    """What a command needs to load this file as a plugin (in a subprocess too)."""
    return {"RUBRICSVC_PLUGINS": __name__, "PYTHONPATH": str(REPO)}


def test_the_toy_backend_is_registered_with_its_capabilities() -> None:
    assert TOY_BACKEND in backend_names()
    registered = get_backend(TOY_BACKEND)
    assert registered.load() is ConstantBackend
    assert not (registered.runs_embedded_model or registered.replays_only)
    # No model_dir is passed to a backend that does not run the embedded model.
    backend = create_backend(TOY_BACKEND, model_dir="/nowhere", p_yes=0.3)
    assert isinstance(backend, ConstantBackend) and backend.p_yes == 0.3


def test_an_unknown_backend_is_refused_listing_the_registered_ones() -> None:
    with pytest.raises(Exception, match="unknown judge backend 'nope'; choose one of") as err:
        create_backend("nope")
    assert TOY_BACKEND in str(err.value) and "transformers" in str(err.value)


def test_a_judge_on_the_toy_backend_scores_through_the_cli(
    sqlite_url: str, plugin_env: dict[str, str], tmp_path: Path
) -> None:
    approve_rubrics(sqlite_url, RUBRIC, judges=(TOY_JUDGE,))
    completions = tmp_path / "completions.jsonl"
    completions.write_text(
        "".join(
            json.dumps({"prompt_external_id": PROMPT, "text": text, "external_id": f"c{i}"}) + "\n"
            for i, text in enumerate(["Keep a schedule.", "Sleep whenever."])
        )
    )
    cli_ok("completions", "add", str(completions), database_url=sqlite_url, env=plugin_env)
    made_before = len(ConstantBackend.made)

    result = cli_ok(
        "score",
        "--judge",
        TOY_JUDGE.name,
        "--via",
        "inprocess",
        "--json",
        database_url=sqlite_url,
        env=plugin_env,
    )

    report = result.json()
    assert (report["judgments"], report["computed"], report["failed"]) == (2, 2, 0)
    assert len(report["scores"]) == 2
    for scored in report["scores"]:
        assert scored["status"] == "ok"
        (criterion,) = scored["criteria"]
        assert criterion["value"] == pytest.approx(0.8)  # the toy backend's P(yes)
    if not ALWAYS_SUBPROCESS:  # the command ran in this process: the backend made here
        (made,) = ConstantBackend.made[made_before:]
        assert (made.model, made.p_yes, made.asked) == ("constant-0.8", 0.8, 2)


def test_a_mode_that_gives_probabilities_can_be_calibrated() -> None:
    calibratable = modes_that(gives_probability=True)
    assert "toy-probability" in calibratable and "toy-decoded" not in calibratable
    spec = JudgeSpec(name="toy-calibrated", mode="toy-probability", calibration=PLATT)
    assert spec.calibration == PLATT

    with pytest.raises(ValidationError) as refused:
        JudgeSpec(name="toy-calibrated", mode="toy-decoded", calibration=PLATT)
    assert (
        f"which mode toy-decoded does not give: only {', '.join(calibratable)} judges can be "
        "calibrated" in str(refused.value)
    )


def test_the_calibrate_command_asks_the_mode(sqlite_url: str, plugin_env: dict[str, str]) -> None:
    judges = (
        JudgeSpec(name="toy-prob", backend=TOY_BACKEND, mode="toy-probability"),
        JudgeSpec(name="toy-dec", backend=TOY_BACKEND, mode="toy-decoded"),
    )
    approve_rubrics(sqlite_url, RUBRIC, judges=judges)

    def calibrate(judge: str) -> str:
        return cli_error(
            "judges",
            "calibrate",
            "--judge",
            judge,
            "--labels",
            "no-such-set",
            database_url=sqlite_url,
            env=plugin_env,
        )

    refused = calibrate("toy-dec")
    calibratable = ", ".join(modes_that(gives_probability=True))
    assert f"only {calibratable} judges can be calibrated" in refused
    assert "toy-probability" in calibratable
    # Past the mode check: it is the missing label set that stops this one.
    accepted = calibrate("toy-prob")
    assert "can be calibrated" not in accepted and "no-such-set" in accepted
