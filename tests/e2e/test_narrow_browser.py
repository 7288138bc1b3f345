"""In Chromium at a phone's 390 px (issue 43 item 9): the charts page's "reported elsewhere" table and the Deploy
panel's settings stack instead of clipping; no flag, path or number breaks inside (the Deploy panel, the status
page), a shell command scrolls sideways in its box; a share link has a Copy button that puts it on the clipboard.
At 1366 px the same tables stay tables."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from playwright.sync_api import expect
from sqlalchemy import Engine

from app.db import make_engine, session_scope
from app.domain import campaigns
from app.domain.sharing import create_share_link, share_token
from tests.support.browser import login_context
from tests.support.servers import LiveServer, start_live_server, stop_live_server
from tests.support.speculation import SLUG, build_sweep_campaign

pytestmark = pytest.mark.browser
KIMI = "kimi-k25-eagle3"  # a demo campaign with figures reported elsewhere

# Each flag, path or number (a word starting with "-" or "<", or holding "/", "_" or a digit) that renders on
# more than one line under `sel`: broken inside. Text inside charts, textareas and scripts is not laid out as lines.
BROKEN_TOKENS = r"""sel => {
  const out = [];
  for (const root of document.querySelectorAll(sel)) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      if (node.parentElement.closest('.js-plotly-plot, textarea, script, style')) continue;
      const words = /\S+/g;
      let m;
      while ((m = words.exec(node.data))) {
        if (!/^(-|<)|[\/_\d]/.test(m[0])) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) out.push(m[0]);
      }
    }
  }
  return out;
}"""
# The table's cells that reach past the viewport or past their own box, and the table if it is wider than its box.
CLIPPED = """sel => {
  const table = document.querySelector(sel), width = document.documentElement.clientWidth;
  const out = Array.from(table.querySelectorAll('td')).filter(td => td.getBoundingClientRect().right > width + 1
    || td.scrollWidth > td.clientWidth + 1).map(td => td.textContent.trim().slice(0, 40));
  if (table.scrollWidth > table.clientWidth + 1) out.push(`table ${table.scrollWidth} > ${table.clientWidth}`);
  return out;
}"""


class Board(NamedTuple):
    server: LiveServer
    engine: Engine
    status: dict[str, str]  # campaign slug -> its status page's path


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """`campaign serve --demo` plus the synthetic sweep (its Deploy panel has all three engines), each with a
    share link."""
    tmp = tmp_path_factory.mktemp("narrow")
    server = start_live_server(tmp, f"sqlite:///{tmp / 'live.db'}", "--demo", "--no-runner")
    engine = make_engine(server.env["CAMPAIGN_DATABASE_URL"])
    try:
        with session_scope(engine) as s:
            build_sweep_campaign(s)
            status = {}
            for slug in (SLUG, KIMI):
                link = create_share_link(s, campaigns.get_campaign(s, slug), "weekly review", "admin")
                status[slug] = f"/s/{share_token(link, server.env['CAMPAIGN_SECRET_KEY'])}"
        yield Board(server, engine, status)
    finally:
        engine.dispose()
        stop_live_server(server)


def _page(board: Board, browser, width: int, **context_options):
    viewport = {"width": width, "height": 900}
    context, page = login_context(browser, board.server.url, board.engine, viewport=viewport, **context_options)
    page.wait_for_url(f"{board.server.url}/")
    return context, page


def _open(page, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => !document.querySelector('.htmx-request')")


def _no_sideways_scroll(page) -> None:
    scroll, width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert scroll <= width, (scroll, width)


def test_the_reported_elsewhere_table_at_390_px_shows_every_cell(board, browser):
    """Each figure reported elsewhere is a block, each cell after its column's name: the source, the last
    column, was past the card's edge (436 px of table in a 330 px box)."""
    context, page = _page(board, browser, 390)
    try:
        _open(page, f"{board.server.url}/campaigns/{KIMI}/charts")
        assert page.locator("#reported tbody tr").count() >= 2
        assert page.evaluate(CLIPPED, "#reported") == []
        source = page.locator("#reported tbody tr").last.locator("td[data-label=Source]")
        expect(source).to_contain_text("derived")
        source.scroll_into_view_if_needed()  # down the page, never sideways
        expect(source).to_be_in_viewport()
        _no_sideways_scroll(page)
    finally:
        context.close()


def test_the_deploy_panel_at_390_px_breaks_no_flag_and_scrolls_its_commands(board, browser):
    context, page = _page(board, browser, 390)
    try:
        _open(page, f"{board.server.url}/campaigns/{SLUG}/charts")
        flags = page.locator("#deploy table code")
        assert flags.count() >= 10
        assert "--speculative-num-draft-tokens" in flags.all_inner_texts()
        assert page.evaluate(BROKEN_TOKENS, "#deploy") == []
        for engine in ("sglang", "vllm", "trtllm"):
            assert page.evaluate(CLIPPED, f"#deploy [data-testid=settings-{engine}]") == [], engine
        # A launch command keeps each line whole and scrolls sideways inside its box, not wrapped mid-flag.
        launch = page.locator("#deploy-launch-sglang")
        assert launch.evaluate("t => getComputedStyle(t).whiteSpace") == "pre"
        assert launch.evaluate("t => t.scrollWidth > t.clientWidth")
        launch.evaluate("t => { t.scrollLeft = t.scrollWidth; }")
        assert launch.evaluate("t => t.scrollLeft > 0")  # the end of the line is reachable
        _no_sideways_scroll(page)
    finally:
        context.close()


@pytest.mark.parametrize("slug", [SLUG, KIMI])
def test_the_status_page_at_390_px_breaks_no_flag_path_or_number(board, browser, slug):
    """The share page's tables squeezed numbers ("2.696" over two lines) and its dead ends' stacks
    ("2.10.0+cu128") to one letter's width; the Deploy panel split its flags."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    page = context.new_page()
    try:
        _open(page, board.server.url + board.status[slug])
        assert page.evaluate(BROKEN_TOKENS, "main") == []
        _no_sideways_scroll(page)
    finally:
        context.close()


def test_a_share_link_has_a_copy_button_that_puts_it_on_the_clipboard(board, browser):
    context, page = _page(board, browser, 390, permissions=["clipboard-read", "clipboard-write"])
    try:
        _open(page, f"{board.server.url}/campaigns/{SLUG}")
        row = page.locator("#share-links tbody tr.live").first
        url = row.locator("input.share-url").input_value()
        assert url.startswith(f"{board.server.url}/s/")
        assert row.locator("input.share-url").get_attribute("readonly") is not None  # selectable without scripts
        button = row.locator("button[data-copy]")
        expect(button).to_have_text("Copy")
        button.click()
        expect(button).to_have_text("Copied")
        assert page.evaluate("navigator.clipboard.readText()") == url
        # A link created now (the panel swapped in by htmx) copies too.
        page.fill("#share-links input[name=name]", "board meeting")
        page.click("#share-links button[type=submit]")
        created = page.locator("#share-links tr.created")
        created.locator("button[data-copy]").click()
        expect(created.locator("button[data-copy]")).to_have_text("Copied")
        assert page.evaluate("navigator.clipboard.readText()") == created.locator("input.share-url").input_value()
        _no_sideways_scroll(page)
    finally:
        context.close()


def test_at_1366_px_the_same_tables_stay_tables(board, browser):
    context, page = _page(board, browser, 1366)
    try:
        _open(page, f"{board.server.url}/campaigns/{KIMI}/charts")
        assert page.locator("#reported thead").is_visible()
        assert page.evaluate(CLIPPED, "#reported") == []
        _open(page, f"{board.server.url}/campaigns/{SLUG}/charts")
        table = page.locator("#deploy [data-testid=settings-sglang]")
        assert table.locator("thead").is_visible()
        assert table.locator("tbody tr").first.evaluate("tr => getComputedStyle(tr).display") == "table-row"
        assert page.evaluate(CLIPPED, "#deploy [data-testid=settings-sglang]") == []
        assert page.evaluate(BROKEN_TOKENS, "#deploy") == []
    finally:
        context.close()
