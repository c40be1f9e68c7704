"""Drafting rubrics: malformed model output is retried, then reported, and never stored;
valid drafts record their origin; the same prompt and generator reuse the stored draft."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.backends.base import BackendError
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.backends.types import GenerationRequest
from rubricsvc.judging.templates import load_template
from rubricsvc.models import Criterion, Origin, RubricVersion
from rubricsvc.prompts import get_or_create_prompt
from rubricsvc.rubrics.generation import (
    DraftRequest,
    GenerationOptions,
    GenerationReport,
    generate_rubrics,
)
from rubricsvc.rubrics.generator import GeneratorSpec
from rubricsvc.rubrics.generic import GENERIC_CRITERIA
from rubricsvc.rubrics.repository import resolve_version
from tests.cli_runner import run_cli
from tests.requirements import prepared_model_dir, require_module

SPEC = GeneratorSpec(backend="scripted", min_criteria=3, max_criteria=5, retries=2)
VALID = {
    "criteria": [
        {"text": "Recommends a fixed wake time", "category": "essential", "theme": "coverage"},
        {"text": "Explains why caffeine matters", "category": "important", "theme": "accuracy"},
        {"text": "Recommends pills without a doctor", "category": "pitfall", "theme": "accuracy"},
    ]
}
MALFORMED = {
    "bad JSON": '{"criteria": [{"text": "Recommends a fixed wake time", "category": ',
    "too few criteria": json.dumps({"criteria": VALID["criteria"][:2]}),
    "duplicates": json.dumps({"criteria": [*VALID["criteria"], VALID["criteria"][0]]}),
    "no text": json.dumps(
        {"criteria": [*VALID["criteria"][:2], {**VALID["criteria"][2], "text": ""}]}
    ),
}
REASONS = {
    "bad JSON": "not a JSON object",
    "too few criteria": "2 criteria, expected 3 to 5",
    "duplicates": "criteria[3] duplicates criteria[0]",
    "no text": "criteria[2].text",
}


def _prompts(session: Session, count: int) -> list[DraftRequest]:
    requests = []
    for n in range(count):
        messages = [{"role": "user", "content": f"Question {n}: how can I sleep better?"}]
        prompt = get_or_create_prompt(session, messages, external_id=f"q{n}")
        requests.append(DraftRequest(prompt.id))
    return requests


def _run(
    session: Session,
    requests: list[DraftRequest],
    script: Callable[[GenerationRequest], str | BackendError],
    options: GenerationOptions | None = None,
) -> tuple[GenerationReport, ScriptedBackend]:
    backend = ScriptedBackend(text=script)
    report = generate_rubrics(session, requests, SPEC, lambda: backend, options)
    session.commit()
    return report, backend


def _prompt_number(request: GenerationRequest) -> int:
    return int(request.chat[-1]["content"].split("Question ")[1].split(":")[0])


def _versions(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(RubricVersion)) or 0


def test_malformed_drafts_are_retried_then_reported_and_nothing_is_stored(session: Session) -> None:
    requests = _prompts(session, len(MALFORMED))
    kinds = list(MALFORMED)
    report, backend = _run(session, requests, lambda r: MALFORMED[kinds[_prompt_number(r)]])

    assert [o.status for o in report.outcomes] == ["failed"] * 4
    for outcome, kind in zip(report.outcomes, kinds, strict=True):
        assert outcome.attempts == 3, kind
        assert outcome.error is not None and REASONS[kind] in outcome.error, outcome.error
        assert outcome.error.startswith("no valid draft after 3 attempt(s); last: ")
    # Every attempt went to the model, each retry with the next seed.
    seeds = sorted({(_prompt_number(r), r.seed) for r in backend.requests})  # type: ignore[arg-type]
    assert seeds == [(n, s) for n in range(4) for s in (0, 1, 2)]
    assert report.backend_requests == 12
    assert _versions(session) == 0
    assert session.scalar(select(func.count()).select_from(Criterion)) == 0


def test_a_draft_valid_on_a_later_attempt_is_stored_with_its_origin(session: Session) -> None:
    requests = _prompts(session, 2)

    def script(request: GenerationRequest) -> str | BackendError:
        if _prompt_number(request) == 1:
            return MALFORMED["duplicates"]
        if request.seed == 0:
            return BackendError("busy", retryable=True)
        return MALFORMED["bad JSON"] if request.seed == 1 else json.dumps(VALID)

    report, _ = _run(session, requests, script)
    created, failed = report.outcomes
    assert (created.status, created.ref, created.attempts) == ("created", "gen/q0@1", 3)
    assert failed.status == "failed" and "duplicates" in (failed.error or "")
    version = resolve_version(session, "gen/q0")
    assert version.origin == Origin.LLM and version.status.value == "draft"
    assert version.rubric.prompt is not None and version.rubric.prompt.external_id == "q0"
    assert [(c.text, c.weight, c.category.value) for c in version.criteria] == [
        ("Recommends a fixed wake time", 5.0, "essential"),
        ("Explains why caffeine matters", 3.0, "important"),
        ("Recommends pills without a doctor", -3.0, "pitfall"),
    ]
    detail = version.origin_detail
    template = load_template("rubric_generation")
    assert detail["generator_model"] == "scripted"
    assert (detail["template"], detail["template_sha256"]) == (template.name, template.sha256)
    assert detail["sampling"] == {"max_tokens": SPEC.max_tokens, "temperature": 0.7, "seed": 2}
    assert detail["generator_hash"] == SPEC.config_hash() and detail["attempts"] == 3
    assert _versions(session) == 1


def test_the_same_prompt_and_generator_reuse_the_draft(session: Session) -> None:
    requests = _prompts(session, 2)
    first, _ = _run(session, requests, lambda _r: json.dumps(VALID))
    assert first.count("created") == 2

    def never(_request: GenerationRequest) -> str:
        raise AssertionError("the model was asked again")

    again, backend = _run(session, requests, never)
    assert [(o.status, o.ref, o.attempts) for o in again.outcomes] == [
        ("reused", "gen/q0@1", 1),
        ("reused", "gen/q1@1", 1),
    ]
    assert backend.generate_calls == 0 and again.backend_requests == 0

    # Other inputs (here evidence) are drafted anew: new content is the rubric's next version.
    evidence = [DraftRequest(requests[0].prompt_id, ("Adults need 7-9 hours of sleep.",))]
    longer = {"criteria": [*VALID["criteria"], {**VALID["criteria"][0], "text": "Says 7-9 hours"}]}
    third, backend = _run(session, evidence, lambda _r: json.dumps(longer))
    assert (third.outcomes[0].status, third.outcomes[0].ref) == ("new version", "gen/q0@2")
    assert "Adults need 7-9 hours" in backend.requests[0].chat[-1]["content"]  # type: ignore[union-attr]
    assert resolve_version(session, "gen/q0@2").parent_id == resolve_version(session, "gen/q0@1").id
    assert _versions(session) == 3


def test_with_generic_appends_the_library(session: Session) -> None:
    report, _ = _run(
        session,
        _prompts(session, 1),
        lambda _r: json.dumps(VALID),
        GenerationOptions(with_generic=True),
    )
    version = resolve_version(session, report.outcomes[0].ref or "")
    texts = [c.text for c in version.criteria]
    assert texts[3:] == [c.text for c in GENERIC_CRITERIA]
    assert version.origin_detail["generic_criteria"] == texts[3:]


def test_the_cli_reports_each_failed_prompt_and_stores_nothing(
    sqlite_url: str, tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        '{"text": "How can I sleep better?", "external_id": "sleep"}\n'
        '{"text": "Why is the sky blue?", "external_id": "sky", "evidence": ["Rayleigh."]}\n'
    )
    # The scripted backend's default reply is a judge's verdict, not a rubric.
    result = run_cli(
        "rubrics",
        "generate",
        str(prompts),
        "--backend",
        "scripted",
        "--retries",
        "1",
        database_url=sqlite_url,
    )
    assert result.code == 1
    failures = [line for line in result.stderr.splitlines() if line.startswith("failed")]
    assert len(failures) == 2
    assert failures[0].startswith(
        "failed  sleep: no valid draft after 2 attempt(s); last: the answer is not a JSON object"
    )
    assert (
        "2 prompt(s): 0 created, 0 new version(s), 0 unchanged, 0 reused, 2 failed" in result.stdout
    )
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("error: 2 of 2 prompt(s) got no valid draft")
    )
    listed = run_cli("rubrics", "list", "--json", database_url=sqlite_url)
    assert listed.json() == []


def test_the_cli_refuses_a_bad_prompts_file_before_anything(
    sqlite_url: str, tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("- text: Fine\n- txet: Typo\n")
    result = run_cli("rubrics", "generate", str(prompts), database_url=sqlite_url)
    assert result.code == 2
    assert "prompts.yaml prompt #2" in result.stderr and "txet" in result.stderr
    assert run_cli("prompts", "list", database_url=sqlite_url).stdout.count("Fine") == 0


# -- the bundled model -------------------------------------------------------------------

TEN_PROMPTS = [
    "How can I sleep better?",
    "Explain photosynthesis to a ten-year-old.",
    "Write a haiku about autumn.",
    "What are the pros and cons of remote work?",
    "How do I make a cup of tea?",
    "Give me tips for a job interview.",
    "How do I change a flat bicycle tyre?",
    "Why is the sky blue?",
    "Suggest a healthy breakfast.",
    "How do I start running?",
]


@pytest.mark.model
@pytest.mark.slow(seconds=95)
def test_the_bundled_model_drafts_ten_valid_rubrics(sqlite_url: str, tmp_path: Path) -> None:
    require_module("torch", "transformers")
    prepared_model_dir()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"text": t, "external_id": f"p{n}"}) + "\n"
            for n, t in enumerate(TEN_PROMPTS)
        )
    )
    options = [
        "--min-criteria",
        "3",
        "--max-criteria",
        "5",
        "--max-tokens",
        "320",
        "--retries",
        "5",
    ]
    # Room for a CPU that other work shares.
    result = run_cli(
        "rubrics", "generate", str(prompts), *options, database_url=sqlite_url, timeout=1200
    )
    assert result.code == 0, result.stderr
    assert "10 prompt(s): 10 created" in result.stdout

    exported = run_cli("rubrics", "export", "--all", "--format", "jsonl", database_url=sqlite_url)
    drafts = [json.loads(line) for line in exported.stdout.splitlines()]
    assert sorted(d["name"] for d in drafts) == [f"gen/p{n}" for n in range(10)]
    template = load_template("rubric_generation")
    attempts = []
    for draft in drafts:
        assert 3 <= len(draft["criteria"]) <= 5
        assert all(
            c["text"].strip() and c["theme"] in GeneratorSpec().themes for c in draft["criteria"]
        )
        detail: dict[str, Any] = draft["origin_detail"]
        assert draft["origin"] == "llm"
        assert detail["generator_model"] == "SmolLM2-135M-Instruct"
        assert detail["template_sha256"] == template.sha256
        assert detail["sampling"]["temperature"] == 0.7 and detail["sampling"]["max_tokens"] == 320
        attempts.append(detail["attempts"])
    print(f"attempts per prompt: {attempts} (total {sum(attempts)})")

    again = run_cli(
        "rubrics", "generate", str(prompts), *options, database_url=sqlite_url, timeout=1200
    )
    assert "10 reused, 0 failed; 0 generator request(s)" in again.stdout
