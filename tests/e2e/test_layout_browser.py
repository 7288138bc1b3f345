"""In Chromium, at a phone's 390 px and a laptop's 1366 px: no page of the board scrolls sideways, with a
300-character unbroken title (and reason, name, log line) everywhere it shows, with a verdict pending and
after a field error; and the charts fit their titles, legends and axis titles at 390 px (issue 21)."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
from playwright.sync_api import expect

from app.db import make_engine, session_scope
from app.domain import campaigns, users
from app.domain.sharing import create_share_link, share_token
from app.models import Role
from tests.support.browser import login_context
from tests.support.servers import LiveServer
from tests.support.trials import FINGERPRINT
from tests.support.verdicts import end_trial, runner
from tests.support.verdicts import seed as seed_verdict_campaign

pytestmark = pytest.mark.browser
SLUG = "layout"
LONG = "Unbroken" + "".join(chr(ord("a") + i % 26) for i in range(292))  # 300 characters, no break
WIDTHS = (390, 1366)
# Every element whose right edge passes the viewport, for the failure message.
OFFENDERS = """() => {
  const width = document.documentElement.clientWidth;
  return Array.from(document.querySelectorAll('body *'))
    .filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.right > width + 1; })
    .filter(e => !e.closest('.js-plotly-plot') || e.classList.contains('js-plotly-plot'))
    .slice(0, 8)
    .map(e => `${e.tagName.toLowerCase()}#${e.id}.${e.className && e.className.baseVal === undefined ? e.className : ''}`
      + ` right=${Math.round(e.getBoundingClientRect().right)}`);
}"""


class Board(NamedTuple):
    """The live server, its database engine and the page of each kind to check."""

    server: LiveServer
    engine: Any
    paths: dict[str, str]

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def env(self) -> dict[str, str]:
        return self.server.env


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """A live server with a campaign whose every text is one 300-character word: a dead end, an approach
    waiting for its verdict (a trial ended on a runner of that name), a user of that name, a share link."""
    from tests.support.servers import start_live_server, stop_live_server

    tmp = tmp_path_factory.mktemp("layout")
    server = start_live_server(tmp, f"sqlite:///{tmp / 'live.db'}", "--demo", "--no-runner")
    engine = make_engine(server.env["CAMPAIGN_DATABASE_URL"])
    try:
        seed_verdict_campaign(
            engine,
            {"key": "waiting", "title": LONG, "description": LONG, "evidence": LONG, "requirements": {"gpus": 0}},
            {"key": "dead", "title": LONG + "2", "evidence": LONG, "requirements": {"gpus": 0}},
            slug=SLUG,
        )
        with session_scope(engine) as s:
            campaign = campaigns.get_campaign(s, SLUG)
            campaign.name, campaign.description = LONG, LONG
            s.add(campaign)
            node = runner(s, LONG[:120], FINGERPRINT)  # the longest names each allows
            waiting = campaigns.get_approach(s, campaign, "waiting")
            dead = campaigns.get_approach(s, campaign, "dead")
            first = end_trial(s, dead, node, log=LONG + "\n")
            campaigns.change_status(s, dead, "dead_end", LONG, LONG[:120], trial_id=first.id)
            trial = end_trial(s, waiting, node, log=LONG + "\n" + LONG + "\n")
            users.create_user(s, LONG[: users.NAME_MAX], Role.operator)
            link = create_share_link(s, campaign, LONG[:120], "admin")
            paths = {
                "campaigns": "/",
                "campaign": f"/campaigns/{SLUG}",
                "approach": f"/campaigns/{SLUG}/approaches/waiting",
                "trial": f"/trials/{trial.id}",
                "charts": f"/campaigns/{SLUG}/charts",
                "kimi charts": "/campaigns/kimi-k25-eagle3/charts",
                "compare": f"/campaigns/{SLUG}/compare?trial={trial.id}&trial={first.id}",
                "runners": "/runners",
                "users": "/users",
                "tokens": "/tokens",
                "sessions": "/sessions",
                "status page": f"/s/{share_token(link, server.env['CAMPAIGN_SECRET_KEY'])}",
            }
        yield Board(server, engine, paths)
    finally:
        engine.dispose()
        stop_live_server(server)


def _page(board, browser, width: int):
    context, page = login_context(browser, board.url, board.engine, viewport={"width": width, "height": 900})
    page.wait_for_url(f"{board.url}/")
    return context, page


def _no_sideways_scroll(page, what: str) -> None:
    # Wait for what loads after the page (htmx fragments, charts), then measure.
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => !document.querySelector('.htmx-request')")
    scroll, width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert scroll <= width, f"{what}: scrollWidth {scroll} > {width}: {page.evaluate(OFFENDERS)}"
    if width >= 1000:  # on a laptop no table hides its status and action columns in a sideways scroll either
        hidden = page.evaluate(
            "Array.from(document.querySelectorAll('table, .table-scroll'))"
            ".filter(t => t.scrollWidth > t.clientWidth + 1).map(t => `${t.className} ${t.scrollWidth}`)"
        )
        assert not hidden, f"{what}: tables wider than their box: {hidden}"


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_scrolls_sideways_with_a_300_character_title(board, browser, width):
    context, page = _page(board, browser, width)
    try:
        for what, path in board.paths.items():
            page.goto(board.url + path)
            _no_sideways_scroll(page, f"{what} at {width} px")
        # The campaign page with its verdict pending (the verdict card) and the trial page's verdict form.
        page.goto(board.url + board.paths["campaign"])
        page.locator("#campaign-verdicts .verdicts").wait_for()
        _no_sideways_scroll(page, f"campaign page, verdict pending, at {width} px")
        page.goto(board.url + board.paths["trial"])
        page.locator("#verdict-box[data-verdict=pending] form").wait_for()
        _no_sideways_scroll(page, f"trial page, verdict form, at {width} px")
        # The inventory's status popover after a field error (dead end without a reason).
        page.goto(board.url + board.paths["campaign"])
        row = page.locator("#approach-dead")
        row.locator("details.status-change summary").click()
        row.locator("select[name=status]").select_option("deferred")
        row.locator("input[name=reason]").fill("")
        row.locator("button[type=submit]").click()
        row.locator(".field-error").wait_for()
        _no_sideways_scroll(page, f"campaign page, status popover with a field error, at {width} px")
    finally:
        context.close()


# Each top-bar control: its height and how many line boxes its text takes.
TOPBAR = """() => {
  const header = document.querySelector('header.topbar');
  const items = Array.from(header.querySelectorAll('nav a, .brand, .logout button')).map(e => {
    const range = document.createRange(); range.selectNodeContents(e);
    const lines = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
    return {text: e.textContent.trim(), lines: lines.size, height: e.getBoundingClientRect().height};
  });
  return {height: header.getBoundingClientRect().height, items};
}"""


def test_the_admins_top_bar_at_390_px_keeps_each_link_whole(board, browser):
    """Issue 32 item 11: at 390 px the admin's links broke letter by letter and the header was 876 px tall.
    Each link is one line (whole words), and the bar a few rows high at most."""
    context, page = _page(board, browser, 390)
    try:
        for path in ("/", board.paths["campaign"]):
            page.goto(board.url + path)
            bar = page.evaluate(TOPBAR)
            names = [i["text"] for i in bar["items"]]
            assert {"Users", "Tokens", "Notifications", "Sessions", "Log out"} <= set(names), names  # the admin's
            wrapped = [i for i in bar["items"] if i["lines"] != 1]
            assert wrapped == [], wrapped
            assert bar["height"] <= 160, bar
    finally:
        context.close()


CHART_PARTS = """id => {
  const div = document.getElementById(id), box = div.getBoundingClientRect();
  const parts = Array.from(div.querySelectorAll('.gtitle, .g-gtitle text, .legendtext, .xtitle, .ytitle, .annotation-text'));
  return parts.map(p => { const r = p.getBoundingClientRect();
    return {cls: p.getAttribute('class'), text: p.textContent.slice(0, 60), left: r.left - box.left, right: r.right - box.left,
            top: r.top - box.top, bottom: r.bottom - box.top, width: box.width, height: box.height}; });
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_charts_fit_their_text(board, browser, width):
    """Titles, subtitles, legend entries, axis titles and point labels lie inside each chart (none cut, as the
    throughput chart's axis title was), the axis title above the legend."""
    context, page = _page(board, browser, width)
    try:
        for path in (board.paths["kimi charts"], board.paths["charts"], board.paths["status page"]):
            page.goto(board.url + path)
            page.wait_for_load_state("networkidle")
            ids = page.evaluate(
                "Array.from(document.querySelectorAll('[data-figure]')).filter(d => !d.hidden).map(d => d.id)"
            )
            assert ids, path
            for div_id in ids:
                page.wait_for_function(
                    "id => { const d = document.getElementById(id); return d && d.querySelector('.main-svg'); }",
                    arg=div_id,
                )
                parts = page.evaluate(CHART_PARTS, div_id)
                assert any(p["cls"] == "gtitle" for p in parts), (path, div_id)
                for p in parts:
                    inside = -1 <= p["left"] and p["right"] <= p["width"] + 1 and -1 <= p["top"] <= p["height"]
                    assert inside, f"{path} #{div_id}: {p}"
                # Top down, nothing on top of anything: the heading above the plot's axis title, the legend below it.
                x_title = [p for p in parts if p["cls"] == "xtitle"]
                legend = [p for p in parts if p["cls"] == "legendtext"]
                if x_title and legend:
                    assert x_title[0]["bottom"] <= min(p["top"] for p in legend) + 1, (path, div_id, x_title, legend)
    finally:
        context.close()


def test_a_10000_character_reason_folds_and_its_whole_text_is_one_click_away(board, browser):
    """Issue 32 item 15: a 10,000-character verdict reason made one inventory row 5,862 px tall."""
    from app.schemas import ApproachCreate

    reason = " ".join(f"word{i}" for i in range(1700))[:10_000]
    with session_scope(board.engine) as s:
        campaign = campaigns.get_campaign(s, SLUG)
        approach = campaigns.add_approach(s, campaign, ApproachCreate(key="long-reason", title="Long"), actor="t")
        campaigns.change_status(s, approach, "dead_end", reason, "t")
    for width in WIDTHS:
        context, page = _page(board, browser, width)
        try:
            page.goto(board.url + board.paths["campaign"])
            row = page.locator("#approach-long-reason")
            assert row.bounding_box()["height"] < 400, row.bounding_box()
            cell = row.locator("td.reason details.fold")
            cell.locator("summary").click()
            assert cell.locator(".fold-body").inner_text().strip() == reason  # the whole text, reachable
            assert row.bounding_box()["height"] < 600  # open, the text scrolls inside its box
        finally:
            context.close()


# Every cell of the table under `sel` is in view: none clipped, no sideways scroll inside the table either
# (seven columns at 390 px were cut off at the card's edge: issue 43, item 9).
CELLS_CLIPPED = """(sel) => {
  const table = document.querySelector(sel + ' table');
  const width = document.documentElement.clientWidth;
  const out = Array.from(table.querySelectorAll('td')).filter(td => td.getBoundingClientRect().right > width + 1
    || td.scrollWidth > td.clientWidth + 1).map(td => td.textContent.trim().slice(0, 30));
  if (table.scrollWidth > table.clientWidth + 1) out.push(`table ${table.scrollWidth} > ${table.clientWidth}`);
  return out;
}"""


def test_the_recent_trials_table_at_390_px_shows_every_column(board, browser):
    context, page = _page(board, browser, 390)
    try:
        page.goto(board.url + board.paths["campaign"])
        page.locator("#recent-trials table.trials").wait_for()
        assert page.evaluate(CELLS_CLIPPED, "#recent-trials") == []
        started = page.locator("#recent-trials tbody tr").first.locator("td[data-label=Started]")
        expect(started).to_be_visible()
        started.scroll_into_view_if_needed()  # down the page, never sideways
        expect(started).to_be_in_viewport()
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    finally:
        context.close()
