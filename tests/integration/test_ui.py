"""The review pages through the app itself (no browser): sessions, CSRF, edits saved as new
versions, field errors that store nothing, review scopes and self-review, the queue's filters.
The browser tests (tests/browser/) drive the same pages in Chromium."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.api import create_app
from rubricsvc.apikeys import create_key, revoke_key
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.db import make_engine, session_scope
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.models import Completion, RubricVersion, VersionStatus
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import approve, save_rubric
from rubricsvc.scoring.scorer import ScoreOptions, score
from rubricsvc.scoring.selection import Selection
from tests.api_harness import WORD_RUBRIC, settings_for
from tests.helpers import detached_versions, read_database

GENERATOR = {"generator_model": "SmolLM2-135M-Instruct", "template": "draft_rubric.txt"}


def draft(name: str, prompt: str, texts: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "prompt": {"text": prompt, "tags": {"topic": "health"}},
        "criteria": [{"text": t, "weight": w} for t, w in zip(texts, [5, 3, 2, -4], strict=False)],
        **extra,
    }


SLEEP = draft(
    "ui/sleep",
    "How can I sleep better?",
    ["Recommends a regular sleep schedule", "Mentions limiting caffeine", "Suggests a dark room"],
    origin="llm",
    origin_detail=GENERATOR,
)
ESSAY = draft("ui/essay", "Write about the sea.", ["Has a clear thesis", "Uses vivid images"])


@pytest.fixture
def ui(database_url: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """An app with two drafts and keys: a reviewer, an author without review, a reader."""
    engine = make_engine(database_url)
    secrets: dict[str, str] = {}
    with session_scope(engine) as session:
        for name, scopes in {
            "ana": ["read", "author", "review"],
            "ben": ["read", "author"],
            "cy": ["read"],
        }.items():
            secrets[name] = create_key(session, name, scopes).secret
        for data in (SLEEP, ESSAY):
            save_rubric(session, RubricSpec.model_validate(data))
    app = create_app(settings_for(database_url), engine)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as client:
        yield client, secrets
    engine.dispose()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def sign_in(client: TestClient, secret: str) -> None:
    client.cookies.clear()
    page = client.get("/ui/login")
    answer = client.post(
        "/ui/login", data={"api_key": secret, "csrf_token": csrf_of(page.text), "next": "/ui/queue"}
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/ui/queue"


def version_id(database_url: str, ref: str) -> int:
    name, number = ref.split("@")

    def read(session: Session) -> int:
        found = session.scalar(
            select(RubricVersion.id)
            .join(RubricVersion.rubric)
            .where(RubricVersion.number == int(number))
            .where(RubricVersion.rubric.has(name=name))
        )
        assert found is not None
        return found

    return int(read_database(database_url, read))


def versions_of(database_url: str, name: str) -> list[RubricVersion]:
    result: list[RubricVersion] = read_database(
        database_url, lambda session: detached_versions(session, name)
    )
    return result


def test_pages_need_a_session_and_forms_their_token(
    ui: tuple[TestClient, dict[str, str]], database_url: str
) -> None:
    client, secrets = ui
    assert client.get("/ui/queue").headers["location"] == "/ui/login?next=%2Fui%2Fqueue"
    sleep = version_id(database_url, "ui/sleep@1")
    # A post without a session is refused, whatever it carries.
    refused = client.post(f"/ui/versions/{sleep}/approve", data={"csrf_token": "x", "note": "ok"})
    assert refused.status_code == 403 and "sign in again" in refused.text

    # The sign-in form has its own token; a post without it is refused, a bad key is named.
    login = client.get("/ui/login")
    assert client.post("/ui/login", data={"api_key": secrets["ana"]}).status_code == 403
    bad = client.post("/ui/login", data={"api_key": "rsk_nope", "csrf_token": csrf_of(login.text)})
    assert bad.status_code == 401 and "Unknown or revoked API key." in bad.text
    sign_in(client, secrets["ana"])
    cookie = next(c for c in client.cookies.jar if c.name == "rubricsvc_session")
    assert cookie.has_nonstandard_attr("HttpOnly")
    assert secrets["ana"] not in (cookie.value or "")  # the key itself never reaches the browser

    queue = client.get("/ui/queue")
    assert queue.status_code == 200
    assert re.search(r'id="who"[^>]*>ana<', queue.text) and "ui/sleep@1" in queue.text
    assert queue.headers["x-frame-options"] == "DENY"

    # A form post with a wrong or missing token changes nothing.
    for data in ({"note": "ok"}, {"note": "ok", "csrf_token": "0" * 64}):
        answer = client.post(f"/ui/versions/{sleep}/approve", data=data)
        assert answer.status_code == 403 and "security token" in answer.text
    assert versions_of(database_url, "ui/sleep")[0].status == VersionStatus.DRAFT

    # A tampered cookie is no session.
    value = cookie.value or ""
    client.cookies.clear()
    client.cookies.set("rubricsvc_session", value[:-2] + ("AA" if value[-2:] != "AA" else "BB"))
    assert client.get("/ui/queue").status_code == 303
    client.cookies.clear()
    client.cookies.set("rubricsvc_session", value)  # the same cookie, untouched, still works
    assert client.get("/ui/queue").status_code == 200

    # Revoking the key ends its sessions at once.
    sign_in(client, secrets["ana"])
    assert client.get("/ui/queue").status_code == 200
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        revoke_key(session, "ana")
    engine.dispose()
    assert client.get("/ui/queue").status_code == 303


def edit_form(html: str) -> dict[str, str]:
    """The edit form's fields as the page filled them in."""
    fields: dict[str, str] = {}
    for name, value in re.findall(r'<input[^>]*name="(c-\d+-\w+)"[^>]*value="([^"]*)"', html):
        fields[name] = value
    for name, value in re.findall(
        r'<textarea[^>]*name="(c-\d+-\w+)"[^>]*>([^<]*)</textarea>', html
    ):
        fields[name] = value
    for name, block in re.findall(
        r'<select[^>]*name="(c-\d+-\w+)"[^>]*>(.*?)</select>', html, re.S
    ):
        chosen = re.search(r'<option value="([^"]*)" selected', block)
        fields[name] = chosen.group(1) if chosen else ""
    fields["csrf_token"] = csrf_of(html)
    return fields


def test_an_edit_is_a_new_version_whose_parent_is_the_edited_one(
    ui: tuple[TestClient, dict[str, str]], database_url: str
) -> None:
    client, secrets = ui
    sign_in(client, secrets["ben"])
    sleep = version_id(database_url, "ui/sleep@1")
    page = client.get(f"/ui/versions/{sleep}/edit")
    assert page.status_code == 200
    form = edit_form(page.text)
    assert form["c-0-text"] == "Recommends a regular sleep schedule" and form["c-3-source"] == "new"

    # A bad weight: the error sits next to the weight field, and nothing is stored.
    bad = {**form, "c-1-weight": "heavy"}
    answer = client.post(f"/ui/versions/{sleep}/edit", data=bad)
    assert answer.status_code == 422
    assert 'id="c-1-weight-error"' in answer.text
    assert 'aria-describedby="c-1-weight-error"' in answer.text
    assert len(versions_of(database_url, "ui/sleep")) == 1

    # Rewrite one, remove one, move the last first, add a pitfall.
    edited = {
        **form,
        "c-0-text": "Recommends going to bed and waking at the same times",
        "c-1-remove": "on",
        "c-2-position": "0",
        "c-3-text": "Recommends sleeping pills without a doctor",
        "c-3-weight": "-4",
        "note": "tightened the schedule criterion",
    }
    saved = client.post(f"/ui/versions/{sleep}/edit", data=edited)
    assert saved.status_code == 303, saved.text
    first, second = versions_of(database_url, "ui/sleep")
    assert saved.headers["location"] == f"/ui/versions/{second.id}"
    assert second.parent_id == first.id and second.status == VersionStatus.DRAFT
    assert [c.text for c in second.criteria] == [
        "Suggests a dark room",
        "Recommends going to bed and waking at the same times",
        "Recommends sleeping pills without a doctor",
    ]
    assert [c.weight for c in second.criteria] == [2, 5, -4]
    assert second.criteria[2].category.value == "pitfall"
    assert second.origin.value == "human"
    assert second.origin_detail == {"saved_by": "ben", "edited_from": "ui/sleep@1"}
    assert second.note == "tightened the schedule criterion"
    # The old version is as it was.
    assert [c.text for c in first.criteria] == [t["text"] for t in SLEEP["criteria"]]

    # The new page tells what was saved; the diff shows it against the parent.
    shown = client.get(saved.headers["location"])
    assert "Saved ui/sleep@2 (a draft; its parent is ui/sleep@1)." in shown.text
    diff = client.get(f"/ui/versions/{second.id}/diff", params={"against": first.id})
    assert diff.status_code == 200
    assert diff.text.count('class="diff-removed"') == 2  # the rewritten and the removed one
    assert diff.text.count('class="diff-added"') == 2  # the rewritten and the new pitfall

    # An edit of the older version (the newer one exists) is the older one's child.
    again = client.post(
        f"/ui/versions/{first.id}/edit", data={**form, "c-2-text": "Suggests a dark, cool room"}
    )
    assert again.status_code == 303
    assert versions_of(database_url, "ui/sleep")[2].parent_id == first.id

    # A reader cannot edit.
    sign_in(client, secrets["cy"])
    refused = client.get(f"/ui/versions/{sleep}/edit")
    assert refused.status_code == 403 and "lacks the author scope" in refused.text


def test_reviewing_needs_the_review_scope_and_another_person(
    ui: tuple[TestClient, dict[str, str]], database_url: str
) -> None:
    client, secrets = ui
    sleep = version_id(database_url, "ui/sleep@1")
    # ben (author, no review scope): the button is disabled, and a post is refused.
    sign_in(client, secrets["ben"])
    page = client.get(f"/ui/versions/{sleep}")
    assert 'id="review-refused"' in page.text and "lacks the review scope" in page.text
    refused = client.post(
        f"/ui/versions/{sleep}/approve", data={"csrf_token": csrf_of(page.text), "note": "mine"}
    )
    assert refused.status_code == 403 and "lacks the review scope" in refused.text
    assert versions_of(database_url, "ui/sleep")[0].status == VersionStatus.DRAFT

    # ana edits it: her version is hers, so she cannot approve it ...
    sign_in(client, secrets["ana"])
    form = edit_form(client.get(f"/ui/versions/{sleep}/edit").text)
    client.post(f"/ui/versions/{sleep}/edit", data={**form, "c-0-weight": "6"})
    mine = versions_of(database_url, "ui/sleep")[1]
    page = client.get(f"/ui/versions/{mine.id}")
    assert "You saved this version: another reviewer must approve it." in page.text
    refused = client.post(
        f"/ui/versions/{mine.id}/approve", data={"csrf_token": csrf_of(page.text)}
    )
    assert refused.status_code == 403 and "another reviewer must approve it" in refused.text

    # ... but she can approve the LLM draft; her key's name is the reviewer on record.
    page = client.get(f"/ui/versions/{sleep}")
    approved = client.post(
        f"/ui/versions/{sleep}/approve",
        data={"csrf_token": csrf_of(page.text), "note": "clear and checkable"},
    )
    assert approved.status_code == 303
    first = versions_of(database_url, "ui/sleep")[0]
    assert (first.status, first.reviewed_by, first.review_note) == (
        VersionStatus.APPROVED,
        "ana",
        "clear and checkable",
    )
    assert "Approved ui/sleep@1." in client.get(approved.headers["location"]).text


def test_the_api_takes_the_reviewer_from_the_key(database_url: str) -> None:
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        author = create_key(session, "ben", ["author"]).secret
        reviewer = create_key(session, "ana", ["review"]).secret
    app = create_app(settings_for(database_url), engine)
    with TestClient(app) as client:
        saved = client.post(
            "/v1/rubrics", json=ESSAY, headers={"Authorization": f"Bearer {author}"}
        )
        assert saved.status_code == 201
        url = "/v1/rubrics/ui/essay/versions/1/approve"
        assert client.post(url, headers={"Authorization": f"Bearer {author}"}).status_code == 403
        answer = client.post(
            url, json={"note": "fine"}, headers={"Authorization": f"Bearer {reviewer}"}
        )
        assert answer.status_code == 200, answer.text
        assert (answer.json()["reviewed_by"], answer.json()["review_note"]) == ("ana", "fine")
    engine.dispose()


def test_self_review_is_refused_unless_allowed(database_url: str) -> None:
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        both = create_key(session, "dee", ["author", "review"]).secret
    for allowed, status in ((False, 403), (True, 200)):
        app = create_app(settings_for(database_url, allow_self_review=allowed), engine)
        headers = {"Authorization": f"Bearer {both}"}
        with TestClient(app) as client:
            spec = {**ESSAY, "name": f"ui/essay-{allowed}".lower()}
            assert client.post("/v1/rubrics", json=spec, headers=headers).status_code == 201
            answer = client.post(f"/v1/rubrics/{spec['name']}/versions/1/approve", headers=headers)
            assert answer.status_code == status, answer.text
    engine.dispose()


def test_the_queue_filters_and_counts_in_the_database(
    ui: tuple[TestClient, dict[str, str]], database_url: str
) -> None:
    client, secrets = ui
    sign_in(client, secrets["cy"])
    everything = client.get("/ui/queue").text
    assert "2 draft versions: 1 human, 1 llm" in " ".join(everything.split())
    llm = client.get("/ui/queue", params={"origin": "llm"}).text
    assert "ui/sleep@1" in llm and "ui/essay@1" not in llm
    by_generator = client.get("/ui/queue", params={"generator": "SmolLM2-135M-Instruct"}).text
    assert "ui/sleep@1" in by_generator and "ui/essay@1" not in by_generator
    assert "ui/essay@1" in client.get("/ui/queue", params={"tag": "topic=health"}).text
    assert "ui/essay@1" not in client.get("/ui/queue", params={"tag": "topic=law"}).text
    assert "ui/sleep@1" not in client.get("/ui/queue", params={"status": "approved"}).text
    bad_age = client.get("/ui/queue", params={"max_age_days": "soon"})
    assert bad_age.status_code == 200 and 'id="max_age_days-error"' in bad_age.text

    def count(session: Session) -> int:
        return int(session.scalar(select(func.count(RubricVersion.id))) or 0)

    assert read_database(database_url, count) == 2  # reading changed nothing


def test_scored_pages_show_verdicts_analytics_and_judges(database_url: str) -> None:
    """Score two answers of one prompt against a rubric of checks (no model needed), then read
    the completion, comparison, analytics and judges pages."""
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        reader = create_key(session, "cy", ["read"]).secret
        scorer = create_key(session, "trainer", ["score"]).secret
        approve(session, save_rubric(session, RubricSpec.model_validate(WORD_RUBRIC)).version)
    app = create_app(settings_for(database_url), engine)
    with TestClient(app, follow_redirects=False) as client:
        answers = ["The sea is blue and calm today.", "Grey waves roll in all day."]
        rewarded = client.post(
            "/v1/rewards",
            json={"items": [{"prompt_id": "api-sea", "completion": a} for a in answers]},
            headers={"Authorization": f"Bearer {scorer}"},
        )
        assert rewarded.status_code == 200, rewarded.text
        assert rewarded.json()["rewards"] == [pytest.approx(1.0), pytest.approx(0.25)]
        ids = [r["completion_id"] for r in rewarded.json()["results"]]
        sign_in(client, reader)

        blue = client.get(f"/ui/completions/{ids[0]}")
        assert blue.status_code == 200
        rows = re.findall(r'<tr class="verdict verdict-check">(.*?)</tr>', blue.text, re.S)
        assert len(rows) == 2 and all("a deterministic check, no judge" in r for r in rows)
        assert "Uses the word blue" in rows[0] and ">pass<" in rows[0]
        assert "1.00" in re.search(r'<table class="scores">.*?</table>', blue.text, re.S).group(0)  # type: ignore[union-attr]

        both = client.get(f"/ui/completions/{ids[0]}/compare", params={"with": ids[1]})
        assert both.status_code == 200 and "Grey waves" in both.text and "0.25" in both.text

        version = version_id(database_url, "api/blue-sea@1")
        page = client.get(f"/ui/versions/{version}/analytics")
        assert page.status_code == 200 and 'id="analytics-chart"' in page.text
        stats = re.findall(r'<tr class="criterion-stats ?([\w-]*)">(.*?)</tr>', page.text, re.S)
        assert [s[0] for s in stats] == ["", "never-varies"]  # every answer is short
        assert "Uses the word blue" in stats[0][1] and "1.00" in stats[0][1]  # spread 1

        judges = client.get("/ui/judges")
        assert judges.status_code == 200
        assert "Not validated: <code>rubricsvc judges evaluate" in judges.text
        assert client.get("/ui/completions/999999").status_code == 404
    engine.dispose()


def test_a_reasoning_judges_words_are_on_the_completion_page(database_url: str) -> None:
    """A judge that writes reasons (criterion-text, scripted here: the page is under test, not
    the verdict) has them shown beside each verdict."""
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        reader = create_key(session, "cy", ["read"]).secret
        version = save_rubric(session, RubricSpec.model_validate(ESSAY)).version
        approve(session, version, "tester")
        add_completions(
            session,
            [
                (
                    "test",
                    CompletionRecord(prompt="Write about the sea.", text="The sea is a mirror."),
                )
            ],
        )
        spec = JudgeSpec(
            name="scripted-reasons",
            backend="scripted",
            model="reasons",
            mode=VerdictMode.CRITERION_TEXT,
        )
        reasons = ScriptedBackend(
            text=lambda r: (
                "It states one idea and keeps to it.\nVERDICT: YES"
                if "thesis" in str(r.chat[-1]["content"])
                else "No image beyond a single metaphor.\nVERDICT: NO"
            )
        )
        score(session, spec, Selection(version_ids=(version.id,)), ScoreOptions(), lambda: reasons)
        completion_id = session.scalars(select(Completion.id)).one()
    app = create_app(settings_for(database_url), engine)
    with TestClient(app, follow_redirects=False) as client:
        sign_in(client, reader)
        page = client.get(f"/ui/completions/{completion_id}").text
        rows = re.findall(r'<tr class="verdict verdict-ok">(.*?)</tr>', page, re.S)
        assert len(rows) == 2
        assert "Has a clear thesis" in rows[0] and "It states one idea and keeps to it." in rows[0]
        assert ">yes<" in rows[0].lower() and "No image beyond a single metaphor." in rows[1]
    engine.dispose()
