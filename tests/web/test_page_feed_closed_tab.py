"""Issue 43, item 9: a closed browser tab must not log `Task exception was never retrieved`
(WebSocketDisconnect) from app/api/pagefeed.py. The tab goes while a notice is being sent: the sender fails
with WebSocketDisconnect in the same turn the reader sees the disconnect; every task's end is collected."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from fastapi import WebSocketDisconnect
from starlette.datastructures import Headers, QueryParams

from app.api import pagefeed
from app.services import access
from app.state import app_state


class ClosedTab:
    """The page's socket, gone: it hears the disconnect at once and any send fails."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state = app.state  # app_state() of a non-HTTPConnection reads its .state: the app's
        self.query_params = QueryParams("topic=runners&since=0")
        self.headers = Headers({})
        self.scope: dict[str, Any] = {"type": "websocket", "app": app}

    async def accept(self) -> None:
        return None

    async def receive(self) -> dict[str, Any]:
        return {"type": "websocket.disconnect", "code": 1001}

    async def send_text(self, text: str) -> None:
        raise WebSocketDisconnect(1001)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        return None


def test_a_closed_tab_leaves_no_unretrieved_task_exception(app, client, monkeypatch):
    feed = app_state(app).page_feed
    monkeypatch.setattr(pagefeed, "_refusal", lambda ws, topics: None)  # a logged-in page of this board
    monkeypatch.setattr(access, "credential", lambda conn: None)
    monkeypatch.setattr(feed, "missed", lambda topics, since: list(topics))  # a notice to send at once
    logged: list[str] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: logged.append(context["message"]))
        await pagefeed.page_feed(ClosedTab(app))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        gc.collect()

    asyncio.run(main())
    gc.collect()
    assert not [m for m in logged if "never retrieved" in m], logged
