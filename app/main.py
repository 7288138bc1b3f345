"""The FastAPI application: settings, database, routers, static files."""
from __future__ import annotations

from contextlib import asynccontextmanager
from importlib import import_module

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app import PROJECT_ROOT, __version__
from app.config import Settings, get_settings
from app.db import make_engine, migrate
from app.errors import install_error_handlers
from app.security import SessionSigner
from app.templating import PLOTLY_JS, make_templates

# Each module exposes `router`. Order matters only for overlapping paths.
ROUTER_MODULES = [
    "app.web.auth",
    "app.web.docs",
    "app.web.campaigns",
    "app.api.campaigns",
    "app.api.runners",
    "app.api.trials",
    "app.web.trials",
    "app.web.charts",
    "app.web.share",
    "app.web.verdicts",
]


def create_app(settings: Settings | None = None, *, run_migrations: bool = True) -> FastAPI:
    settings = settings or get_settings()
    url = settings.resolved_database_url()
    if run_migrations:
        migrate(url)
    engine = make_engine(url)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for hook in app.state.startup_hooks:
            await hook(app)
        try:
            yield
        finally:
            for hook in reversed(app.state.shutdown_hooks):
                await hook(app)
            engine.dispose()

    app = FastAPI(
        title="Campaign Board", version=__version__, lifespan=lifespan,
        docs_url=None, redoc_url=None,  # /docs is app/web/docs.py: Swagger UI from static/vendor, no CDN
        description="Optimization campaigns for LLM inference on GPU nodes: approaches, trials, verdicts.",
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.templates = make_templates()
    app.state.session_signer = SessionSigner(settings.resolved_secret_key(), settings.session_max_age_s)
    app.state.startup_hooks = []
    app.state.shutdown_hooks = []
    install_error_handlers(app)

    @app.get("/static/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        # Served from the installed plotly package, so the JS always matches the figure JSON.
        return FileResponse(PLOTLY_JS, media_type="application/javascript",
                            headers={"Cache-Control": "public, max-age=86400"})

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict:
        return {"ok": True, "version": __version__}

    app.mount("/static", StaticFiles(directory=str(PROJECT_ROOT / "static")), name="static")
    for name in ROUTER_MODULES:
        module = import_module(name)
        app.include_router(module.router)
        if hasattr(module, "install"):
            module.install(app)  # a module may add startup/shutdown hooks (the live-log hub, say)
    return app
