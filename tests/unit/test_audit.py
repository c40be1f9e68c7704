"""The audit's arithmetic and bookkeeping, with a scripted judge (what the judge model does
with each attack is tested on the real model in tests/integration/test_audit.py)."""

from __future__ import annotations

import pytest

from rubricsvc.audit.attacks import ATTACKS, Target
from rubricsvc.audit.runner import AuditOptions, bootstrap_interval, run_audit
from rubricsvc.audit.sets import demo_items
from rubricsvc.judging.backends.scripted import ScriptedBackend
from rubricsvc.judging.config import BUILTIN_JUDGES
from rubricsvc.judging.types import ChoiceRequest

FAMILIES = {
    "master key",
    "forged verdict",
    "control tokens",
    "frame escape",
    "rubric echo",
    "grader manipulation",
    "context",
    "judge failure",
}


def test_the_library_covers_every_family_and_master_key() -> None:
    assert {a.family for a in ATTACKS} == FAMILIES
    target = Target("p", [], "weak", 100)
    texts = {a.name: a.write(target) for a in ATTACKS}
    assert {"", ":", "Solution", "Thought process:", "Let's solve this step by step."} <= set(
        texts.values()
    )
    assert len(texts["padding"].split()) > 100  # past the judge's 100 tokens
    assert len(set(texts)) == len(ATTACKS)


def test_bootstrap_interval_brackets_the_mean() -> None:
    assert bootstrap_interval([], 100, 0) == (None, None)
    assert bootstrap_interval([0.2], 100, 0) == (0.2, 0.2)
    low, high = bootstrap_interval([0.0, 0.1, 0.2, 0.3, 0.4], 2000, 0)
    assert low is not None and high is not None
    assert 0.0 <= low < 0.2 < high <= 0.4
    assert bootstrap_interval([0.0, 0.1, 0.2, 0.3, 0.4], 2000, 0) == (low, high)  # seeded


def test_an_attack_that_fools_the_judge_is_reported_with_its_inflation() -> None:
    """A judge that says yes to anything ending in "Yes" and is unsure otherwise."""

    def probs(request: ChoiceRequest) -> dict[str, float]:
        if "Yes" not in request.choices:  # an ordinal criterion: every level alike
            return {c: 1 / len(request.choices) for c in request.choices}
        judged = request.chat[-1]["content"].split("</response>")[0]
        yes = 1.0 if judged.rstrip().endswith("Yes") else 0.5
        return {"Yes": yes, "No": 1 - yes}

    items = demo_items()
    spec = BUILTIN_JUDGES["embedded"].model_copy(update={"retries": 0})
    report = run_audit(
        spec,
        lambda: ScriptedBackend(probs=probs),
        items,
        "demo",
        AuditOptions(resamples=500),
        context_tokens=50,
    )
    by_name = {a.name: a for a in report.attacks}
    assert list(by_name) == [a.name for a in ATTACKS]
    fooled = by_name["forged-verdict-prob"]
    assert fooled.mean_inflation is not None and fooled.mean_inflation > 0.1
    above = [a > s for a, s in zip(fooled.scores, report.strong_scores, strict=True)]
    assert fooled.false_positive_rate == pytest.approx(sum(above) / len(above))
    assert fooled.false_positive_rate >= 2 / 3  # the strong answers got 0.5 on judged criteria
    assert by_name["empty"].mean_inflation == pytest.approx(0.0, abs=0.05)
    assert all(sum(a.failures.values()) == 0 for a in report.attacks)
    assert report.items == [i.name for i in items]
