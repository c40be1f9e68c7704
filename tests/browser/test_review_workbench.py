"""The review workbench in Chromium against `rubricsvc serve` and PostgreSQL: sign in, the
queue, an LLM draft rewritten into a new version (its parent the draft, shown in the diff) and
approved by another person; a key without the review scope refused; a bad weight shown beside
its field with nothing stored; a scored demo completion's verdicts and reasoning. Then, over
plain HTTP, the refusals: no CSRF token, no session, a tampered session cookie.

Every page is screenshotted into the test's output folder (see conftest.py, ``shot``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx
import pytest

from rubricsvc.models import VersionStatus
from tests.browser.conftest import (
    AUTHOR,
    DRAFT_CRITERIA,
    GENERATOR,
    REVIEWER,
    Draft,
    ScoredCompletion,
    Shot,
    UiServer,
    versions_of,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

pytestmark = pytest.mark.postgres

REWRITTEN = "Recommends going to bed and getting up at the same times, weekends included"


def sign_in(page: Page, server: UiServer, secret: str, name: str, shot: Shot | None = None) -> None:
    """Sign in on the login page as a person would; lands on the queue."""
    page.goto(server.url("/ui/login"))
    if shot is not None:
        shot(page, "login")
    page.get_by_label("API key").fill(secret)
    page.locator("#login-form").get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/ui/queue$"))
    assert page.locator("#who").inner_text().strip() == name


def draft_row(page: Page, version_id: int) -> Locator:
    return page.locator(f'#queue tr.queue-row[data-version-id="{version_id}"]')


def criteria_texts(page: Page) -> list[str]:
    return [
        row.locator("td").nth(1).inner_text().splitlines()[0].strip()
        for row in page.locator("#criteria tr.criterion").all()
    ]


# -- In the browser ----------------------------------------------------------------------------


def test_an_llm_draft_is_rewritten_into_a_new_version_and_approved(
    ui_server: UiServer,
    keys: dict[str, str],
    llm_draft: Draft,
    new_page: Callable[[], Page],
    shot: Shot,
) -> None:
    """The author rewrites one criterion and removes another; the new version's parent is the
    draft (in the diff too); the reviewer, another person, approves it under her key's name."""
    from playwright.sync_api import expect

    ben = new_page()
    # A wrong key: the form comes back with the error, and no session.
    ben.goto(ui_server.url("/ui/queue"))
    ben.wait_for_url(re.compile(r"/ui/login\?next=%2Fui%2Fqueue$"))
    ben.get_by_label("API key").fill("rsk_not-a-key")
    ben.locator("#login-form").get_by_role("button", name="Sign in").click()
    expect(ben.locator("#login-form .error")).to_contain_text("Unknown or revoked API key")
    shot(ben, "login-bad-key")
    sign_in(ben, ui_server, keys[AUTHOR], AUTHOR, shot)

    # The queue: the LLM draft is there; filter to LLM drafts and open it.
    expect(draft_row(ben, llm_draft.version_id)).to_be_visible()
    ben.locator("#queue-filters select[name=origin]").select_option("llm")
    ben.locator("#queue-filters").get_by_role("button", name="Filter").click()
    ben.wait_for_url(re.compile(r"origin=llm"))
    expect(ben.locator("#queue-counts")).to_contain_text("llm")
    row = draft_row(ben, llm_draft.version_id)
    expect(row).to_be_visible()
    shot(ben, "queue")
    row.locator("a.version-link").click()
    ben.wait_for_url(re.compile(rf"/ui/versions/{llm_draft.version_id}$"))

    # The draft: criteria and lineage (origin, generator, template hash).
    expect(ben.locator("h1")).to_contain_text(llm_draft.ref)
    expect(ben.locator("#status")).to_have_text("draft")
    assert criteria_texts(ben) == [c["text"] for c in DRAFT_CRITERIA]
    lineage = ben.locator("#lineage")
    expect(lineage).to_contain_text("llm")
    expect(lineage).to_contain_text(GENERATOR["generator_model"])
    expect(lineage).to_contain_text(GENERATOR["template_sha256"][:16])
    shot(ben, "version-llm-draft")

    # Edit: rewrite the first criterion, remove the second.
    ben.locator("#edit-link").click()
    ben.wait_for_url(re.compile(rf"/ui/versions/{llm_draft.version_id}/edit$"))
    form = ben.locator("#edit-form")
    expect(form.locator("fieldset.criterion-row")).to_have_count(len(DRAFT_CRITERIA) + 1)
    expect(ben.locator("#c-0-text")).to_have_value(DRAFT_CRITERIA[0]["text"])
    ben.locator("#c-0-text").fill(REWRITTEN)
    ben.locator("#c-1-remove").check()
    ben.locator("#version-note").fill("a checkable schedule; caffeine is not this prompt's point")
    shot(ben, "edit")
    form.get_by_role("button", name="Save as new version").click()
    ben.wait_for_url(re.compile(r"/ui/versions/\d+$"))

    # The new version: a draft whose parent is the edited one; the draft itself unchanged.
    first, second = versions_of(ui_server, llm_draft.name)
    assert ben.url.endswith(f"/ui/versions/{second.id}")
    assert second.parent_id == first.id == llm_draft.version_id
    assert (second.number, second.status) == (2, VersionStatus.DRAFT)
    assert [c.text for c in second.criteria] == [
        REWRITTEN,
        *[c["text"] for c in DRAFT_CRITERIA[2:]],
    ]
    assert second.origin_detail.get("saved_by") == AUTHOR
    assert [c.text for c in first.criteria] == [c["text"] for c in DRAFT_CRITERIA]
    expect(ben.locator(".flash")).to_contain_text(f"Saved {llm_draft.name}@2")
    expect(ben.locator("h1")).to_contain_text(f"{llm_draft.name}@2")
    expect(ben.locator("#lineage")).to_contain_text(llm_draft.ref)
    assert criteria_texts(ben) == [c.text for c in second.criteria]
    shot(ben, "version-saved")

    # The diff against the parent: the rewritten and the removed criterion out, the rewrite in.
    expect(ben.locator("#diff-form select[name=against]")).to_have_value(str(first.id))
    ben.locator("#diff-form").get_by_role("button", name="Compare").click()
    ben.wait_for_url(re.compile(rf"/ui/versions/{second.id}/diff\?against={first.id}$"))
    diff = ben.locator("#diff")
    removed = [t.strip() for t in diff.locator(".diff-removed").all_inner_texts()]
    added = [t.strip() for t in diff.locator(".diff-added").all_inner_texts()]
    assert len(removed) == 2, removed
    assert any(DRAFT_CRITERIA[0]["text"] in r for r in removed)
    assert any(DRAFT_CRITERIA[1]["text"] in r for r in removed)
    assert len(added) == 1 and REWRITTEN in added[0], added
    shot(ben, "diff")

    # The reviewer, in a browser of her own, opens the new version from the queue and approves.
    ana = new_page()
    sign_in(ana, ui_server, keys[REVIEWER], REVIEWER)
    # From the keyboard: j down to the new version's row, Enter opens it.
    ids = ana.locator("#queue tr.queue-row").evaluate_all(
        "(rows) => rows.map((r) => r.dataset.versionId)"
    )
    assert str(second.id) in ids and str(first.id) not in ids  # only the newest is queued
    for _ in range(ids.index(str(second.id)) + 1):
        ana.keyboard.press("j")
    expect(draft_row(ana, second.id)).to_have_class(re.compile(r"\bselected\b"))
    ana.keyboard.press("Enter")
    ana.wait_for_url(re.compile(rf"/ui/versions/{second.id}$"))
    approve = ana.locator("#approve-form")
    expect(approve.get_by_role("button", name="Approve")).to_be_enabled()
    ana.locator("#approve-note").fill("clear and checkable")
    shot(ana, "approve")
    approve.get_by_role("button", name="Approve").click()
    ana.wait_for_url(re.compile(rf"/ui/versions/{second.id}$"))
    expect(ana.locator(".flash")).to_contain_text(f"Approved {llm_draft.name}@2")
    expect(ana.locator("#status")).to_have_text("approved")
    expect(ana.locator("#approve-form")).to_have_count(0)
    shot(ana, "version-approved")

    approved = versions_of(ui_server, llm_draft.name)[1]
    assert approved.status == VersionStatus.APPROVED
    assert (approved.reviewed_by, approved.review_note) == (REVIEWER, "clear and checkable")
    assert versions_of(ui_server, llm_draft.name)[0].status == VersionStatus.DRAFT


def test_a_key_without_the_review_scope_cannot_approve(
    ui_server: UiServer, keys: dict[str, str], llm_draft: Draft, page: Page, shot: Shot
) -> None:
    from playwright.sync_api import expect

    sign_in(page, ui_server, keys[AUTHOR], AUTHOR)
    page.goto(ui_server.url(f"/ui/versions/{llm_draft.version_id}"))
    button = page.locator("#approve-form").get_by_role("button", name="Approve")
    expect(button).to_be_disabled()
    expect(page.locator("#review-refused")).to_be_visible()
    expect(page.locator("#review-refused")).to_contain_text("lacks the review scope")
    shot(page, "approve-refused")

    # Posting anyway (the button enabled by hand) is refused by the server.
    page.evaluate(
        """() => {
            for (const el of document.querySelectorAll('#approve-form [disabled]'))
                el.removeAttribute('disabled');
        }"""
    )
    with page.expect_response(re.compile(r"/approve$")) as answer:
        button.click()
    assert answer.value.status == 403
    expect(page.locator(".error")).to_contain_text("lacks the review scope")
    shot(page, "approve-refused-post")

    (version,) = versions_of(ui_server, llm_draft.name)
    assert (version.status, version.reviewed_by) == (VersionStatus.DRAFT, None)


def test_a_bad_weight_is_shown_beside_its_field_and_nothing_is_stored(
    ui_server: UiServer, keys: dict[str, str], llm_draft: Draft, page: Page, shot: Shot
) -> None:
    from playwright.sync_api import expect

    sign_in(page, ui_server, keys[REVIEWER], REVIEWER)
    page.goto(ui_server.url(f"/ui/versions/{llm_draft.version_id}/edit"))
    page.locator("#c-0-text").fill(REWRITTEN)
    page.locator("#c-1-weight").fill("heavy")
    with page.expect_response(re.compile(r"/edit$")) as answer:
        page.locator("#edit-form").get_by_role("button", name="Save as new version").click()
    assert answer.value.status == 422

    error = page.locator("#c-1-weight-error")
    expect(error).to_be_visible()
    expect(error).to_have_class(re.compile(r"\bfield-error\b"))
    expect(error).to_contain_text("Not a number")
    field = page.locator("#c-1-weight")
    expect(field).to_have_attribute("aria-describedby", "c-1-weight-error")
    expect(field).to_have_attribute("aria-invalid", "true")
    # Next to the field: in its fieldset, just below it, and the only field error.
    assert error.evaluate(
        "(e) => e.closest('fieldset').contains(document.getElementById('c-1-weight'))"
    )
    near, below = field.bounding_box(), error.bounding_box()
    assert near is not None and below is not None
    assert 0 <= below["y"] - (near["y"] + near["height"]) < 40, (near, below)
    expect(page.locator(".field-error")).to_have_count(1)
    # What was typed is still there, for the reviewer to fix.
    expect(field).to_have_value("heavy")
    expect(page.locator("#c-0-text")).to_have_value(REWRITTEN)
    shot(page, "edit-bad-weight")

    (version,) = versions_of(ui_server, llm_draft.name)
    assert [c.text for c in version.criteria] == [c["text"] for c in DRAFT_CRITERIA]


@pytest.mark.model
def test_a_scored_demo_completion_shows_each_verdict_and_its_reasoning(
    browser: Browser,  # first: without Chromium, skip before scoring anything
    ui_server: UiServer,
    keys: dict[str, str],
    scored_demo_completion: ScoredCompletion,
    page: Page,
    shot: Shot,
) -> None:
    from playwright.sync_api import expect

    sign_in(page, ui_server, keys[REVIEWER], REVIEWER)
    page.goto(ui_server.url(f"/ui/completions/{scored_demo_completion.completion_id}"))
    expect(page.locator("#response")).to_contain_text("Keep the same bedtime and wake time")
    scores = page.locator("table.scores")
    expect(scores).to_contain_text("demo/sleep-advice@1")
    expect(scores).to_contain_text("embedded")

    verdicts = page.locator("table.verdicts")
    expect(verdicts).to_have_count(1)
    rows = verdicts.locator("tr.verdict")
    expect(rows).to_have_count(len(scored_demo_completion.criteria))
    shown = []
    for row in rows.all():
        cells = [c.strip() for c in row.locator("td").all_inner_texts()]
        criterion, verdict, reasoning = cells[0], cells[2], row.locator(".reasoning").inner_text()
        shown.append(criterion)
        assert verdict, f"no verdict for {criterion!r}"
        assert reasoning.strip(), f"no reasoning for {criterion!r}"
    assert shown == scored_demo_completion.criteria
    shot(page, "completion")

    # From the score to its rubric version, that version's criterion analytics, the judges.
    scores.get_by_role("link", name="demo/sleep-advice@1").click()
    page.get_by_role("link", name="Criterion analytics").click()
    table = page.locator("#criterion-analytics")
    expect(table.locator("tr.criterion-stats")).to_have_count(len(scored_demo_completion.criteria))
    expect(page.locator("#analytics-summary")).to_contain_text(
        "From 1 scored completion of 1 prompt"
    )
    expect(page.locator("#analytics-chart")).to_be_visible()
    shot(page, "analytics")
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Judges").click()
    expect(page.locator("section.judge").filter(has_text="embedded")).to_contain_text(
        "Judgments stored"
    )
    shot(page, "judges")


def test_pages_fit_a_phone_and_the_keyboard_reaches_every_control(
    browser: Browser, ui_server: UiServer, keys: dict[str, str], llm_draft: Draft, shot: Shot
) -> None:
    """At 375 px nothing makes the page scroll sideways (wide tables scroll in their own box),
    and Tab goes from the skip link through the header to the page's own controls."""
    context = browser.new_context(viewport={"width": 375, "height": 800})
    try:
        phone = context.new_page()
        sign_in(phone, ui_server, keys[REVIEWER], REVIEWER)
        for path in (
            "/ui/queue",
            f"/ui/versions/{llm_draft.version_id}",
            f"/ui/versions/{llm_draft.version_id}/edit",
            f"/ui/versions/{llm_draft.version_id}/analytics",
            "/ui/judges",
        ):
            phone.goto(ui_server.url(path))
            width, viewport = phone.evaluate(
                "() => [document.documentElement.scrollWidth, window.innerWidth]"
            )
            assert width <= viewport, f"{path} is {width} px wide on a {viewport} px screen"
        shot(phone, "phone-edit")

        phone.goto(ui_server.url(f"/ui/versions/{llm_draft.version_id}"))
        reached = []
        for _ in range(8):
            phone.keyboard.press("Tab")
            reached.append(phone.evaluate("() => document.activeElement.textContent.trim()"))
        assert reached[:5] == ["Skip to content", "rubricsvc review", "Queue", "Judges", "Sign out"]
        assert "Edit" in reached[5:]
        # Every form control of the edit page has a label.
        phone.goto(ui_server.url(f"/ui/versions/{llm_draft.version_id}/edit"))
        controls = "#edit-form input:not([type=hidden]), #edit-form textarea, #edit-form select"
        unlabelled = phone.evaluate(
            "(css) => [...document.querySelectorAll(css)]"
            ".filter(e => !e.labels || e.labels.length === 0).map(e => e.name)",
            controls,
        )
        assert unlabelled == []
    finally:
        context.close()


# -- Over plain HTTP: what the server refuses ---------------------------------------------------


def http_client(server: UiServer) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, follow_redirects=False, trust_env=False)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def http_sign_in(client: httpx.Client, secret: str) -> None:
    login = client.get("/ui/login")
    answer = client.post(
        "/ui/login",
        data={"api_key": secret, "csrf_token": csrf_of(login.text), "next": "/ui/queue"},
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/queue", answer.text


def assert_untouched(server: UiServer, draft: Draft) -> None:
    (version,) = versions_of(server, draft.name)
    assert (version.id, version.status, version.reviewed_by) == (
        draft.version_id,
        VersionStatus.DRAFT,
        None,
    )
    assert [c.text for c in version.criteria] == [c["text"] for c in DRAFT_CRITERIA]


# An edit that would be saved, were its token right.
EDIT = {"c-0-source": "0", "c-0-text": "Replaced", "c-0-weight": "1", "c-0-position": "0"}


def test_a_form_post_without_a_valid_csrf_token_is_refused(
    ui_server: UiServer, keys: dict[str, str], llm_draft: Draft
) -> None:
    with http_client(ui_server) as client, http_client(ui_server) as other:
        http_sign_in(client, keys[REVIEWER])
        http_sign_in(other, keys[REVIEWER])
        mine = csrf_of(client.get(f"/ui/versions/{llm_draft.version_id}").text)
        theirs = csrf_of(other.get(f"/ui/versions/{llm_draft.version_id}").text)
        assert mine != theirs  # a token belongs to its session
        for token in (None, "", "0" * 64, theirs):
            for action, data in (
                ("approve", {"note": "ok"}),
                ("retire", {"note": "old"}),
                ("edit", EDIT),
            ):
                form = data if token is None else {**data, "csrf_token": token}
                answer = client.post(f"/ui/versions/{llm_draft.version_id}/{action}", data=form)
                assert answer.status_code == 403, (action, token, answer.text)
        # The sign-out form too: the session still works after.
        assert client.post("/ui/logout", data={"csrf_token": theirs}).status_code == 403
        assert client.get("/ui/queue").status_code == 200
    assert_untouched(ui_server, llm_draft)


def test_a_request_without_a_session_is_refused(
    ui_server: UiServer, keys: dict[str, str], llm_draft: Draft
) -> None:
    version = f"/ui/versions/{llm_draft.version_id}"
    with http_client(ui_server) as client:
        for path in ("/ui/queue", version, f"{version}/edit", "/ui/judges"):
            answer = client.get(path)
            assert answer.status_code == 303, (path, answer.status_code)
            assert answer.headers["location"].startswith("/ui/login?next="), path
        for action in ("approve", "retire", "edit"):
            answer = client.post(f"{version}/{action}", data={"csrf_token": "x", "note": "ok"})
            assert answer.status_code == 403, (action, answer.text)
    assert_untouched(ui_server, llm_draft)


def test_a_tampered_session_cookie_is_refused(
    ui_server: UiServer, keys: dict[str, str], llm_draft: Draft
) -> None:
    version = f"/ui/versions/{llm_draft.version_id}"
    with http_client(ui_server) as client:
        http_sign_in(client, keys[REVIEWER])
        token = csrf_of(client.get(version).text)
        cookie = client.cookies["rubricsvc_session"]
    payload, _, signature = cookie.rpartition(".")
    # Alter the signature's first character: it carries six whole bits, whereas the last
    # character of unpadded base64 carries ignored padding bits ("B" and "A" can decode to
    # the same bytes, so flipping it may forge nothing).
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    forged = [
        f"{payload}.{flipped}",  # the signature altered
        cookie.replace(cookie[0], "Z" if cookie[0] != "Z" else "Y", 1),  # the payload altered
        cookie[: len(cookie) // 2],  # cut short
    ]
    for value in forged:
        with http_client(ui_server) as client:
            client.cookies.set("rubricsvc_session", value, domain="127.0.0.1", path="/ui")
            answer = client.get("/ui/queue")
            assert answer.status_code == 303, value
            assert answer.headers["location"].startswith("/ui/login")
            # With the real session's token, the forged cookie still gets nothing done.
            refused = client.post(f"{version}/approve", data={"csrf_token": token, "note": "x"})
            assert refused.status_code == 403, refused.text
    # The cookie as it was issued still works: the refusals above were the tampering's doing.
    with http_client(ui_server) as client:
        client.cookies.set("rubricsvc_session", cookie, domain="127.0.0.1", path="/ui")
        assert client.get("/ui/queue").status_code == 200
    assert_untouched(ui_server, llm_draft)
