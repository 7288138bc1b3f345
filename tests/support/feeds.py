"""A page feed (/api/pages/feed, a websocket) read on a thread, as a page's static/pagefeed.js would."""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin


@dataclass
class Notice:
    id: str
    topic: str
    event: str  # the DOM event it fires: feed:<kind>


class FeedReader:
    """One open feed, read on a thread: its notices in a queue; `status` 101 once open, else the HTTP
    status of the refusal (`detail` its reason); `ended` once the server closed it, with `close_code`."""

    def __init__(self, url: str, headers: dict[str, str], cookies: dict[str, str] | None = None) -> None:
        self.notices: queue.Queue[Notice] = queue.Queue()
        self.opened = threading.Event()
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self.status = 0
        self.detail = ""
        self.close_code: int | None = None
        self.socket: ClientConnection | None = None
        headers = dict(headers)
        origin = headers.pop("Origin", None)
        if cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        ws_url = "ws" + url.removeprefix("http")
        self.thread = threading.Thread(target=self._run, args=(ws_url, origin, headers), daemon=True)
        self.thread.start()
        assert self.opened.wait(30), "the feed did not answer"

    def _run(self, url: str, origin: str | None, headers: dict[str, str]) -> None:
        try:
            with connect(
                url, origin=Origin(origin) if origin else None, additional_headers=headers, open_timeout=30
            ) as socket:
                self.socket, self.status = socket, 101
                self.opened.set()
                try:
                    for message in socket:
                        data = json.loads(message)
                        self.notices.put(Notice(data["id"], data["topic"], data["event"]))
                except ConnectionClosed:
                    pass
                self.close_code = socket.close_code
                if socket.protocol.close_rcvd is not None:  # the server closed it (not a dropped connection)
                    self.ended.set()
        except InvalidStatus as refused:
            self.status = refused.response.status_code
            body = refused.response.body or b"{}"
            self.detail = json.loads(body).get("detail", "") if body.startswith(b"{") else body.decode()
            self.opened.set()
        except BaseException as exc:
            self.error = exc
            self.opened.set()

    def next(self, timeout: float = 15) -> Notice:
        return self.notices.get(timeout=timeout)

    def until(self, topic: str, timeout: float = 15, after: int = -1) -> Notice:
        """The next notice of `topic`, skipping those of other topics and those of the page feed's sequence
        number `after` or earlier (a notice's id is `<boot>.<seq>`)."""
        while True:
            n = self.next(timeout)
            if n.topic == topic and int(n.id.rpartition(".")[2]) > after:
                return n

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()
