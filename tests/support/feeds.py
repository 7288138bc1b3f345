"""A page feed (/api/pages/feed, server-sent events) read on a thread, as a browser's EventSource would."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import httpx


@dataclass
class Notice:
    id: str
    event: str
    data: str


class FeedReader:
    """One open feed, read on a thread: its notices in a queue, `ended` once the server ended it cleanly."""

    def __init__(self, url: str, headers: dict[str, str], cookies: dict[str, str] | None = None) -> None:
        self.notices: queue.Queue[Notice] = queue.Queue()
        self.opened = threading.Event()
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self.status = 0
        self.client = httpx.Client(timeout=httpx.Timeout(60, read=60), cookies=cookies)
        self.thread = threading.Thread(target=self._run, args=(url, headers), daemon=True)
        self.thread.start()
        assert self.opened.wait(30), "the feed did not answer"

    def _run(self, url: str, headers: dict[str, str]) -> None:
        try:
            with self.client.stream("GET", url, headers=headers) as r:
                self.status = r.status_code
                self.opened.set()
                if r.status_code != 200:
                    return
                fields: dict[str, str] = {}
                for line in r.iter_lines():
                    if not line:
                        if "event" in fields:
                            self.notices.put(Notice(fields.get("id", ""), fields["event"], fields.get("data", "")))
                        fields = {}
                    elif not line.startswith(":"):
                        name, _, value = line.partition(":")
                        fields[name] = value.strip()
            self.ended.set()
        except BaseException as exc:
            self.error = exc
            self.opened.set()

    def next(self, timeout: float = 15) -> Notice:
        return self.notices.get(timeout=timeout)

    def until(self, data: str, timeout: float = 15) -> Notice:
        while True:
            n = self.next(timeout)
            if n.data == data:
                return n

    def close(self) -> None:
        self.client.close()
