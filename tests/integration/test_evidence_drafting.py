"""Evidence-grounded drafting: `rubrics generate --stored-evidence` drafts from the documents
stored with a prompt's completions (search results for it), numbered in the generator's prompt;
each drafted criterion names the document it came from, stored with the criterion (its content
hash) for a reviewer to check, and exported with the rubric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.backends.types import GenerationRequest
from rubricsvc.documents import document_hash
from rubricsvc.prompts import get_or_create_prompt
from rubricsvc.rubrics.draft_inputs import requests_from_database
from rubricsvc.rubrics.generation import DraftRequest, EvidenceDocument, generate_rubrics
from rubricsvc.rubrics.generator import GeneratorSpec
from rubricsvc.rubrics.repository import resolve_version
from tests.cli_runner import cli_ok, run_cli
from tests.workers_harness import require_embedded_model

PROMPT = "How many people live in Lyon, and what rivers run through it?"
POPULATION = {
    "label": "1",
    "url": "https://www.insee.fr/lyon",
    "title": "Census 2021",
    "text": "According to the 2021 census, the commune of Lyon had 522,250 inhabitants.",
}
RIVERS = {
    "label": "2",
    "url": "https://en.wikipedia.org/wiki/Lyon",
    "title": "Lyon",
    "text": "Lyon lies at the confluence of the Rhône and the Saône.",
}
SPEC = GeneratorSpec(backend="scripted", min_criteria=3, max_criteria=5, retries=1)


def _hash(document: dict[str, str]) -> str:
    return document_hash(document["url"], document["title"], document["text"])


def _completions(tmp_path: Path) -> Path:
    """Two answers to the prompt that list the two documents (shared, stored once)."""
    path = tmp_path / "completions.jsonl"
    records = [
        {"prompt": PROMPT, "prompt_external_id": "lyon", "text": "About 520,000.",
         "documents": [POPULATION, RIVERS]},
        {"prompt_external_id": "lyon", "text": "The Rhône and the Saône.", "documents": [RIVERS]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_each_drafted_criterion_names_the_document_it_came_from(session: Session) -> None:
    prompt = get_or_create_prompt(
        session, [{"role": "user", "content": PROMPT}], external_id="lyon"
    )
    documents = tuple(
        EvidenceDocument(d["text"], d["url"], d["title"]) for d in (POPULATION, RIVERS)
    )
    reply = {
        "criteria": [
            {"text": "Gives the population as about 522,000", "category": "essential",
             "theme": "accuracy", "evidence": 1},
            {"text": "Names the Rhône and the Saône", "category": "important",
             "theme": "coverage", "evidence": 2},
            {"text": "Answers both questions in order", "category": "optional",
             "theme": "structure", "evidence": 0},
        ]
    }  # fmt: skip
    shown: list[GenerationRequest] = []

    def script(request: GenerationRequest) -> str:
        shown.append(request)
        return json.dumps(reply)

    backend = ScriptedBackend(text=script)
    report = generate_rubrics(session, [DraftRequest(prompt.id, documents)], SPEC, lambda: backend)
    assert [o.status for o in report.outcomes] == ["created"]
    (request,) = shown
    user = request.chat[-1]["content"]
    # Numbered, with title and URL, and the instruction to point at them.
    assert "Evidence document 1 (facts a good response may use):" in user
    assert f"Title: Lyon\nURL: {RIVERS['url']}\n{RIVERS['text']}" in user
    assert '"evidence": the number of the evidence document' in user
    schema = request.json_schema
    assert schema is not None
    item = schema["properties"]["criteria"]["items"]
    assert item["properties"]["evidence"] == {"type": "string", "enum": ["0", "1", "2"]}
    assert "evidence" in item["required"]

    version = resolve_version(session, report.outcomes[0].ref or "")
    assert [c.evidence for c in version.criteria] == [
        [_hash(POPULATION)],
        [_hash(RIVERS)],
        None,
    ]
    assert version.origin_detail["inputs"]["evidence_documents"] == 2

    # A pointer past the last document refuses the draft (and it is tried again).
    wrong = {"criteria": [{**c, "evidence": 3} for c in reply["criteria"]]}
    other = get_or_create_prompt(
        session, [{"role": "user", "content": "Another?"}], external_id="other"
    )
    failed = generate_rubrics(
        session,
        [DraftRequest(other.id, documents)],
        SPEC,
        lambda: ScriptedBackend(text=lambda _r: json.dumps(wrong)),
    )
    (outcome,) = failed.outcomes
    assert outcome.status == "failed" and "evidence: 3 is not a document number" in (
        outcome.error or ""
    )


def test_stored_evidence_is_the_documents_of_the_prompts_completions(
    sqlite_url: str, tmp_path: Path
) -> None:
    cli_ok("completions", "add", str(_completions(tmp_path)), database_url=sqlite_url)
    from rubricsvc import db

    engine = db.make_engine(sqlite_url)
    try:
        with db.session_scope(engine) as session:
            (request,) = requests_from_database(session, ["lyon"], stored_evidence=True)
            # Each document once, in the order the completions first list them.
            assert [d.url for d in request.documents()] == [POPULATION["url"], RIVERS["url"]]
            (plain,) = requests_from_database(session, ["lyon"])
            assert plain.evidence == ()
    finally:
        engine.dispose()


@pytest.mark.model
@pytest.mark.slow
def test_the_bundled_generator_drafts_from_stored_documents(
    sqlite_url: str, tmp_path: Path
) -> None:
    require_embedded_model()
    cli_ok("completions", "add", str(_completions(tmp_path)), database_url=sqlite_url)
    options = ["--min-criteria", "3", "--max-criteria", "5", "--max-tokens", "400"]
    result = run_cli(
        "rubrics", "generate", "--prompt", "lyon", "--stored-evidence", *options,
        database_url=sqlite_url, timeout=1200,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert "1 prompt(s): 1 created" in result.stdout
    exported = cli_ok("rubrics", "export", "gen/lyon", database_url=sqlite_url).stdout
    draft = json.loads(exported) if exported.lstrip().startswith("{") else None
    assert draft is not None, exported
    assert draft["origin_detail"]["inputs"]["evidence_documents"] == 2
    hashes = {_hash(POPULATION), _hash(RIVERS)}
    pointed = [c.get("evidence", []) for c in draft["criteria"]]
    # Every pointer the model wrote is one of the two documents (the schema allows no other).
    assert all(set(p) <= hashes and len(p) <= 1 for p in pointed)
    print(f"criteria pointing at a document: {sum(1 for p in pointed if p)} of {len(pointed)}")


def test_the_version_page_shows_where_each_criterion_came_from(sqlite_url: str) -> None:
    from fastapi.testclient import TestClient

    from rubricsvc.api import create_app
    from rubricsvc.apikeys import create_key
    from rubricsvc.db import make_engine, session_scope
    from rubricsvc.documents import DocumentRecord, labelled, resolve_documents
    from rubricsvc.rubrics.schemas import RubricSpec
    from rubricsvc.rubrics.versions import save_rubric
    from tests.api_harness import settings_for
    from tests.integration.test_ui import sign_in, version_id

    hostile = {**RIVERS, "url": "javascript:alert(1)", "title": "Rivers"}
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        secret = create_key(session, "ana", ["read"]).secret
        records = [
            DocumentRecord(**{k: d[k] for k in ("url", "title", "text")})
            for d in (POPULATION, hostile)
        ]
        resolve_documents(session, labelled(records), "test")
        spec = {
            "name": "gen/lyon",
            "prompt": {"text": PROMPT},
            "origin": "llm",
            "criteria": [
                {"text": "Gives the population", "weight": 3, "evidence": [_hash(POPULATION)]},
                {"text": "Names the rivers", "weight": 2, "evidence": [_hash(hostile)]},
                {"text": "Is short", "weight": 1},
            ],
        }
        save_rubric(session, RubricSpec.model_validate(spec))
    app = create_app(settings_for(sqlite_url), engine)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as client:
        sign_in(client, secret)
        page = client.get(f"/ui/versions/{version_id(sqlite_url, 'gen/lyon@1')}").text
    engine.dispose()
    assert f'From: <a href="{POPULATION["url"]}" rel="noopener noreferrer">Census 2021</a>' in page
    # A document whose URL is not http(s) is named, never linked.
    assert "From: Rivers</div>" in page and "javascript:" not in page
    assert page.count("From: ") == 2
