"""The one place that maps errors to HTTP: JSON for the API, a redirect or an htmx flash for pages."""
from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from markupsafe import escape
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.deps import NotLoggedIn
from app.domain.errors import DomainError


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or "application/json" in request.headers.get("accept", "")


def _htmx_error(message: str, status: int, field: str | None = None) -> Response:
    # htmx does not swap error responses by default; static/app.js lets 4xx swap into #flash,
    # or, when a form sent the request, shows the "form-error" event next to the field it names.
    trigger = json.dumps({"form-error": {"message": message, "field": field or ""}})  # ASCII: a header
    return HTMLResponse(
        f'<div class="flash flash-error" role="alert">{escape(message)}</div>',
        status_code=status,
        headers={"HX-Retarget": "#flash", "HX-Reswap": "innerHTML", "HX-Trigger": trigger},
    )


def _error(request: Request, message: str, status: int, field: str | None = None,
           headers: dict[str, str] | None = None) -> Response:
    if _wants_json(request):
        body: dict = {"detail": message}
        if field:
            body["field"] = field
        response: Response = JSONResponse(body, status_code=status)
    elif request.headers.get("hx-request"):
        response = _htmx_error(message, status, field)
    else:
        response = request.app.state.templates.TemplateResponse(
            request, "error.html", {"message": message, "status": status}, status_code=status)
    response.headers.update(headers or {})  # e.g. Allow on a 405
    return response


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(request: Request, exc: DomainError) -> Response:
        return _error(request, exc.message, exc.status_code, exc.field)

    @app.exception_handler(NotLoggedIn)
    async def _login(request: Request, exc: NotLoggedIn) -> Response:
        if _wants_json(request) or request.method != "GET":
            return _error(request, "Login required: open the login link printed by `campaign serve` "
                          "(or `campaign login-url`), or send an API token.", 401)
        return RedirectResponse(f"/login?next={request.url.path}", status_code=303)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        parts = []
        first_field = None
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "form")]
            field = ".".join(loc)
            first_field = first_field or field
            parts.append(f"{field}: {err.get('msg')}" if field else str(err.get("msg")))
        return _error(request, "; ".join(parts) or "Invalid request.", 422, first_field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        return _error(request, str(exc.detail), exc.status_code, headers=getattr(exc, "headers", None))
