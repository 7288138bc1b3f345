"""The application's state, typed: one `AppState`, made once by app/main.create_app (the lifespan adds its
tasks), and reached from a route, a socket or a service through `app_state(request_or_websocket_or_app)`.
Nothing else lives on Starlette's untyped `app.state`."""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from starlette.applications import Starlette
from starlette.requests import HTTPConnection

if TYPE_CHECKING:  # types only: these modules read the state through app_state (no import cycle at run time)
    from jinja2_fragments.fastapi import Jinja2Blocks
    from sqlalchemy.engine import Engine

    from app.config import Settings
    from app.db import Database
    from app.domain.logs import MetricExtractor
    from app.live import LiveHub
    from app.pageworkers.pool import PageWorkerPool
    from app.security import LoginLimiter, SessionSigner
    from app.services.access_watch import AccessWatch
    from app.services.page_feed import PageFeed

StateOwner = HTTPConnection | Starlette  # what app_state reads the state from
STATE_KEY = "board"  # the one attribute of Starlette's app.state


@dataclass
class AppState:
    settings: Settings
    role: Literal["hub", "pages"]
    db: Database  # the engine, and run_in_tx / read_in_tx for async code
    templates: Jinja2Blocks
    session_signer: SessionSigner
    login_limiter: LoginLimiter
    page_workers: PageWorkerPool | None  # the hub's page-worker processes (app/pageworkers/), if any
    hub: LiveHub  # live logs and trial state to browsers, connected runner sockets
    metric_extractor: MetricExtractor
    page_feed: PageFeed  # page events (app/services/events.py)
    access_watch: AccessWatch  # open streams' credentials (app/services/access.py)
    # Set by the lifespan (app/services/lifespan.start):
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # background tasks, stopped in order
    trace_queue: asyncio.Queue[int] | None = None  # artifact ids of uploaded traces to read
    embedded_runner: subprocess.Popen[bytes] | None = None

    @property
    def engine(self) -> Engine:
        return self.db.engine

    def install(self, app: Starlette) -> None:
        setattr(app.state, STATE_KEY, self)


def app_state(owner: StateOwner) -> AppState:
    """The state of the app that serves this request or websocket (or of this app)."""
    app = owner.app if isinstance(owner, HTTPConnection) else owner
    state = getattr(app.state, STATE_KEY, None)
    if not isinstance(state, AppState):
        raise RuntimeError("no AppState on this app: app/main.create_app makes it")
    return state
