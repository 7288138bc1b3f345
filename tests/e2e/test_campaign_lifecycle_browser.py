"""In Chromium on a real `campaign serve --demo`: rename a campaign (its old URL redirects), archive it (read-only,
under Archived on the front page, a write refused with the reason), delete it from the archive with its name
typed (the other campaign stays); a viewer gets no lifecycle forms; the trials page filters and sorts with the
view in its URL."""

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

SHOOTOUT = "Allreduce shootout on this node"


def test_rename_archive_and_delete_in_the_page(live_server, browser):
    page = browser.new_page()
    try:
        page.goto(live_server.login_url)
        page.wait_for_url(live_server.url + "/")
        page.click(f"text={SHOOTOUT}")
        page.wait_for_url(live_server.url + "/campaigns/allreduce-shootout")
        rename = page.locator("#rename-form")
        rename.locator("input[name=slug]").fill("shootout-q4")
        rename.locator("button[type=submit]").click()
        page.wait_for_url(live_server.url + "/campaigns/shootout-q4")
        expect(page.locator("#campaign-history")).to_contain_text("allreduce-shootout → shootout-q4")
        page.goto(live_server.url + "/campaigns/allreduce-shootout")  # the old URL
        page.wait_for_url(live_server.url + "/campaigns/shootout-q4")

        page.locator("#archive-form button[type=submit]").click()
        expect(page.locator("#archived-banner")).to_be_visible()
        add = page.locator("#add-approach form")
        add.locator("input[name=title]").fill("Another one")
        add.locator("input[name=key]").fill("another-one")
        add.locator("button[type=submit]").click()
        expect(page.locator("body")).to_contain_text("read-only")
        page.goto(live_server.url + "/")
        expect(page.locator(".campaign-list").first).not_to_contain_text(SHOOTOUT)
        page.locator("#archived-campaigns summary").click()
        expect(page.locator("#archived-campaigns")).to_contain_text(SHOOTOUT)

        page.goto(live_server.url + "/campaigns/shootout-q4")
        delete = page.locator("#delete-form")
        expect(delete.get_by_role("link", name="Export it first")).to_be_visible()
        delete.locator("input[name=confirm]").fill("shootout")
        delete.locator("button[type=submit]").click()
        expect(delete.locator(".field-error")).to_contain_text("to confirm the delete")
        delete.locator("input[name=confirm]").fill(SHOOTOUT)
        delete.locator("button[type=submit]").click()
        page.wait_for_url(live_server.url + "/")
        expect(page.locator("body")).not_to_contain_text(SHOOTOUT)
        expect(page.locator(".campaign-list")).to_contain_text("Kimi-K2.5 + EAGLE-3")
        assert page.goto(live_server.url + "/campaigns/shootout-q4").status == 404
    finally:
        page.close()


def test_a_viewer_gets_no_lifecycle_forms_and_the_trials_page_keeps_its_view_in_the_url(live_server, browser):
    from app.db import make_engine
    from app.models import Role
    from tests.support.browser import login_context
    from tests.support.seeded_trials import seed_trials

    engine = make_engine(live_server.env["CAMPAIGN_DATABASE_URL"])
    seeded = seed_trials(engine)
    context, viewer = login_context(browser, live_server.url, engine, "Vera", Role.viewer)
    try:
        viewer.wait_for_url(live_server.url + "/")
        viewer.goto(live_server.url + "/campaigns/allreduce-shootout")
        expect(viewer.locator("#lifecycle")).to_be_visible()
        assert viewer.locator("#rename-form, #archive-form, #delete-form").count() == 0

        viewer.get_by_role("link", name="Trials", exact=True).click()
        viewer.wait_for_url(live_server.url + "/trials")
        expect(viewer.locator("#trial-total")).to_have_text(str(len(seeded.trial_ids) + 1))
        form = viewer.locator("#trial-filter")
        form.locator("select[name=campaign]").select_option("c")
        form.locator("select[name=state]").select_option("succeeded")
        form.locator("button[type=submit]").click()
        viewer.wait_for_url("**/trials?campaign=c&state=succeeded*")
        expect(viewer.locator("#trial-total")).to_have_text("4")
        viewer.locator("th a[data-sort=runner]").click()
        viewer.wait_for_url("**sort=-runner*")
        runners = viewer.locator("table.all-trials tbody tr td:nth-child(6)").all_inner_texts()
        assert runners == sorted(runners, reverse=True) and len(runners) == 4
        shared = viewer.url  # the view, as a link to share
        other = context.new_page()
        other.goto(shared)
        expect(other.locator("#trial-total")).to_have_text("4")
        expect(other.locator("select[name=state]")).to_have_value("succeeded")
        href = other.locator("#export-csv").get_attribute("href") or ""
        assert "campaign=c" in href and "state=succeeded" in href and "format=csv" in href
    finally:
        context.close()
        engine.dispose()
