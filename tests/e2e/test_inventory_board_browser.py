"""In Chromium against `campaign serve --demo`: the inventory fits a 390 px phone, its search and
status filters narrow the rows (and survive a reload), keyboard reorder keeps the focus on the moved
row's arrow, and every status badge has its own computed colour."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from app.models import ApproachStatus, TrialState
from tests.support.browser import login_url

pytestmark = pytest.mark.browser

KIMI = "/campaigns/kimi-k25-eagle3"


@pytest.fixture
def live_server(demo_server):
    """One server for the module: the reorder moves a row of its own campaign's order, the other tests only read."""
    return demo_server


@pytest.fixture
def page(live_server, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(login_url(live_server))
    page.wait_for_url(live_server.url + "/")
    yield page
    page.close()


def test_pages_fit_a_390px_phone(page, live_server):
    page.set_viewport_size({"width": 390, "height": 844})
    pages: tuple[str, ...] = (
        "/",
        KIMI,
        "/campaigns/allreduce-shootout",
        KIMI + "/approaches/torch-symm-mem",
        "/runners",
    )
    pages += (KIMI + "/charts", "/users", "/tokens", "/sessions")  # a trial page: test_live_pages_browser.py
    for path in pages:
        page.goto(live_server.url + path)
        page.wait_for_load_state("networkidle")
        width = page.evaluate("document.scrollingElement.scrollWidth")
        assert width <= 390, (path, width)
    page.goto(live_server.url + KIMI)
    row = page.locator("#approach-expert-parallelism")
    row.scroll_into_view_if_needed()
    box = row.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390


def test_search_and_status_filters(page, live_server):
    page.goto(live_server.url + KIMI)
    rows = page.locator("#inventory tr[data-key]")
    total = rows.count()
    page.fill("#inventory-search", "nccl")
    # Title, key and evidence are searched: the IPC allreduce's evidence compares it with NCCL.
    _wait_shown(page, ["nccl-fewer-channels", "nccl-p2p-level-sys", "nccl-tree", "sglang-custom-allreduce"])
    expect(page.locator("#inventory-shown")).to_have_text(f"4 of {total} approaches shown", use_inner_text=True)
    page.fill("#inventory-search", "nccl channels")  # every word must match
    _wait_shown(page, ["nccl-fewer-channels"])
    page.fill("#inventory-search", "nccl")
    page.select_option("#inventory-status", "untested")
    _wait_shown(page, ["nccl-p2p-level-sys"])
    assert "q=nccl" in page.url and "status=untested" in page.url
    page.reload()  # the filter is in the URL
    expect(page.locator("#inventory-search")).to_have_value("nccl")
    _wait_shown(page, ["nccl-p2p-level-sys"])
    page.fill("#inventory-search", "")
    page.select_option("#inventory-status", "")
    expect(page.locator("#inventory tr[data-key]:not([hidden])")).to_have_count(total)
    expect(page.locator("#inventory-shown")).to_have_text("", use_inner_text=True)


def _wait_shown(page, keys: list[str]) -> None:
    """Wait until the inventory shows exactly these rows (in any order)."""
    page.wait_for_function(
        "(keys) => JSON.stringify([...document.querySelectorAll('#inventory tr[data-key]:not([hidden])')]"
        ".map(r => r.dataset.key).sort()) === JSON.stringify(keys)",
        arg=sorted(keys),
    )


def test_keyboard_reorder_keeps_focus_on_the_moved_row(page, live_server):
    page.goto(live_server.url + KIMI)
    keys = lambda: page.locator("#inventory tr[data-key]").evaluate_all("rows => rows.map(r => r.dataset.key)")  # noqa: E731
    moving = keys()[1]
    # Predicates are functions, not expression strings: the board's CSP forbids eval.
    on_moved_row = (
        f"() => document.activeElement && document.activeElement.closest('#approach-{moving}') !== null"
        " && document.activeElement.value === '{}'"
    )

    def press_enter_and_settle(position: int) -> None:
        with page.expect_response(lambda r: r.url.endswith("/move")):
            page.keyboard.press("Enter")
        page.wait_for_function(
            f"() => document.querySelectorAll('#inventory tr[data-key]')[{position}].dataset.key === '{moving}'"
        )
        page.wait_for_load_state("networkidle")  # the campaign-changed refresh swaps #inventory again
        # ... and so does the page feed's notice of the move (coalesced, then re-fetched): the table is
        # settled once it stays the same element for a while, and only then may the next key go to it.
        page.wait_for_function(
            "() => new Promise(done => { const table = document.getElementById('inventory');"
            " setTimeout(() => done(document.getElementById('inventory') === table), 700); })"
        )

    page.focus(f"#approach-{moving} button[value=down]")
    for position in (2, 3):
        press_enter_and_settle(position)
        page.wait_for_function(on_moved_row.format("down"))
    assert keys().index(moving) == 3
    page.keyboard.press("Shift+Tab")  # from the down arrow to the up arrow of the same row
    assert page.evaluate("() => document.activeElement.value") == "up"
    for position in (2, 1):
        press_enter_and_settle(position)
        page.wait_for_function(on_moved_row.format("up"))
    press_enter_and_settle(0)
    page.wait_for_function(on_moved_row.format("down"))  # up is disabled at the top: the other arrow
    page.reload()
    assert keys()[0] == moving


def test_every_badge_has_its_own_colour(page, live_server):
    page.goto(live_server.url + KIMI)
    names = sorted({s.value for s in ApproachStatus} | {s.value for s in TrialState} | {"awaiting"})
    colours = page.evaluate(
        """names => names.map(n => {
        const el = document.createElement('span'); el.className = 'badge badge-' + n; el.textContent = n;
        document.body.append(el); const c = getComputedStyle(el).backgroundColor; el.remove(); return c; })""",
        names,
    )
    assert len(set(colours)) == len(names), dict(zip(names, colours))
    assert "rgba(0, 0, 0, 0)" not in colours
