"""Property 5: bounded input before parsing, against a real `campaign serve` (uvicorn).

Bodies over a route's limit get 413 before the rest is read (declared or streamed); anonymous
writes get 401 before their body is read; campaign files are capped; every numeric campaign field
is bounded (2**63 is a 422 naming the field, never a 500), over the API, forms and campaign files.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from tests.support.security import api_client, csrf_from_page, login
from tests.support.servers import LiveServer, start_live_server, stop_live_server

HUGE = 100 * 1024 * 1024


class _Server(LiveServer):
    """The live server and an API client with a token."""

    def __init__(self, live: LiveServer) -> None:
        super().__init__(live.proc, live.url, live.login_url, live.env, live.log)
        self.api = api_client(live)


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bounded")
    server = _Server(start_live_server(tmp, f"sqlite:///{tmp / 'b.db'}", "--no-runner"))
    assert server.api.post("/api/campaigns", json={"slug": "c", "name": "C"}).status_code == 201
    try:
        yield server
    finally:
        stop_live_server(server)


def _raw_post(url: str, path: str, headers: dict[str, str], body_prefix: bytes) -> tuple[int, bytes]:
    """Send a request head and only the start of its body; return the status and what came back."""
    parts = urlsplit(url)
    head = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", *[f"{k}: {v}" for k, v in headers.items()]]
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body_prefix)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return int(data.split()[1]), data


def _server_rss(board) -> int:
    proc = psutil.Process(board.proc.pid)
    return max([proc.memory_info().rss] + [c.memory_info().rss for c in proc.children(recursive=True)])


def test_declared_huge_bodies_are_refused_before_reading(board):
    token = board.api.headers["Authorization"]
    before = _server_rss(board)
    for auth in ({}, {"Authorization": token}):
        for path in ("/api/campaigns", "/api/campaigns/import", "/campaigns"):
            status, _ = _raw_post(
                board.url,
                path,
                {"Content-Length": str(HUGE), "Content-Type": "application/json", **auth},
                b"{" + b" " * 1000,
            )
            assert status == 413, (path, auth, status)
    assert _server_rss(board) - before < 50 * 1024 * 1024


def test_streamed_bodies_stop_at_the_limit(board):
    def chunks():
        for _ in range(64):
            yield b"x" * (256 * 1024)  # 16 MiB in all, no Content-Length

    before = _server_rss(board)
    for _ in range(4):
        try:
            r = board.api.post("/api/campaigns", content=chunks(), headers={"Content-Type": "application/json"})
            assert r.status_code == 413, r.text
        except httpx.WriteError:
            pass  # the server answered 413 and closed while we were still sending: also a refusal
    assert _server_rss(board) - before < 50 * 1024 * 1024


def test_anonymous_writes_are_refused_before_the_body_is_read(board):
    body = b'{"slug": "anon", "name": "' + b"a" * 500_000 + b'"}'
    status, data = _raw_post(
        board.url, "/api/campaigns", {"Content-Length": str(len(body)), "Content-Type": "application/json"}, body[:100]
    )
    assert status == 401, data  # answered with only 100 of the body's bytes sent


def test_campaign_files_are_capped(board):
    big = "format: campaign-board/v1\ncampaign: {slug: big, name: Big}\napproaches: []\n# " + "x" * (3 * 1024 * 1024)
    r = board.api.post("/api/campaigns/import", content=big, headers={"Content-Type": "application/x-yaml"})
    assert r.status_code == 413 and "at most" in r.json()["detail"]
    assert board.api.get("/api/campaigns/big").status_code == 404


@pytest.mark.parametrize(
    "field",
    [
        "verify_tokens",
        "hidden_size",
        "draft_steps",
        "allreduces_per_verify",
        "baseline_tok_s",
        "accept_length",
        "draft_step_ms",
        "verify_compute_ms",
    ],
)
def test_numeric_fields_are_bounded_everywhere(board, field):
    for value in (2**63, 2**64 + 5, 10**30):
        r = board.api.post("/api/campaigns", json={"slug": "n", "name": "N", field: value})
        assert r.status_code == 422 and r.json()["field"] == field, r.text
        r = board.api.patch("/api/campaigns/c", json={field: value})
        assert r.status_code == 422 and r.json()["field"] == field, r.text
        yaml = f"format: campaign-board/v1\ncampaign: {{slug: y, name: Y, {field}: {value}}}\napproaches: []\n"
        r = board.api.post("/api/campaigns/import", content=yaml, headers={"Content-Type": "application/x-yaml"})
        assert r.status_code == 422 and field in r.json()["detail"], r.text
    r = board.api.post("/api/campaigns/c/approaches/x/move", json={"position": 2**63})
    assert r.status_code == 422


def test_page_forms_are_bounded_too(board):
    client = login(board.url, board.login_url)
    token = csrf_from_page(client.get("/").text)
    r = client.post(
        "/campaigns", data={"slug": "f", "name": "x" * 2_000_000, "csrf_token": token}, headers={"Origin": board.url}
    )
    assert r.status_code == 413
