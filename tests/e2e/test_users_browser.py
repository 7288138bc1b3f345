"""In Chromium, against a real `campaign serve --demo`: the Users page's role select, refused a change (the
last admin demoting themself: 409, the message by the select), goes back to the stored role."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_a_refused_last_admin_demotion_puts_the_select_back_on_the_stored_role(live_server, browser):
    page = browser.new_page()
    try:
        page.goto(live_server.login_url)
        page.wait_for_url(live_server.url + "/")
        page.goto(live_server.url + "/users")
        form = page.locator("form.role-form").first
        select = form.locator("select[name=role]")
        expect(select).to_have_value("admin")
        with page.expect_response(lambda r: "/role" in r.url) as answer:
            select.select_option("viewer")
        assert answer.value.status == 409
        expect(form.locator(".field-error")).to_contain_text("admin")
        expect(select).to_have_value("admin")  # the stored role, not the refused one
        # Still the admin: the page reloaded says so too.
        page.reload()
        expect(page.locator("form.role-form select[name=role]").first).to_have_value("admin")
    finally:
        page.close()
