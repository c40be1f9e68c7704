"""The promotion gate on a student that fails on the hard items: right wherever it answered,
better there than its base, and refused because its verdicts cover too few of the labels.
Both judges are scripted: the test is about what the gate measures, not about a model."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.backends.base import BackendError, JudgeBackend
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.backends.types import ChoiceRequest
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.distill.examples import Target
from rubricsvc.distill.gate import held_out_label_set, run_gate
from rubricsvc.distill.training import DistillSettings
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import Completion, JudgeGate, JudgeGateStatus
from rubricsvc.rubrics.versions import save_rubric
from rubricsvc.validation.evaluation import EvaluationOptions
from tests.helpers import rubric_spec

STUDENT = JudgeSpec(name="student", backend="scripted", model="/runs/student/model", retries=0)
BASE = JudgeSpec(name="base", backend="scripted", model="/models/base", retries=0)
MET = "Recommends a regular schedule"  # the teacher's only criterion met


def _student(request: ChoiceRequest) -> dict[str, float] | BackendError:
    shown = request.chat[-1]["content"]
    if "hard answer" in shown:
        return BackendError("the student cannot read this one", retryable=False)
    return {"Yes": 0.9, "No": 0.1} if MET in shown else {"Yes": 0.1, "No": 0.9}


def _factory_of(spec: JudgeSpec) -> Callable[[], JudgeBackend]:
    if spec.name == STUDENT.name:
        return lambda: ScriptedBackend(probs=_student, model=str(spec.model))
    return lambda: ScriptedBackend(model=str(spec.model))  # "met", whatever it is shown


def _targets(session: Session) -> list[Target]:
    """Four prompts of three criteria, an easy and a hard answer each; the teacher says only
    the schedule criterion is met."""
    versions = [save_rubric(session, rubric_spec(f"gate/p{n}")).version for n in range(4)]
    version_of = {version.rubric.prompt_id: version for version in versions}
    records = [
        ("test", CompletionRecord(prompt_external_id=f"gate/p{n}-prompt", text=f"A {kind} {n}"))
        for n in range(4)
        for kind in ("easy answer", "hard answer")
    ]
    add_completions(session, records)
    targets = []
    for completion in session.scalars(select(Completion).order_by(Completion.id)):
        for criterion in version_of[completion.prompt_id].criteria:
            value = 1.0 if criterion.text == MET else 0.0
            targets.append(Target(completion.prompt_id, completion.id, criterion.id, value))
    return targets


def test_a_student_that_fails_on_half_the_labels_is_refused_for_its_coverage(
    session: Session,
) -> None:
    held_out = held_out_label_set(session, "held-out", "test", "teacher", _targets(session))
    options = EvaluationOptions(resamples=200)
    settings = DistillSettings(min_agreement=0.7, min_gain=0.0)
    report = run_gate(session, STUDENT, BASE, held_out, _factory_of, settings, options)

    student = report["student"]
    assert report["decision"] == "rejected"
    assert (student["n_labelled"], student["n_judged"], student.get("coverage")) == (24, 12, 0.5)
    # Where it answered, the student is right on every label and beats the base (which says
    # "met" to all three criteria, right on one): only its coverage refuses it.
    assert student["agreement"] == 1.0 and report["gain"] is not None
    assert report["gain_ci"] is not None and report["gain_ci"][0] > 0.0
    assert report["min_coverage"] == 0.95
    assert report["reasons"] == [
        "the student's verdicts cover 0.500 of the held-out labels, below min_coverage 0.95: "
        "its agreement is measured only where it answered"
    ]
    gate = session.scalars(select(JudgeGate).order_by(JudgeGate.id.desc())).first()
    assert gate is not None and gate.status == JudgeGateStatus.REJECTED

    # A floor at its coverage lets the same student through.
    lenient = settings.model_copy(update={"min_coverage": 0.5})
    again = run_gate(session, STUDENT, BASE, held_out, _factory_of, lenient, options)
    assert again["decision"] == "approved"
