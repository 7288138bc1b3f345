"""The FastAPI application: settings, database, routers, static files."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Literal

from fastapi import FastAPI
from fastapi.responses import FileResponse
from sqlalchemy import Engine
from starlette.middleware.trustedhost import TrustedHostMiddleware

from app import __version__
from app.api import answer as api_answer
from app.api import artifacts as api_artifacts
from app.api import campaigns as api_campaigns
from app.api import inbox as api_inbox
from app.api import livelog, pagefeed, runner_socket
from app.api import notifications as api_notifications
from app.api import planning as api_planning
from app.api import runners as api_runners
from app.api import search as api_search
from app.api import share_links as api_share_links
from app.api import trials as api_trials
from app.api import users as api_users
from app.config import Settings, get_settings, resource_dir
from app.db import Database, make_engine, migrate
from app.domain.logs import MetricExtractor
from app.errors import install_error_handlers, install_openapi
from app.live import LiveHub
from app.middleware import RUNNER_UPLOADS, AuthenticateFirst, BodyLimit, SecurityHeaders
from app.pageworkers.pool import PageWorkerPool
from app.pageworkers.proxy import FromHub, PageProxy
from app.security import LoginLimiter, SessionSigner
from app.services import events
from app.services import lifespan as server_lifespan
from app.services.access_watch import AccessWatch
from app.state import AppState, app_state
from app.templating import ASSET_PREFIX, RevalidatedStatic, VersionedStatic, make_templates
from app.web import artifacts as web_artifacts
from app.web import auth as web_auth
from app.web import campaigns as web_campaigns
from app.web import changes as web_changes
from app.web import charts as web_charts
from app.web import compare as web_compare
from app.web import docs as web_docs
from app.web import inbox as web_inbox
from app.web import notifications as web_notifications
from app.web import planning as web_planning
from app.web import replay as web_replay
from app.web import runners as web_runners
from app.web import search as web_search
from app.web import share as web_share
from app.web import trial_list as web_trial_list
from app.web import trials as web_trials
from app.web import users as web_users
from app.web import verdicts as web_verdicts

# Order matters only for overlapping paths.
ROUTERS = [
    web_auth.router,
    web_docs.router,
    web_campaigns.router,
    web_changes.router,
    api_campaigns.router,
    api_answer.router,
    api_runners.router,
    api_share_links.router,
    runner_socket.router,
    api_trials.router,
    livelog.router,
    pagefeed.router,
    web_trials.router,
    web_runners.router,
    web_trial_list.router,
    web_charts.router,
    web_compare.router,
    web_share.router,
    web_verdicts.router,
    web_users.router,
    api_users.router,
    api_notifications.router,
    api_artifacts.router,
    web_artifacts.router,
    web_notifications.router,
    web_planning.router,
    web_replay.router,
    api_planning.router,
    web_inbox.router,
    api_inbox.router,
    web_search.router,
    api_search.router,
]


AppRole = Literal["hub", "pages"]  # the hub, or a page worker behind it


def create_app(
    settings: Settings | None = None,
    *,
    run_migrations: bool = True,
    role: AppRole = "hub",
    page_workers: int = 0,
) -> FastAPI:
    """The hub (sockets, writes, the live hub; with `page_workers`, reads go to that many page-worker
    processes) or a page worker (reads only, behind a hub): app/pageworkers/."""
    settings = settings or get_settings()
    url = settings.resolved_database_url()
    if run_migrations:
        migrate(url)
    engine = make_engine(url)
    app = FastAPI(
        title="Campaign Board",
        version=__version__,
        lifespan=_lifespan(engine, role),
        description="Optimization campaigns for LLM inference on GPU nodes: approaches, trials, verdicts.",
        docs_url=None,
        redoc_url=None,  # /docs is app/web/docs.py: Swagger UI from static/vendor, no CDN, no inline script
    )
    state = _app_state(settings, engine, role, page_workers)
    state.install(app)
    install_error_handlers(app)
    _add_middleware(app, state)
    _add_routes(app, state)
    install_openapi(app)
    return app


def _lifespan(engine: Engine, role: AppRole) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The hub's: app/services/lifespan.py, then its page workers; a page worker's only settles its heap.
    Either way the engine is disposed of at the end."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            if role == "pages":
                server_lifespan.settle_heap()  # as the hub does
                yield
                return
            async with server_lifespan.lifespan(app):
                pool = app_state(app).page_workers
                if pool is not None:
                    pool.start()
                try:
                    yield
                finally:
                    if pool is not None:
                        await pool.stop()
        finally:
            engine.dispose()

    return lifespan


def _app_state(settings: Settings, engine: Engine, role: AppRole, page_workers: int) -> AppState:
    db = Database(engine)
    feed = events.PageFeed(windows={events.HEARTBEATS: settings.heartbeat_notice_s})
    watch = AccessWatch(db, settings.access_recheck_s)
    db.info.update(page_feed=feed, access_watch=watch)  # read after commit: app/services/events.py, access.py
    return AppState(
        settings=settings,
        role=role,
        db=db,
        templates=make_templates(),
        session_signer=SessionSigner(settings.resolved_secret_key(), settings.session_max_age_s),
        login_limiter=LoginLimiter(settings.login_attempts_per_minute),
        page_workers=PageWorkerPool(settings, page_workers) if role == "hub" and page_workers > 0 else None,
        hub=LiveHub(),
        metric_extractor=MetricExtractor(),
        page_feed=feed,
        access_watch=watch,
    )


def _add_middleware(app: FastAPI, state: AppState) -> None:
    """Outermost last: Host allowlist, hardening headers, body limit, authenticate before the body."""
    settings = state.settings
    app.add_middleware(AuthenticateFirst)
    app.add_middleware(
        BodyLimit,
        default=settings.max_body_bytes,
        limits={"/campaigns/import": settings.max_campaign_file_bytes + 64 * 1024},
        patterns={RUNNER_UPLOADS: api_artifacts.MAX_CHUNK},
    )
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.host_allowlist(), www_redirect=False)
    app.add_middleware(SecurityHeaders)
    if state.page_workers is not None:
        app.add_middleware(PageProxy)  # outermost: a forwarded read runs none of this process's stack
    if state.role == "pages":
        app.add_middleware(FromHub)


def _add_routes(app: FastAPI, state: AppState) -> None:
    """The favicon, /healthz, the static files and every router."""

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        # Pages link static/favicon.svg; this answers a browser's (or a JSON page's) own probe instead of a 404.
        return FileResponse(
            resource_dir("static") / "favicon.svg",
            media_type="image/svg+xml",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict:
        pool = state.page_workers
        return {"ok": True, "version": __version__, "role": state.role} | (
            {"page_workers": pool.health()} if pool is not None else {}
        )

    # Versioned URLs first: the plain mount would also match /static/v/... (app.templating.asset_url).
    app.mount(ASSET_PREFIX, VersionedStatic(directory=str(resource_dir("static"))), name="static-versioned")
    app.mount("/static", RevalidatedStatic(directory=str(resource_dir("static"))), name="static")
    for router in ROUTERS:
        app.include_router(router)
