"""In Chromium, against a real `campaign serve --demo`: every form (the four of issue 13: create campaign,
import, delete approach, "Save as campaign inputs" on the charts page; and the rest) lands on one page (exactly one
nav bar) with the new state; an error shows next to the field that caused it, in the viewport,
and what was typed is still there; the key/slug patterns compile (Chromium uses the `v` flag)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.support.browser import login_url

pytestmark = pytest.mark.browser

KIMI = "/campaigns/kimi-k25-eagle3"


@pytest.fixture
def live_server(demo_server):
    """One server for the module: each test creates what it deletes, names what it creates uniquely, and changes
    only fields that no other test here reads."""
    return demo_server


@pytest.fixture
def page(live_server, browser):
    page = browser.new_page()
    page.console_errors = []
    page.on("console", lambda m: m.type in ("error", "warning") and page.console_errors.append(m.text))
    page.on("pageerror", lambda e: page.console_errors.append(str(e)))
    page.goto(login_url(live_server))
    page.wait_for_url(live_server.url + "/")
    yield page
    page.close()


def one_page(page) -> None:
    """Exactly one document: one nav bar, one <main>; a form's error is by its field, not in #flash."""
    expect(page.locator("header.topbar")).to_have_count(1)
    expect(page.locator("main")).to_have_count(1)
    expect(page.locator("#flash")).to_have_text("", use_inner_text=True)


def test_create_campaign_lands_on_the_new_campaign(page, live_server):
    page.fill("input[name=name]", "Verify-step allreduce")
    page.fill("input[name=slug]", "verify-ar")
    page.click("form[action='/campaigns'] button[type=submit]")
    page.wait_for_url(live_server.url + "/campaigns/verify-ar")
    expect(page.locator("h1")).to_have_text("Verify-step allreduce")
    one_page(page)
    assert page.console_errors == []


def test_create_campaign_error_is_by_the_field_and_keeps_the_input(page):
    slug = page.locator("form[action='/campaigns'] input[name=slug]")
    # The browser validates the pattern (an invalid pattern would be ignored, with a console error).
    slug.fill("Not A Slug")
    assert slug.evaluate("el => el.validity.patternMismatch") is True
    slug.fill("kimi-k25-eagle3")
    assert slug.evaluate("el => el.validity.valid") is True
    page.fill("input[name=name]", "A second Kimi campaign")
    page.fill("form[action='/campaigns'] textarea[name=description]", "typed text that must survive")
    page.click("form[action='/campaigns'] button[type=submit]")
    error = page.locator("form[action='/campaigns'] .field-error")
    expect(error).to_contain_text("exists already")
    expect(error).to_be_in_viewport()
    expect(slug).to_have_attribute("aria-invalid", "true")
    expect(page.locator("input[name=name]")).to_have_value("A second Kimi campaign")
    expect(page.locator("form[action='/campaigns'] textarea[name=description]")).to_have_value(
        "typed text that must survive"
    )
    one_page(page)
    assert not [m for m in page.console_errors if "pattern" in m.lower()], page.console_errors


def test_import_shows_what_it_added_and_changed_then_leads_to_the_campaign(page, live_server):
    text = page.request.get(live_server.url + KIMI + "/export.yaml").text()
    text = text.replace("slug: kimi-k25-eagle3", "slug: kimi-copy", 1)
    page.fill("form[action='/campaigns/import'] textarea[name=text]", text)
    page.click("form[action='/campaigns/import'] button[type=submit]")
    result = page.locator("#import-result")
    count = text.count("\n- key: ")
    expect(result).to_contain_text(f"created campaign 'kimi-copy': {count} approach(es) added, 0 changed")
    expect(result).to_be_in_viewport()
    one_page(page)
    # The same file again: an update that changes nothing, said so.
    page.click("form[action='/campaigns/import'] button[type=submit]")
    expect(result).to_contain_text("updated campaign 'kimi-copy': 0 approach(es) added, 0 changed")
    result.get_by_role("link", name="Open kimi-copy").click()
    page.wait_for_url(live_server.url + "/campaigns/kimi-copy")
    one_page(page)
    expect(page.locator("#approach-expert-parallelism")).to_be_visible()


def test_a_viewer_sees_no_create_or_import_cards(live_server, browser):
    from sqlmodel import select

    from app.db import make_engine, session_scope
    from app.models import Campaign, Role
    from tests.support.browser import login_context

    engine = make_engine(live_server.env["CAMPAIGN_DATABASE_URL"])
    context, viewer = login_context(browser, live_server.url, engine, "Vera", Role.viewer)
    try:
        viewer.wait_for_url(live_server.url + "/")
        with session_scope(engine) as session:  # the demo campaigns, and those the module's other tests made
            n_campaigns = len(session.exec(select(Campaign.id)).all())
        expect(viewer.locator(".campaign-list a")).to_have_count(n_campaigns)
        assert viewer.get_by_role("heading", name="New campaign").count() == 0
        assert viewer.get_by_role("heading", name="Import a campaign file").count() == 0
        assert viewer.locator(".card").count() == 0
    finally:
        context.close()
        engine.dispose()


def test_import_error_is_in_view_and_keeps_the_text(page):
    page.set_viewport_size({"width": 1280, "height": 600})
    bad = "format: campaign-board/v1\ncampaign:\n  slug: Bad Slug\n  name: x\napproaches: []\n"
    box = page.locator("form[action='/campaigns/import'] textarea[name=text]")
    box.fill(bad)
    page.click("form[action='/campaigns/import'] button[type=submit]")
    error = page.locator("form[action='/campaigns/import'] .field-error")
    expect(error).to_be_visible()
    expect(error).to_be_in_viewport()
    expect(box).to_have_value(bad)
    one_page(page)


def test_add_approach_duplicate_key_keeps_title_and_evidence(page, live_server):
    page.goto(live_server.url + KIMI)
    form = page.locator("form.add-approach")
    form.locator("input[name=title]").fill("NCCL_PROTO=LL128")
    form.locator("input[name=key]").fill("expert-parallelism")  # taken
    form.locator("textarea[name=evidence]").fill("LL128 may cut small-message latency")
    form.locator("button[type=submit]").click()
    error = form.locator(".field-error")
    expect(error).to_contain_text("exists already")
    expect(error).to_be_in_viewport()
    expect(form.locator("input[name=title]")).to_have_value("NCCL_PROTO=LL128")
    expect(form.locator("textarea[name=evidence]")).to_have_value("LL128 may cut small-message latency")
    expect(form.locator("input[name=key]")).to_have_value("expert-parallelism")
    # Fixed key: the approach is added, the form cleared, the error gone; still one page.
    form.locator("input[name=key]").fill("nccl-proto-ll128")
    form.locator("button[type=submit]").click()
    expect(page.locator("#approach-nccl-proto-ll128")).to_be_visible()
    expect(form.locator("input[name=title]")).to_have_value("")
    expect(form.locator(".field-error")).to_have_count(0)
    one_page(page)


def test_delete_approach_confirms_once_and_lands_on_the_campaign(page, live_server):
    """It deletes an approach of its own (the other tests here read the demo's)."""
    from app.db import make_engine, session_scope
    from app.domain import campaigns
    from app.schemas import ApproachCreate

    engine = make_engine(live_server.env["CAMPAIGN_DATABASE_URL"])
    try:
        with session_scope(engine) as session:
            kimi = campaigns.get_campaign(session, "kimi-k25-eagle3")
            campaigns.add_approach(session, kimi, ApproachCreate(key="to-delete", title="Delete me"), "tests")
    finally:
        engine.dispose()
    page.goto(live_server.url + KIMI + "/approaches/to-delete")
    dialogs = []

    def on_dialog(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", on_dialog)
    page.click("details.edit summary")
    page.click("button.danger")
    page.wait_for_url(live_server.url + KIMI)
    assert len(dialogs) == 1 and "Delete Delete me" in dialogs[0]
    one_page(page)
    expect(page.locator("#inventory")).to_be_visible()
    expect(page.locator("#approach-to-delete")).to_have_count(0)


def test_edit_approach_error_is_by_the_field_and_keeps_the_input(page, live_server):
    page.goto(live_server.url + KIMI + "/approaches/expert-parallelism")
    page.click("details.edit summary")
    page.fill(".edit-form input[name=effort]", "a day")
    page.fill(".edit-form textarea[name=recipe]", "{not json")
    page.click(".edit-form button[type=submit]")
    error = page.locator(".edit-form .field-error")
    expect(error).to_contain_text("recipe: not valid JSON")
    expect(error).to_be_in_viewport()
    expect(page.locator(".edit-form textarea[name=recipe]")).to_have_value("{not json")
    expect(page.locator(".edit-form input[name=effort]")).to_have_value("a day")
    # Valid: the details section is swapped in place, one page.
    page.fill(".edit-form textarea[name=recipe]", "")
    page.click(".edit-form button[type=submit]")
    expect(page.locator("#details .facts")).to_contain_text("a day")
    one_page(page)


def test_status_form_error_in_view_then_change_lands(page, live_server):
    page.goto(live_server.url + KIMI + "/approaches/expert-parallelism")
    page.select_option(".status-form select[name=status]", "deferred")
    page.click(".status-form button[type=submit]")
    error = page.locator(".status-form .field-error")
    expect(error).to_contain_text("needs a reason")
    expect(error).to_be_in_viewport()
    page.fill(".status-form input[name=reason]", "needs an EP-capable build")
    page.click(".status-form button[type=submit]")
    expect(page.locator("#verdict .status-line .badge")).to_have_text("deferred")
    expect(page.locator(".history")).to_contain_text(
        "needs an EP-capable build", use_inner_text=True
    )  # its own fragment
    one_page(page)


def test_runner_form_swaps_in_place_and_keeps_a_refused_name(page, live_server):
    page.goto(live_server.url + "/runners")
    page.fill("form.new-runner input[name=name]", "gpu-node-1")
    page.click("form.new-runner button[type=submit]")
    expect(page.locator("#runners pre.token")).to_be_visible()
    page.fill("form.new-runner input[name=name]", "gpu-node-1")
    page.click("form.new-runner button[type=submit]")
    error = page.locator("form.new-runner .field-error")
    expect(error).to_contain_text("exists already")
    expect(error).to_be_in_viewport()
    expect(page.locator("form.new-runner input[name=name]")).to_have_value("gpu-node-1")
    one_page(page)


def test_share_link_form_swaps_in_place(page, live_server):
    page.goto(live_server.url + KIMI)
    page.fill("form.share-create input[name=name]", "weekly review")
    page.click("form.share-create button[type=submit]")
    expect(page.locator("#share-links tr.created")).to_contain_text("weekly review")
    one_page(page)


def test_save_as_campaign_inputs_confirms_once_and_lands_on_the_charts(page, live_server):
    campaign = KIMI
    page.goto(live_server.url + campaign + "/charts")
    dialogs = []

    def on_dialog(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", on_dialog)
    page.fill("#whatif-form input[name=accept_length]", "3.3")
    expect(page.locator("[data-testid=whatif-active]")).to_be_visible()  # a what-if: nothing stored yet
    page.click("#whatif-form button:has-text('Save as campaign inputs')")
    expect(page.locator("[data-testid=whatif-active]")).to_have_count(0)  # the stored inputs, freshly loaded
    assert page.url == live_server.url + campaign + "/charts"
    assert len(dialogs) == 1 and "model inputs" in dialogs[0]
    one_page(page)
    expect(page.locator("#whatif-form input[name=accept_length]")).to_have_value("3.3")  # the stored value
    page.reload()
    expect(page.locator("#whatif-form input[name=accept_length]")).to_have_value("3.3")
    assert page.console_errors == []


def test_save_as_campaign_inputs_error_is_by_the_field_and_keeps_the_input(page, live_server):
    campaign = KIMI
    page.goto(live_server.url + campaign + "/charts")
    page.set_viewport_size({"width": 1280, "height": 600})
    page.on("dialog", lambda dialog: dialog.accept())
    field = page.locator("#whatif-form input[name=accept_length]")
    field.fill("0.5")  # below 1: refused by the server (the browser's min is not checked on a button post)
    page.click("#whatif-form button:has-text('Save as campaign inputs')")
    error = page.locator("#whatif-form .field-error")
    expect(error).to_contain_text("Accept length τ")  # the field's label (ModelInputFields)
    expect(error).to_be_in_viewport()
    expect(field).to_have_value("0.5")
    one_page(page)


def test_an_import_over_the_limit_is_said_by_the_form(page, live_server, tmp_path):
    """A 30 MB file: the body limit's refusal is the form's error by the file field, not raw JSON."""
    big = tmp_path / "big.yaml"
    big.write_bytes(b"x" * (30 * 1024 * 1024))
    form = page.locator("form[action='/campaigns/import']")
    form.locator("input[name=file]").set_input_files(str(big))
    form.locator("button[type=submit]").click()
    expect(form.locator(".field-error")).to_contain_text("Request body too large", timeout=30_000)
    assert '{"detail"' not in page.content()
    one_page(page)


def test_a_rename_updates_the_heading_without_a_reload(page, live_server, browser):
    """Issue 43, item 9: the heading kept the old title until a reload; on another open page too."""
    url = live_server.url + KIMI + "/approaches/expert-parallelism"
    other = browser.new_page()
    other.goto(live_server.cli("login-url").stdout.strip().splitlines()[-1])
    other.wait_for_url(live_server.url + "/")
    other.goto(url)
    other.wait_for_selector(".page-feed[data-feed=open]")
    try:
        page.goto(url)
        page.click("details.edit summary")
        page.fill(".edit-form input[name=title]", "Expert parallelism, renamed")
        page.click(".edit-form button[type=submit]")
        expect(page.locator("#approach-heading")).to_have_text("Expert parallelism, renamed")
        expect(page.locator("h1")).to_have_count(1)
        expect(other.locator("#approach-heading")).to_have_text("Expert parallelism, renamed")  # via the feed
        expect(other.locator("h1")).to_have_count(1)
        one_page(page)
    finally:
        other.close()
