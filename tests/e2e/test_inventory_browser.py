"""In Chromium: log in with the URL `campaign serve` printed, change a status with a reason
through the htmx UI, reload, and see it persisted with a history entry."""

import pytest

pytestmark = pytest.mark.browser


def test_status_change_through_htmx_persists(live_server, browser):
    page = browser.new_page()
    try:
        page.goto(live_server.login_url)
        page.wait_for_url(live_server.url + "/")
        page.click("text=Kimi-K2.5 + EAGLE-3 on 8x RTX PRO 6000 (PCIe)")
        row = page.locator("#approach-expert-parallelism")
        assert row.locator(".badge").inner_text() == "untested"
        # Dead end without a reason is refused with a visible message; nothing changes.
        row.locator("summary").click()
        row.locator("select[name=status]").select_option("dead_end")
        row.locator("button[type=submit]").click()
        error = row.locator(".field-error")  # next to the reason field, in view
        error.wait_for()
        assert "needs a reason" in error.inner_text() and error.is_visible()
        assert page.locator("#approach-expert-parallelism .badge").inner_text() == "untested"
        # Now with a reason.
        row.locator("input[name=reason]").fill("all-to-all over PCIe is slower than allreduce")
        with page.expect_response(lambda r: r.url.endswith("/status") and r.status == 200):
            row.locator("button[type=submit]").click()
        page.wait_for_function(
            "() => document.querySelector('#approach-expert-parallelism .badge').textContent === 'dead end'"
        )
        page.reload()
        assert page.locator("#approach-expert-parallelism .badge").inner_text() == "dead end"
        assert "all-to-all over PCIe" in page.locator("#approach-expert-parallelism .reason").inner_text()
        page.click("#approach-expert-parallelism >> text=Expert parallelism")
        history = page.locator(".history li").first
        assert "all-to-all over PCIe is slower than allreduce" in history.inner_text()
        assert "untested" in history.inner_text() and "dead end" in history.inner_text()
        assert "admin" in history.inner_text()  # the person who did it (the board's admin)
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
        assert "needs a reason" in error.inner_text()
    finally:
        page.close()
