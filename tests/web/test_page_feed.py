"""The page feed (/api/pages/feed, a websocket): who may open it, what it sends after which commits,
coalescing, catching up after a reconnect, and shutdown with feeds open. Real uvicorn (ThreadServer, or
`campaign serve` for SIGTERM), real websockets."""

from __future__ import annotations

import asyncio
import os
import re
import signal

import httpx
from sqlmodel import select

from app.db import make_engine, session_scope
from app.domain.logins import create_api_token
from app.models import Approach, Campaign, Runner
from app.protocol.messages import CloseCode
from app.security import SESSION_COOKIE
from app.services.events import RETRY_MS, PageFeed, dom_event, feed_path, notice
from app.state import app_state
from tests.support.feeds import FeedReader
from tests.support.servers import ThreadServer, start_live_server
from tests.support.trials import (
    ProtocolRunner,
    command_recipe,
    make_settings,
    new_runner_token,
    seed_campaign,
)
from tests.support.waiting import nothing_arrives, until, wait_for


def _ids(srv: ThreadServer, slug: str = "spec") -> tuple[int, int]:
    with session_scope(srv.engine) as s:
        from sqlmodel import select

        campaign = s.exec(select(Campaign).where(Campaign.slug == slug)).one()
        approach = s.exec(select(Approach).where(Approach.campaign_id == campaign.id)).first()
        return campaign.id, approach.id  # type: ignore[return-value,union-attr]


def _seed(srv: ThreadServer) -> tuple[int, int]:
    seed_campaign(srv.engine, "spec", [{"key": "echo", "title": "Echo", "recipe": command_recipe("echo", "hi")}])
    return _ids(srv)


def _feed_url(srv: ThreadServer, *topics: str, since: str = "") -> str:
    return srv.url + feed_path(topics, since)


def _browser(srv: ThreadServer) -> tuple[dict[str, str], dict[str, str]]:
    """Headers and cookies of a logged-in same-origin browser."""
    return {"Origin": srv.url, "Sec-Fetch-Site": "same-origin"}, {SESSION_COOKIE: srv.session_cookie()}


def _refused(url: str, headers: dict[str, str], cookies: dict[str, str] | None = None) -> tuple[int, str]:
    reader = FeedReader(url, headers, cookies)
    reader.close()
    return reader.status, reader.detail


def test_the_feed_needs_a_session_and_this_origin(srv):
    cid, _ = _seed(srv)
    url = _feed_url(srv, f"campaign:{cid}")
    headers, cookies = _browser(srv)
    status, detail = _refused(url, headers)
    assert status == 401 and "Log in" in detail
    assert _refused(url, headers, {SESSION_COOKIE: "forged-" + "x" * 40})[0] == 401
    status, detail = _refused(url, {"Origin": "http://evil.example"}, cookies)
    assert status == 403 and "Cross-origin" in detail
    assert _refused(url, {**headers, "Sec-Fetch-Site": "cross-site"}, cookies)[0] == 403
    for bad in ("campaign:x", "campaign:0", "users", "trial:1;drop", "campaign:" + "9" * 30, "runners%0A"):
        status, detail = _refused(f"{srv.url}/api/pages/feed?topic={bad}", headers, cookies)
        assert status == 422 and "topic" in detail, bad
    assert _refused(_feed_url(srv, *[f"trial:{i}" for i in range(1, 10)]), headers, cookies)[0] == 422
    assert _refused(f"{srv.url}/api/pages/feed", headers, cookies)[0] == 422  # no topic
    # A plain HTTP request is told what the feed is; it is read-only: nothing is written through it.
    with httpx.Client(timeout=10, cookies=cookies) as c:
        r = c.get(url, headers=headers)
        assert r.status_code == 426 and "websocket" in r.json()["detail"] and r.headers["upgrade"] == "websocket"
        assert c.post(url, headers=headers).status_code in (403, 405)
    assert app_state(srv.app).page_feed.count() == 0  # refused requests leave no stream behind


def test_writes_publish_after_commit_and_failed_writes_do_not(srv):
    cid, aid = _seed(srv)
    headers, cookies = _browser(srv)
    feed = FeedReader(_feed_url(srv, f"campaign:{cid}", f"approach:{aid}"), headers, cookies)
    api = srv.api_headers()
    try:
        assert feed.status == 101
        r = httpx.post(
            f"{srv.url}/api/campaigns/spec/approaches/echo/status",
            json={"status": "deferred", "reason": "later"},
            headers=api,
        )
        assert r.status_code == 200, r.text
        got = {feed.next().topic, feed.next().topic}
        assert got == {f"campaign:{cid}", f"approach:{aid}"}
        hub: PageFeed = app_state(srv.app).page_feed
        before = hub.last_seq[f"approach:{aid}"]
        # A write that fails (a dead end needs a reason) rolls back: it publishes nothing.
        r = httpx.post(
            f"{srv.url}/api/campaigns/spec/approaches/echo/status",
            json={"status": "dead_end", "reason": ""},
            headers=api,
        )
        assert r.status_code in (400, 409, 422), r.text
        r = httpx.post(f"{srv.url}/api/campaigns/spec/approaches", json={"key": "two", "title": "Two"}, headers=api)
        assert r.status_code == 201, r.text
        assert feed.until(f"campaign:{cid}").event == "feed:campaign"
        # A sentinel after it on another approach: once seen, every earlier publish has run.
        two = FeedReader(_feed_url(srv, f"approach:{r.json()['id']}"), headers, cookies)
        try:
            r = httpx.post(
                f"{srv.url}/api/campaigns/spec/approaches/two/status",
                json={"status": "deferred", "reason": "sentinel"},
                headers=api,
            )
            assert r.status_code == 200, r.text
            two.next()
        finally:
            two.close()
        assert hub.last_seq[f"approach:{aid}"] == before
        # The campaign's own fields (its name, the profitability inputs) through the API: its pages hear of it.
        seen = hub.seq  # the PATCH's notice is later than every one above (a notice's id is <boot>.<seq>)
        r = httpx.patch(f"{srv.url}/api/campaigns/spec", json={"accept_length": 2.5}, headers=api)
        assert r.status_code == 200, r.text
        assert feed.until(f"campaign:{cid}", after=seen).event == "feed:campaign"
    finally:
        feed.close()


def test_a_trial_and_a_runner_notify_campaign_and_runners_pages(srv):
    cid, aid = _seed(srv)
    headers, cookies = _browser(srv)
    campaign_feed = FeedReader(_feed_url(srv, f"campaign:{cid}"), headers, cookies)
    runners_feed = FeedReader(_feed_url(srv, "runners"), headers, cookies)
    _, token = new_runner_token(srv.engine)
    runner = ProtocolRunner(srv.ws_url, token)
    try:
        assert runners_feed.until("runners").event == "feed:runners"  # hello: online
        r = httpx.post(f"{srv.url}/api/campaigns/spec/run-next", headers=srv.api_headers(), timeout=30)
        assert r.json()["started"], r.text
        d = runner.expect("dispatch")
        assert campaign_feed.until(f"campaign:{cid}").event == "feed:campaign"  # dispatched
        runner.started(d)
        runner.finished(d, exit_code=0, last_seq=-1)
        runner.expect("finished_ack", skip=("ack",))
        campaign_feed.until(f"campaign:{cid}")
        runners_feed.until("runners")
        runner.close()
        runners_feed.until("runners")  # the runner's socket closed: offline
    finally:
        runner.close()
        campaign_feed.close()
        runners_feed.close()


def test_a_reconnecting_feed_is_sent_what_it_missed(srv):
    cid, aid = _seed(srv)
    headers, cookies = _browser(srv)
    feed: PageFeed = app_state(srv.app).page_feed
    mark = feed.mark()
    r = httpx.post(
        f"{srv.url}/api/campaigns/spec/approaches/echo/status",
        json={"status": "deferred", "reason": "later"},
        headers=srv.api_headers(),
    )
    assert r.status_code == 200
    # Nothing changed on the runners topic since the mark; the campaign did.
    reader = FeedReader(_feed_url(srv, f"campaign:{cid}", "runners", since=mark), headers, cookies)
    try:
        first = reader.next()
        assert (first.event, first.topic) == ("feed:campaign", f"campaign:{cid}")
        assert first.id.startswith(feed.boot + ".")
    finally:
        reader.close()
    # Up to date: nothing to catch up on. A mark from another boot (a restarted server): everything.
    up_to_date = FeedReader(_feed_url(srv, f"campaign:{cid}", since=feed.mark()), headers, cookies)
    other_boot = FeedReader(_feed_url(srv, f"campaign:{cid}", "runners", since="0123456789ab.5"), headers, cookies)
    try:
        assert {other_boot.next().topic, other_boot.next().topic} == {f"campaign:{cid}", "runners"}
        httpx.post(
            f"{srv.url}/api/campaigns/spec/approaches", json={"key": "two", "title": "Two"}, headers=srv.api_headers()
        )
        assert up_to_date.next().topic == f"campaign:{cid}"  # the first notice is the new change, not a catch-up
        assert up_to_date.notices.empty()
    finally:
        for r_ in (up_to_date, other_boot):
            r_.close()


def test_bursts_are_coalesced_per_topic():
    """A burst on one topic: the first notice at once, the rest as one notice at the window's end.
    Other topics are not held back. Each notice is one shared string for every stream."""

    async def scenario() -> None:
        feed = PageFeed(coalesce_s=0.05)
        streams = [feed.open(["campaign:1", "runners"]) for _ in range(50)]
        for _ in range(200):
            feed.publish("campaign:1")
        feed.publish("runners")
        assert all(len(s.pending) == 2 for s in streams)  # first campaign notice and runners, at once
        first = [s.take() for s in streams]
        assert all(len(t) == 2 for t in first)
        assert len({id(t[0]) for t in first}) == 1  # the same encoded notice for everyone
        assert feed.delivered == 100
        await until(lambda: feed.delivered > 100, what="the window's end")  # the rest of the burst: one notice
        assert all(list(s.pending) == ["campaign:1"] for s in streams)
        assert feed.delivered == 150
        await nothing_arrives(lambda: feed.delivered - 150, within=0.2, what="a notice after the burst's window")
        for s in streams:
            feed.release(s)
        assert feed.streams == {}
        feed.publish("campaign:1")  # nobody listens: costs nothing per (absent) viewer
        feed.close_all()
        assert feed.open(["runners"]).closed  # after shutdown began, a new stream ends at once

    asyncio.run(scenario())


def test_sigterm_ends_open_page_feeds_and_the_server_exits(tmp_path):
    """A real `campaign serve`: twenty browsers' page feeds open when SIGTERM comes. The server closes
    every socket itself, saying "going away" (the pages reconnect to the next server), and exits."""
    db_url = f"sqlite:///{tmp_path / 'feeds.db'}"
    server = start_live_server(tmp_path, db_url, "--no-runner")
    engine = make_engine(db_url)
    readers: list[FeedReader] = []
    try:
        seed_campaign(engine, "spec", [{"key": "echo", "title": "Echo"}])
        with session_scope(engine) as session:
            token = create_api_token(session, "feeds")
        headers = {"Authorization": f"Bearer {token}", "Origin": server.url}
        with session_scope(engine) as session:
            from sqlmodel import select

            cid = session.exec(select(Campaign.id)).one()
        for i in range(20):
            topics = f"topic=campaign:{cid}&topic=runners" if i % 2 else "topic=runners"
            readers.append(FeedReader(f"{server.url}/api/pages/feed?{topics}", headers))
        assert all(r.status == 101 for r in readers)
        os.killpg(server.proc.pid, signal.SIGTERM)
        for r in readers:
            assert r.ended.wait(30), f"a feed was not ended by the server: {r.error!r}"
            assert r.error is None and r.close_code == CloseCode.GOING_AWAY
        server.proc.wait(timeout=30)  # a hang on SIGTERM fails here
        log = server.log.read_text()
        assert "timeout graceful shutdown exceeded" not in log, log
    finally:
        for r in readers:
            r.close()
        engine.dispose()
        if server.proc.poll() is None:
            os.killpg(server.proc.pid, signal.SIGKILL)


def test_heartbeats_reach_the_runners_page_coalesced_over_their_own_window():
    """Every runner's heartbeat publishes "heartbeats": the first notice goes out at once, the rest of
    the window's beats (from any number of runners) as one notice when it ends; other topics keep
    their short window."""

    async def scenario() -> None:
        feed = PageFeed(coalesce_s=0.05, windows={"heartbeats": 0.3})
        page = feed.open(["runners", "heartbeats"])
        for _ in range(500):  # 50 runners, 10 beats each
            feed.publish("heartbeats")
        assert page.take() == [notice(f"{feed.boot}.1", "heartbeats")]
        feed.publish("runners")  # another topic is not held back by the beats' window
        assert page.take() == [notice(f"{feed.boot}.501", "runners")]
        await until(lambda: feed.delivered >= 3, what="the beats' window end")  # the other 499 beats: one notice
        assert page.take() == [notice(f"{feed.boot}.500", "heartbeats")]
        await nothing_arrives(lambda: feed.delivered - 3, within=0.7, what="a notice in a quiet window")
        assert page.take() == []
        feed.close_all()

    asyncio.run(scenario())


def test_runners_heartbeats_are_one_notice_per_window_on_a_real_server(tmp_path, db_url):
    """Three runners beating fast: an open Runners feed hears of the first beat at once and of the
    others only when the (long) window ends: never one notice per beat."""
    server = ThreadServer(make_settings(tmp_path, db_url, heartbeat_notice_s=3600.0)).start()
    runners: list[ProtocolRunner] = []
    feed: PageFeed = app_state(server.app).page_feed
    headers, cookies = _browser(server)
    reader = FeedReader(_feed_url(server, "heartbeats", "runners", since=feed.mark()), headers, cookies)
    try:
        for i in range(3):
            _, token = new_runner_token(server.engine, f"beating-{i}")
            runners.append(ProtocolRunner(server.ws_url, token))
        for _ in range(10):
            for runner in runners:
                runner.heartbeat()
        assert reader.until("heartbeats").event == "feed:heartbeats"
        for runner in runners:  # each socket's messages are applied in order: its close comes after its beats
            runner.close()

        def offline() -> bool:
            with session_scope(server.engine) as s:
                return not any(r.connected for r in s.exec(select(Runner)).all())

        wait_for(offline, what="the runners to go offline")
        last_beat = feed.last_seq["heartbeats"]
        assert last_beat >= 2  # several batches carried beats
        heard = []  # until a "runners" notice published after the last beat: what was sent before it is here
        while True:
            got = reader.next()
            heard.append(got.topic)
            if got.topic == "runners" and int(got.id.split(".")[1]) > last_beat:
                break
        assert "heartbeats" not in heard  # the rest of the window's beats: not yet, and then as one
    finally:
        reader.close()
        for runner in runners:
            runner.close()
        server.stop()


def test_pages_carry_what_pagefeed_js_needs_and_their_fragments_follow_real_events(srv):
    """The feed element of a page gives its script the feed's address (with the page's mark), the close
    code of an ended session and the retry delay, all from the server; that address opens a feed. Every
    `feed:<kind>` a template's fragment listens for is an event some topic's notice fires."""
    cid, _ = _seed(srv)
    headers, cookies = _browser(srv)
    with httpx.Client(timeout=10, cookies=cookies) as c:
        html = c.get(f"{srv.url}/campaigns/spec").text
    attrs = dict(re.findall(r'(data-feed-[a-z-]+)="([^"]*)"', html))
    assert attrs["data-feed-ended-code"] == str(CloseCode.UNAUTHORIZED)
    assert int(attrs["data-feed-retry-ms"]) == RETRY_MS
    url = attrs["data-feed-url"].replace("&amp;", "&")
    assert url.startswith(
        f"/api/pages/feed?topic=campaign:{cid}&topic=runners&since={app_state(srv.app).page_feed.boot}."
    )
    reader = FeedReader(srv.url + url, headers, cookies)
    try:
        assert reader.status == 101
    finally:
        reader.close()
    # The page's fragments (those it loads after it, the ranking included) follow only events of the topics
    # it subscribes to (tests/web/test_page_events.py checks every template's hx-trigger against the declaration).
    with httpx.Client(timeout=10, cookies=cookies) as c:
        for path in re.findall(r'hx-get="([^"]+)" hx-trigger="load"', html):
            html += c.get(srv.url + path, headers={"HX-Request": "true"}).text
    # every feed of the page: its own and the navigation's inbox (base.html)
    feeds = " ".join(re.findall(r'data-feed-url="([^"]*)"', html))
    subscribed = {dom_event(t) for t in re.findall(r"topic=([a-z0-9:]+)", feeds)}
    listened = {
        name.split()[0]
        for spec in re.findall(r'hx-trigger="([^"]*)"', html)
        for name in spec.split(", ")
        if name.startswith("feed:")
    }
    assert {"feed:campaign", "feed:runners"} <= listened <= subscribed, (listened, subscribed)
