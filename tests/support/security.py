"""Helpers for the security tests: raw requests with any Host header, the CSRF token of a page, an API client."""

from __future__ import annotations

import re
import socket
from urllib.parse import urlsplit

import httpx


def csrf_from_page(html: str) -> str:
    """The CSRF token a page hands htmx (hx-headers on <body>)."""
    match = re.search(r'hx-headers=\'\{"X-CSRF-Token": "([^"]+)"\}\'', html)
    assert match, "page carries no CSRF token"
    return match.group(1)


def websocket_status(url: str, path: str, headers: dict[str, str]) -> int:
    """Open a websocket handshake by hand (any Host header) and return the HTTP status answered."""
    parts = urlsplit(url)
    lines = [
        f"GET {path} HTTP/1.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status_line = sock.makefile("rb").readline().decode()
    return int(status_line.split()[1])


def login(server_url: str, login_url: str) -> httpx.Client:
    """An httpx client holding a fresh session cookie from a one-time login URL."""
    client = httpx.Client(base_url=server_url, timeout=30)
    parts = urlsplit(login_url)
    r = client.get(f"{parts.path}?{parts.query}", follow_redirects=False)
    assert r.status_code == 303, r.text
    return client


DB_PASSWORD = "db-pass-" + "9f3c1e7a"  # in the database URL: a secret trials must not see


def api_client(server) -> httpx.Client:
    token = server.cli("token", "create", "security-tests").stdout.strip()
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
