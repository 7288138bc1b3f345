"""In Chromium, on a real `campaign serve --demo`: the campaign page's "What to try next" panel says why the
FlashInfer PCIe-IPC allreduce next and pins the order by hand; the Upgrades page plans CUDA 13 / torch 2.11
from its form: what it re-opens and what it leaves. No script error, no CSP violation, no failed request."""

from __future__ import annotations

import pytest

from tests.support.browser import login_url

pytestmark = pytest.mark.browser
SLUG = "kimi-k25-eagle3"


def _errors(page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "favicon" not in m.text else None)
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    return errors


def test_ranking_panel_and_upgrades_page(live_server, browser):
    page = browser.new_page()
    errors = _errors(page)
    try:
        page.goto(login_url(live_server, f"/campaigns/{SLUG}"))
        page.wait_for_url(f"**/campaigns/{SLUG}")
        why = page.locator("#why-next")
        why.wait_for()
        assert why.inner_text().startswith(
            "FlashInfer PCIe-IPC allreduce next: needs <= 200 us at 56 KiB; expected 5.3 us (reported)"
        )
        assert page.locator("#ranking .ranking-list > li").count() == 3
        page.select_option("#run-order", "priority")
        page.click("#ranking .run-order button")
        page.wait_for_selector("#why-next:has-text('The order is pinned by hand')")

        page.click("text=Upgrades")
        page.wait_for_url(f"**/campaigns/{SLUG}/upgrades")
        page.fill("#upgrade-target input[name=cuda]", "13.0")
        page.fill("#upgrade-target input[name=torch]", "2.11.0")
        page.click("#upgrade-target button")
        page.wait_for_selector("#upgrade-result")
        assert page.inner_text("#upgrade-result h2") == "CUDA 12.8 → 13.0, torch 2.10.0+cu128 → 2.11.0"
        reopened = page.locator("#upgrade-reopens tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)")
        assert reopened == ["flashinfer-allreduce-fusion", "torch-symm-mem"]
        left = page.inner_text("#upgrade-untouched")
        assert "NCCL Tree algorithm" in left and "bound to NCCL, which the target does not change" in left
        assert "SGLang custom allreduce (IPC)" in left and "not bound to any stack component" in left
        assert page.input_value("#upgrade-target input[name=torch]") == "2.11.0"  # the form keeps the target
    finally:
        page.close()
    assert errors == []
