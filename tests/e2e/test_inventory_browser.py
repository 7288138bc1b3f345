"""In Chromium: log in with the URL `campaign serve` printed, change a status with a reason
through the htmx UI, reload, and see it persisted with a history entry."""

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_status_change_through_htmx_persists(live_server, browser):
    page = browser.new_page()
    try:
        page.goto(live_server.login_url)
        page.wait_for_url(live_server.url + "/")
        page.click("text=Kimi-K2.5 + EAGLE-3 on 8x RTX PRO 6000 (PCIe)")
        row = page.locator("#approach-expert-parallelism")
        expect(row.locator(".badge")).to_have_text("untested", use_inner_text=True)
        # Dead end without a reason is refused with a visible message; nothing changes.
        row.locator("summary").click()
        row.locator("select[name=status]").select_option("dead_end")
        row.locator("button[type=submit]").click()
        error = row.locator(".field-error")  # next to the reason field, in view
        expect(error).to_contain_text("needs a reason", use_inner_text=True)
        expect(error).to_be_visible()
        expect(page.locator("#approach-expert-parallelism .badge")).to_have_text("untested", use_inner_text=True)
        # Now with a reason.
        row.locator("input[name=reason]").fill("all-to-all over PCIe is slower than allreduce")
        with page.expect_response(lambda r: r.url.endswith("/status") and r.status == 200):
            row.locator("button[type=submit]").click()
        page.wait_for_function(
            "() => document.querySelector('#approach-expert-parallelism .badge').textContent === 'dead end'"
        )
        page.reload()
        expect(page.locator("#approach-expert-parallelism .badge")).to_have_text("dead end", use_inner_text=True)
        expect(page.locator("#approach-expert-parallelism .reason")).to_contain_text(
            "all-to-all over PCIe", use_inner_text=True
        )
        page.click("#approach-expert-parallelism >> text=Expert parallelism")
        history = page.locator(".history li").first
        expect(history).to_contain_text("all-to-all over PCIe is slower than allreduce", use_inner_text=True)
        expect(history).to_contain_text("untested", use_inner_text=True)
        expect(history).to_contain_text("dead end", use_inner_text=True)
        expect(history).to_contain_text("admin", use_inner_text=True)  # who did it (the board's admin)
    finally:
        page.close()


def test_a_background_fragment_answering_late_keeps_the_error_flash(live_server, browser):
    """The cause of the old flake: the campaign page loads fragments (trials, verdicts, share links) when
    htmx starts; one answering after a refused status change used to clear the error the person just got
    (now shown by the field that caused it)."""
    page = browser.new_page()
    held = []
    try:
        page.goto(live_server.login_url)
        page.wait_for_url(live_server.url + "/")
        page.route(
            "**/campaigns/*/verdicts", lambda route: held.append(route)
        )  # answered only after the refusal is shown
        page.click("text=Kimi-K2.5 + EAGLE-3 on 8x RTX PRO 6000 (PCIe)")
        row = page.locator("#approach-expert-parallelism")
        row.locator("summary").click()
        row.locator("select[name=status]").select_option("dead_end")
        row.locator("button[type=submit]").click()
        error = row.locator(".field-error")
        error.wait_for()
        assert held, "the verdicts fragment was not requested"
        for route in held:
            route.continue_()
        page.wait_for_selector("#campaign-verdicts", state="attached")  # the late fragment is swapped in
        expect(error).to_contain_text("needs a reason", use_inner_text=True)
    finally:
        page.close()
