"""Page workers (app/pageworkers/): a real `campaign serve --workers N` hands reads to worker processes and
keeps writes, sockets and the page feed; a worker that dies is replaced without a failed read; workers end
with the hub, however it ends."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from app.db import make_engine, session_scope
from app.domain.logins import create_api_token
from app.main import create_app
from app.pageworkers.pool import PageWorkerPool
from tests.support.feeds import FeedReader
from tests.support.servers import LiveServer, start_live_server, stop_live_server
from tests.support.trials import make_settings
from tests.support.waiting import until


def workers_of(server: LiveServer) -> list[psutil.Process]:
    """The hub's live page-worker children (a killed one is a zombie until the hub reaps it)."""
    found = []
    for child in psutil.Process(server.proc.pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "app.pageworkers.worker" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            pass
    return found


def health(server: LiveServer) -> dict:
    return httpx.get(server.url + "/healthz", timeout=10).json()


def wait_ready(server: LiveServer, count: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = health(server).get("page_workers")
        if workers and workers["ready"] == count and len(workers_of(server)) == count:
            return workers
        time.sleep(0.1)
    raise AssertionError(f"page workers not ready: {health(server)}\n{server.log.read_text()}")


@pytest.fixture
def board(tmp_path: Path, db_url: str) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    server = start_live_server(tmp_path, db_url, "--no-runner", "--workers", "2")
    engine = make_engine(db_url)
    try:
        with session_scope(engine) as session:
            token = create_api_token(session, "workers")
        wait_ready(server, 2)
        yield server, {"Authorization": f"Bearer {token}", "Origin": server.url}
    finally:
        engine.dispose()
        stop_live_server(server)


@pytest.mark.both_databases  # reads in other processes see the hub's commits
def test_reads_go_to_the_workers_writes_to_the_hub_and_each_sees_the_others(board):
    server, headers = board
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        before = health(server)["page_workers"]
        for i in range(5):
            r = client.post("/api/campaigns", json={"slug": f"c{i}", "name": f"Campaign {i}"})  # the hub writes
            assert r.status_code == 201, r.text
            listed = client.get("/api/campaigns")  # a worker reads, at once
            assert f"c{i}" in {c["slug"] for c in listed.json()}
            page = client.get(f"/campaigns/c{i}")
            assert page.status_code == 200 and f"Campaign {i}" in page.text
            assert page.headers["content-security-policy"]  # the worker's own middleware ran
        assert client.get("/api/campaigns/nope").status_code == 404  # errors come back as they are
        after = health(server)["page_workers"]
    assert after["served"] - before["served"] == 11  # every read above, and only the reads
    assert after["by_hub"] == before["by_hub"] == 0
    assert {w.pid for w in workers_of(server)} and all(w.is_running() for w in workers_of(server))


def test_a_page_read_by_a_worker_carries_the_hubs_feed_mark(board):
    """The page's mark (what its feed may have missed) is the hub's, even when a client forges the header
    the hub uses to forward it: a feed opened with it reports nothing missed, and a later change."""
    server, headers = board
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        assert client.post("/api/campaigns", json={"slug": "marks", "name": "Marks"}).status_code == 201
        campaign_id = client.get("/api/campaigns/marks").json()["id"]
        page = client.get("/campaigns/marks", headers={"x-campaign-feed-mark": "ffffffffffff.0"})
        since = re.search(r"since=([0-9a-f]{12}\.[0-9]+)", page.text)
        assert since, page.text[:2000]
        reader = FeedReader(f"{server.url}/api/pages/feed?topic=campaign:{campaign_id}&since={since.group(1)}", headers)
        try:
            assert reader.status == 101
            r = client.post("/api/campaigns/marks/approaches", json={"key": "nccl", "title": "NCCL"})
            assert r.status_code == 201, r.text
            # The first notice is this change's (after the mark), not a catch-up sent at once on open (it
            # would carry the mark the feed had then: the page's, nothing having changed since).
            first = reader.next()
            assert first.topic == f"campaign:{campaign_id}"
            page_boot, page_seq = since.group(1).split(".")
            assert first.id.split(".")[0] == page_boot, "the page's mark was not the hub's"
            assert int(first.id.split(".")[1]) > int(page_seq), "the topic came back as missed"
        finally:
            reader.close()


def test_a_killed_worker_is_replaced_and_no_read_fails(board):
    server, headers = board
    old = {w.pid for w in workers_of(server)}
    victim = workers_of(server)[0]
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        victim.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 60
        statuses = []
        while time.monotonic() < deadline:
            statuses.append(client.get("/api/campaigns").status_code)
            workers = health(server)["page_workers"]
            now = {w.pid for w in workers_of(server)}
            if workers["ready"] == 2 and len(now) == 2 and now != old:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the worker was not replaced: {health(server)}")
    assert set(statuses) == {200}
    assert victim.pid not in {w.pid for w in workers_of(server)}
    assert "page worker" in server.log.read_text()  # the hub said what happened


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_workers_end_with_the_hub(tmp_path, how):
    server = start_live_server(tmp_path, f"sqlite:///{tmp_path / 'w.db'}", "--no-runner", "--workers", "2")
    try:
        wait_ready(server, 2)
        workers = workers_of(server)
        folders = {Path(w.cmdline()[w.cmdline().index("--uds") + 1]).parent for w in workers}
        os.kill(server.proc.pid, getattr(signal, how))  # the hub only, not its process group
        server.proc.wait(timeout=30)
        gone, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive, f"page workers outlived the hub ({how}): {[p.pid for p in alive]}"
        if how == "SIGTERM":
            assert not any(f.exists() for f in folders)  # the sockets' folder is removed on a clean stop
    finally:
        stop_live_server(server)


def test_a_page_worker_refuses_writes_and_websockets(tmp_path, db_url):
    """Only the hub forwards to a worker, and only reads; anything else that reaches one is refused."""
    app = create_app(make_settings(tmp_path, db_url), role="pages")
    with TestClient(app, base_url="http://localhost") as client:
        assert client.get("/healthz").json()["role"] == "pages"
        r = client.post("/api/campaigns", json={"slug": "x", "name": "X"})
        assert r.status_code == 421 and "reads only" in r.json()["detail"]
        with pytest.raises(WebSocketDisconnect) as closed:
            with client.websocket_connect("/api/trials/1/logs/ws") as ws:
                ws.receive_text()
        assert closed.value.code == 1008


def test_without_workers_the_hub_serves_everything(tmp_path):
    server = start_live_server(tmp_path, f"sqlite:///{tmp_path / 'w.db'}", "--no-runner", "--workers", "0")
    try:
        assert "page_workers" not in health(server)
        assert workers_of(server) == []
        assert httpx.get(server.url + "/login").status_code == 200
    finally:
        stop_live_server(server)


def test_the_relay_carries_no_one_elses_cookies_or_credentials(board):
    """The hub's client to its workers keeps no cookie jar and adds no header: a logged-in browser's reads
    and an anonymous one's, interleaved, each get their own answer."""
    server, _ = board
    with httpx.Client(base_url=server.url, timeout=30) as browser, httpx.Client(base_url=server.url) as stranger:
        r = browser.get(server.login_url.replace(server.url, ""))  # the hub spends the link, sets the cookie
        assert r.status_code in (200, 303), r.text
        assert browser.cookies.get("cb_session")
        for _ in range(5):
            page = browser.get("/")
            assert page.status_code == 200 and 'action="/logout"' in page.text  # a logged-in page
            anonymous = stranger.get("/", follow_redirects=False)
            assert anonymous.status_code in (303, 307) and "/login" in anonymous.headers["location"]
            assert stranger.get("/api/campaigns").status_code == 401
    assert health(server)["page_workers"]["served"] >= 15


def test_a_worker_that_keeps_failing_to_start_is_retried_less_and_less_often(tmp_path, caplog):
    """Started again after 1 s, then 2 s, ... (not every second forever), and meanwhile the hub serves."""
    pool = PageWorkerPool(make_settings(tmp_path), 1)
    pool.argv = lambda worker: [sys.executable, "-c", "import sys; sys.exit(3)"]  # type: ignore[method-assign]

    async def scenario() -> None:
        pool.start()
        worker = pool.workers[0]
        await until(lambda: worker.backoff_s >= 2, what="the second failed start's longer wait")
        assert pool.pick() is None  # never ready: every read is the hub's
        assert worker.starts == 2 and worker.backoff_s == 2  # 1 s after the first, 2 s after the second
        await pool.stop()

    with caplog.at_level(logging.WARNING, logger="app.pageworkers.pool"):
        asyncio.run(scenario())
    assert "starting it again in 1 s" in caplog.text and "starting it again in 2 s" in caplog.text
    assert not pool.folder or not pool.folder.exists()
