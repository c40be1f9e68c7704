"""The review pages under attack, in Chromium against `rubricsvc serve` and PostgreSQL: markup
stored where a page shows outside text (criterion text, explanation and theme, the rubric's
title and name, the prompt and its id, a response, a document's title and `javascript:` link,
a reviewer's note, a judge's name, model and reasoning, a generator's name) is shown as text on
every page that shows it (queue, version, diff, analytics, edit, completion, judges), and no
injected script runs: a dialog listener and a console listener watch each page, and the DOM
holds no element the payloads would have made. Bidirectional overrides show as markers.

Everything is stored through the project's own doors (the services and the CLI, a scripted
judge whose reasoning is a payload), so the pages show what any user could have put there.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.documents import document_hash
from rubricsvc.models import Completion
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import approve, save_rubric
from tests.browser.conftest import REVIEWER, UiServer
from tests.browser.test_review_workbench import sign_in
from tests.cli_runner import cli_ok

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Dialog, Page

pytestmark = pytest.mark.postgres


def payload(where: str, kinds: str = "sivl") -> str:
    """Markup that would run a script named after ``where`` if a page let it through: a script
    element (s), an image's onerror (i), an SVG's onload and script (v), a javascript: link
    (l)."""
    made = {
        "s": f"<script>alert('{where}')</script>",
        "i": f"<img src=x onerror=alert('{where}')>",
        "v": f"<svg onload=alert('{where}')><script>alert('{where}')</script></svg>",
        "l": f"<a href=\"javascript:alert('{where}')\">{where}</a>",
    }
    return " ".join(made[kind] for kind in kinds)


CRITERION = payload("criterion") + " Uses the word blue"
CRITERION_2 = payload("criterion-two") + " Stays \u202eesrever\u202c short"
EXPLANATION = payload("explanation")
THEME = payload("theme", "il")
TITLE = payload("title")
PROMPT = payload("prompt") + " Write one sentence about the sea."
PROMPT_ID = "xss " + payload("prompt-id", "il")
RESPONSE = payload("response") + " The sea is blue."
NOTE = payload("note")
GENERATOR = payload("generator")
DOCUMENT = {"text": "The sea is blue.", "title": payload("document"), "url": "javascript:alert(1)"}
JUDGE_MODEL = payload("model")
REASONING = payload("reasoning") + " It does."
CHANGED = payload("changed") + " Uses the word blue, twice"


@dataclass(frozen=True)
class Hostile:
    """What the attack stored: the versions, the completion, the judge's name."""

    first: int  # version 1: approved, scored
    second: int  # version 2: a draft, its criteria changed
    completion: int
    judge: str
    name: str


def _criteria(first: str) -> list[dict[str, Any]]:
    evidence = document_hash(DOCUMENT["url"], DOCUMENT["title"], DOCUMENT["text"])
    return [
        {"text": first, "weight": 3, "explanation": EXPLANATION, "theme": THEME,
         "evidence": [evidence]},
        {"text": CRITERION_2, "weight": 1},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def hostile(ui_server: UiServer, tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    """Payloads stored through the project's doors: a completion with a document (CLI), a
    rubric of two versions with a review note (services), scored by a scripted judge whose
    reasoning is a payload (CLI)."""
    folder = tmp_path_factory.mktemp("hostile")
    url = ui_server.database_url
    tag = uuid.uuid4().hex[:8]
    name = f"xss-{tag}/javascript:alert"
    prompt_id = f"{PROMPT_ID} {tag}"
    completions = folder / "completions.jsonl"
    record = {
        "prompt_external_id": prompt_id,
        "prompt": PROMPT,
        "text": RESPONSE,
        "external_id": f"xss-{tag}",
        "documents": [DOCUMENT],
    }
    completions.write_text(json.dumps(record) + "\n", encoding="utf-8")
    cli_ok("completions", "add", str(completions), database_url=url)

    spec: dict[str, Any] = {
        "name": name,
        "title": TITLE,
        "prompt": {"text": PROMPT, "external_id": prompt_id},
        "criteria": _criteria(CRITERION),
        "origin": "llm",
        "origin_detail": {"generator_model": GENERATOR},
    }
    with db.session_scope(ui_server.engine) as session:
        first = save_rubric(session, RubricSpec.model_validate(spec)).version
        approve(session, first, "demo", NOTE)
        changed = {**spec, "criteria": _criteria(CHANGED)}
        second = save_rubric(session, RubricSpec.model_validate(changed)).version
        ids = (first.id, second.id)

    # No colon in a judge's name on the command line (NAME:MODE), so no javascript: here.
    judge = f"xss-judge-{tag} <img src=x onerror=alert('judge')>"
    judge_file = folder / "judge.json"
    judge_spec = {
        "name": judge,
        "backend": "scripted",
        "model": JUDGE_MODEL,
        "mode": "criterion-text",
        "backend_options": {"reply": f"{REASONING}\nVERDICT: YES"},
    }
    judge_file.write_text(json.dumps(judge_spec), encoding="utf-8")
    cli_ok("judges", "add", str(judge_file), database_url=url)
    cli_ok("score", "--judge", judge, "--prompt", prompt_id, "--no-breakdown", database_url=url)

    with Session(ui_server.engine) as session:
        completion = session.scalar(
            select(Completion.id).where(Completion.external_id == record["external_id"])
        )
        assert completion is not None
    return Hostile(ids[0], ids[1], completion, judge, name)


class Watched:
    """A page with listeners: every dialog (dismissed) and every console error or page error."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", self._dialog)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))

    def _dialog(self, dialog: Dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _console(self, message: ConsoleMessage) -> None:
        # The browser asks for /favicon.ico on its own; there is none (a 404 is no script).
        if message.type == "error" and "favicon" not in (message.location or {}).get("url", ""):
            self.errors.append(message.text)


# What a payload would have made in the DOM: any of these is an injection.
INJECTED = """() => {
  const found = [];
  for (const el of document.querySelectorAll('*')) {
    for (const attr of el.getAttributeNames()) {
      if (attr.toLowerCase().startsWith('on')) found.push(`${el.tagName} ${attr}`);
    }
    const href = el.getAttribute('href') || '';
    if (/^\\s*javascript:/i.test(href)) found.push(`${el.tagName} href=${href}`);
  }
  for (const s of document.querySelectorAll('script')) {
    if (s.getAttribute('src') !== '/ui/static/ui.js') found.push('inline script');
  }
  for (const svg of document.querySelectorAll('svg')) {
    if (svg.id !== 'analytics-chart') found.push('svg');
  }
  for (const img of document.querySelectorAll('img, iframe, object, embed')) found.push(img.tagName);
  return found;
}"""


def _visit(watched: Watched, url: str, shown: Sequence[str], *, fields: Sequence[str] = ()) -> None:
    """Open ``url``: every text of ``shown`` is on the page as text (or, for ``fields``, as a
    form field's value), no element was injected, no script ran."""
    page = watched.page
    response = page.goto(url)
    assert response is not None and response.status == 200, url
    page.wait_for_load_state("load")
    text = page.evaluate("() => document.body.innerText")
    for expected in shown:
        assert expected in text, f"{url}: {expected!r} is not shown as text"
    values = page.evaluate(
        "() => Array.from(document.querySelectorAll('textarea, input')).map(e => e.value)"
    )
    for expected in fields:
        assert expected in values, f"{url}: no field holds {expected!r}"
    assert page.evaluate(INJECTED) == [], url
    assert watched.dialogs == [], f"{url}: a script ran: {watched.dialogs}"
    assert watched.errors == [], f"{url}: {watched.errors}"


def _marked(text: str) -> str:
    """``text`` as the pages show it: bidirectional controls as markers."""
    return re.sub(
        "[\u202a-\u202e\u2066-\u2069]", lambda m: f"\u27e8U+{ord(m.group()):04X}\u27e9", text
    )


def test_payloads_are_shown_as_text_and_never_run_on_any_page(
    ui_server: UiServer, keys: dict[str, str], hostile: Hostile, page: Page, shot: Any
) -> None:
    watched = Watched(page)
    sign_in(page, ui_server, keys[REVIEWER], REVIEWER)
    base = ui_server.url
    first, second = f"/ui/versions/{hostile.first}", f"/ui/versions/{hostile.second}"
    # The queue: the draft, its prompt and the generator (in the filter's choices too).
    _visit(watched, base("/ui/queue?status=any"), [hostile.name, GENERATOR, PROMPT[:60]])
    shot(page, "hostile-queue")
    version_texts = [CRITERION, _marked(CRITERION_2), EXPLANATION, THEME, TITLE, PROMPT, NOTE,
                     GENERATOR, DOCUMENT["title"]]  # fmt: skip
    _visit(watched, base(first), version_texts)
    assert page.locator("a", has_text=DOCUMENT["title"]).count() == 0  # no javascript: link
    shot(page, "hostile-version")
    _visit(watched, base(f"{second}/diff?against={hostile.first}"), [CRITERION, CHANGED])
    shot(page, "hostile-diff")
    _visit(watched, base(f"{first}/analytics"), [CRITERION, _marked(CRITERION_2), hostile.judge])
    shot(page, "hostile-analytics")
    # The edit form holds the texts as they are (bidirectional controls too), to post back.
    _visit(watched, base(f"{second}/edit"), [], fields=[CHANGED, CRITERION_2, EXPLANATION])
    _visit(
        watched,
        base(f"/ui/completions/{hostile.completion}"),
        [RESPONSE, CRITERION, REASONING, hostile.judge],
    )
    shot(page, "hostile-completion")
    _visit(watched, base("/ui/judges"), [hostile.judge, JUDGE_MODEL])
    shot(page, "hostile-judges")


def test_the_listeners_see_a_script_that_runs(page: Page) -> None:
    """The watch itself: a page whose script opens a dialog and logs an error is caught."""
    watched = Watched(page)
    page.set_content("<script>alert('ran'); console.error('injected');</script>")
    assert watched.dialogs == ["ran"]
    assert watched.errors == ["injected"]
    assert page.evaluate(INJECTED) == ["inline script"]
