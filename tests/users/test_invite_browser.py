"""In Chromium, two people at once: the admin invites a teammate from the Users page and copies the
one-time link; a second browser context opens it, picks a name, is logged in, changes an approach's
status, and the approach's history shows that name."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

CAMPAIGN = "Kimi-K2.5 + EAGLE-3 on 8x RTX PRO 6000 (PCIe)"


def test_an_invited_teammate_logs_in_and_appears_in_history(live_server, browser):
    admin_ctx, mate_ctx = browser.new_context(), browser.new_context()
    admin, mate = admin_ctx.new_page(), mate_ctx.new_page()
    try:
        admin.goto(live_server.login_url)
        admin.wait_for_url(live_server.url + "/")
        admin.click("nav >> text=Users")
        admin.wait_for_url(live_server.url + "/users")
        form = admin.locator("form.invite-create")
        form.locator("select[name=role]").select_option("operator")
        form.locator("input[name=name]").fill("Grace")
        form.locator("button[type=submit]").click()
        link = admin.locator("#invite-url")
        link.wait_for()
        url = link.input_value()
        assert url.startswith(live_server.url + "/invite/invite_")
        assert admin.locator(".invites tbody tr").first.get_attribute("data-state") == "open"

        # The teammate, in another browser: the suggested name, changed; a taken name is refused first.
        mate.goto(url)
        name = mate.locator("input[name=name]")
        assert name.input_value() == "Grace"
        name.fill("admin")
        mate.click("text=Join and log in")
        error = mate.locator(".field-error")
        error.wait_for()
        assert "is taken" in error.inner_text() and name.input_value() == "admin"
        name.fill("Grace Hopper")
        mate.click("text=Join and log in")
        mate.wait_for_url(live_server.url + "/")
        assert "Grace Hopper" in mate.inner_text(".whoami") and "operator" in mate.inner_text(".whoami")
        assert mate.locator("nav >> text=Users").count() == 0  # not an admin

        # She changes a status; the history names her.
        mate.click(f"text={CAMPAIGN}")
        row = mate.locator("#approach-expert-parallelism")
        row.locator("summary").click()
        row.locator("select[name=status]").select_option("deferred")
        row.locator("input[name=reason]").fill("waiting for the NVLink node")
        with mate.expect_response(lambda r: r.url.endswith("/status") and r.status == 200):
            row.locator("button[type=submit]").click()
        mate.click("#approach-expert-parallelism >> text=Expert parallelism")
        history = mate.locator(".history li").first
        assert "waiting for the NVLink node" in history.inner_text()
        assert "Grace Hopper" in history.inner_text()

        # The admin's view: the invite is used, the teammate is listed, the link works no more.
        admin.reload()
        assert admin.locator(".invites tbody tr").first.get_attribute("data-state") == "used"
        assert admin.locator("tr[data-name='Grace Hopper']").count() == 1
        third = browser.new_context()
        try:
            late = third.new_page()
            late.goto(url)
            assert "already been used" in late.inner_text("main")
        finally:
            third.close()

        # The admin makes her a viewer from the Users page: her next page is read-only.
        with admin.expect_response(lambda r: r.url.endswith("/role") and r.status == 200):
            admin.locator("tr[data-name='Grace Hopper'] select[name=role]").select_option("viewer")
        mate.reload()
        assert mate.locator(".viewer-banner").is_visible()
        assert mate.url.endswith("/approaches/expert-parallelism")
        assert mate.locator("details.edit").count() == 1 and mate.locator("details.edit").is_hidden()
        # The admin ends her session from the Sessions page: her next request goes to the login page.
        admin.click("nav >> text=Sessions")
        grace_row = admin.locator("tr", has_text="Grace Hopper")
        admin.once("dialog", lambda dialog: dialog.accept())
        with admin.expect_response(lambda r: r.url.endswith("/revoke") and r.status == 200):
            grace_row.locator("button", has_text="Revoke").click()
        mate.reload()
        assert mate.url.startswith(live_server.url + "/login")
    finally:
        admin_ctx.close()
        mate_ctx.close()
