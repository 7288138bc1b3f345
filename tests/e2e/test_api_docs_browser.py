"""In Chromium with every request off this machine aborted: /docs renders Swagger UI from local
assets, and its Authorize button takes an API token that the "Try it out" requests then carry."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_docs_render_offline_and_authorize_with_a_bearer_token(live_server, browser):
    context = browser.new_context()
    blocked: list[str] = []

    def offline(route):
        if urlsplit(route.request.url).hostname in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", offline)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    # A Content-Security-Policy violation is a console error: Swagger UI must run under the board's CSP.
    def on_console(message) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", on_console)
    try:
        page.goto(live_server.url + "/docs")
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("Campaign Board")
        expect(page.locator("#operations-trials-run_next_api_campaigns__slug__run_next_post")).to_be_visible()
        expect(page.locator("header.topbar")).to_have_count(1)
        token = live_server.cli("token", "create", "docs-test").stdout.strip()
        page.click("button.authorize")
        page.fill(".auth-container input[type=text], .auth-container input[type=password]", token)
        page.click(".auth-btn-wrapper button.authorize")
        page.click("button.btn-done")
        # Try GET /api/campaigns: it answers 200 only with the Bearer token (the page has no session).
        op = page.locator("[id^='operations-campaigns-'][id$='_api_campaigns_get']").first
        op.locator(".opblock-summary").click()
        op.locator("button.try-out__btn").click()
        with page.expect_request(lambda r: urlsplit(r.url).path == "/api/campaigns") as sent:  # ?archived=false
            op.locator("button.execute").click()
        assert sent.value.headers.get("authorization") == f"Bearer {token}"
        expect(op.locator(".live-responses-table tr.response .response-col_status")).to_have_text("200")
        assert blocked == [] and errors == []
    finally:
        context.close()


def test_try_it_out_writes_with_the_browsers_session(live_server, browser):
    """Logged in (a session cookie, no Bearer token), "Try it out" on a POST passes the CSRF check: Swagger's
    requests carry the session's token in the header the page names (static/docs.js)."""
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(live_server.login_url)
        page.goto(live_server.url + "/docs")
        op = page.locator("#operations-campaigns-create_campaign_api_campaigns_post")
        op.locator(".opblock-summary").click()
        op.locator("button.try-out__btn").click()
        op.locator("textarea.body-param__text").fill('{"slug": "from-docs", "name": "Made in /docs"}')
        with page.expect_request(lambda r: r.url.endswith("/api/campaigns") and r.method == "POST") as sent:
            op.locator("button.execute").click()
        assert sent.value.headers.get("x-csrf-token") and "authorization" not in sent.value.headers
        expect(op.locator(".live-responses-table tr.response .response-col_status")).to_have_text("201")
        page.goto(live_server.url + "/campaigns/from-docs")
        expect(page.locator("h1")).to_contain_text("Made in /docs")
    finally:
        context.close()
