"""The one place that maps errors to HTTP: JSON for the API, a redirect or an htmx flash for pages."""

from __future__ import annotations

import copy
import json
import re
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from markupsafe import escape
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from app.deps import NotLoggedIn
from app.domain.errors import DomainError, Moved
from app.schemas import error_words
from app.services.page_events import PAGE_EVENTS
from app.state import app_state
from app.web.render import render


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or "application/json" in request.headers.get("accept", "")


def form_error_headers(message: str, field: str | None = None) -> dict[str, str]:
    """The "form-error" event static/app.js shows next to the field it names (in the form that sent it)."""
    return {
        "HX-Trigger": json.dumps({PAGE_EVENTS["form_error"].name: {"message": message, "field": field or ""}})
    }  # ASCII: a header


def _htmx_error(message: str, status: int, field: str | None = None) -> Response:
    # htmx does not swap error responses by default; static/app.js lets 4xx swap into #flash,
    # or, when a form sent the request, shows the "form-error" event next to the field it names.
    return HTMLResponse(
        f'<div class="flash flash-error" role="alert">{escape(message)}</div>',
        status_code=status,
        headers={"HX-Retarget": "#flash", "HX-Reswap": "innerHTML", **form_error_headers(message, field)},
    )


def _error(
    request: Request, message: str, status: int, field: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    if _wants_json(request):
        body: dict = {"detail": message}
        if field:
            body["field"] = field
        response: Response = JSONResponse(body, status_code=status)
    elif request.headers.get("hx-request"):
        response = _htmx_error(message, status, field)
    else:
        back, back_label = way_back(request)
        response = render(
            request,
            "error.html",
            {"message": message, "status": status, "back": back, "back_label": back_label},
            status_code=status,
        )
    response.headers.update(headers or {})  # e.g. Allow on a 405
    return response


_CAMPAIGN_PATH = re.compile(r"^/campaigns/([a-z0-9][a-z0-9-]{0,79})(?:/|$)")


def way_back(request: Request) -> tuple[str, str]:
    """Where an error page sends a person back to: the page the request came from when it is this board's
    (its Referer, same host), else the campaign the URL names, else the campaigns list. Never elsewhere."""
    referer = urlsplit(request.headers.get("referer", ""))
    public = urlsplit(app_state(request).settings.public_url or "")
    here = {request.url.netloc, public.netloc} - {""}
    if referer.netloc in here and referer.path.startswith("/") and not referer.path.startswith("//"):
        if referer.path != request.url.path or request.method != "GET":
            return referer.path + (f"?{referer.query}" if referer.query else ""), "Back to the page you were on"
    found = _CAMPAIGN_PATH.match(request.url.path)
    if found and found.group(1) != "import":
        return f"/campaigns/{found.group(1)}", "Back to the campaign"
    return "/", "Back to campaigns"


error_response = _error  # for app/middleware.py: its refusals are shaped like every other error


class ErrorBody(BaseModel):
    """Every JSON error the API sends (422 included): a sentence, and the field it is about."""

    detail: str = Field(description="What went wrong, as a sentence to show a person.")
    field: str | None = Field(None, description="The input field it is about, when there is one (absent otherwise).")


# The errors any API route may answer (app/deps.py, app/middleware.py, DomainError), documented
# on every operation so that the schema says what the server really sends.
ERROR_RESPONSES = {
    "401": "Login required: no session, API token or a revoked one.",
    "403": "Refused: cross-origin request, missing CSRF token, or your role does not allow it "
    "(a viewer's change, an admin-only route).",
    "404": "No such campaign, approach, trial or runner.",
    "409": "Conflicts with the current state (a duplicate slug or key, a trial that already ended, ...).",
    "422": "Invalid input: the detail names the field.",
}
BODY_ERROR_RESPONSES = {
    "400": "The request body could not be read (bad Content-Length, malformed encoding).",
    "413": "The request body is over this route's limit.",
}


def _defs_to_components(content: dict, components: dict) -> None:
    """A body schema given whole (a model's `model_json_schema()`, in `openapi_extra`) keeps its models under
    `$defs`: they move to the components, named after the model (`CampaignFile.ApproachFile`), refs rewritten."""
    body = content.get("schema")
    if not isinstance(body, dict) or "$defs" not in body:
        return
    prefix = body.get("title", "Body")
    text = json.dumps({k: v for k, v in body.items() if k != "$defs"} | {"$defs": body["$defs"]})
    text = text.replace('"#/$defs/', f'"#/components/schemas/{prefix}.')
    body = json.loads(text)
    for name, sub in body.pop("$defs").items():
        components[f"{prefix}.{name}"] = sub
    components[prefix] = body
    content["schema"] = {"$ref": f"#/components/schemas/{prefix}"}


def install_openapi(app: FastAPI) -> None:
    """The OpenAPI schema with the error shape the server really sends (not FastAPI's default
    array of validation errors) and the error status codes routes really return."""

    def openapi() -> dict:
        if app.openapi_schema:
            return app.openapi_schema
        # A copy: the routes' `openapi_extra` dicts are in it by reference, and `_defs_to_components` rewrites.
        schema = copy.deepcopy(
            get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        components["Error"] = ErrorBody.model_json_schema()
        error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        for operations in schema.get("paths", {}).values():
            for method, operation in operations.items():
                for content in operation.get("requestBody", {}).get("content", {}).values():
                    _defs_to_components(content, components)
                codes = dict(ERROR_RESPONSES)
                if method in ("post", "put", "patch", "delete"):
                    codes.update(BODY_ERROR_RESPONSES)
                responses = operation.setdefault("responses", {})
                for code, description in codes.items():
                    responses[code] = {"description": description, "content": error}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


LOGIN_REQUIRED = (
    "Login required: open the login link printed by `campaign serve` (or `campaign login-url`), or send an API token."
)


def login_required(request: Request) -> Response:
    """401 for the API, htmx and writes; a redirect to the login page for a page view. An htmx fragment's
    refresh after the session ended is a 401 said in the flash: followed, a redirect would swap the login page
    into the fragment (a page inside the page)."""
    if request.headers.get("hx-request") and not _wants_json(request):
        return _error(request, "Your session ended: log in again (a login link from `campaign login-url`).", 401)
    if _wants_json(request) or request.method not in ("GET", "HEAD"):
        return _error(request, LOGIN_REQUIRED, 401)
    return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)


def moved_location(request: Request, exc: Moved) -> str | None:
    """The same URL with the campaign's old slug (the segment after `campaigns`, or `?campaign=`) replaced by its
    new one; None when the URL does not name it there."""
    parts = request.url.path.split("/")
    hits = [i for i in range(1, len(parts)) if parts[i - 1] == "campaigns" and parts[i] == exc.old]
    for i in hits:
        parts[i] = exc.slug
    query = [(k, exc.slug if k == "campaign" and v == exc.old else v) for k, v in request.query_params.multi_items()]
    moved_query = query != list(request.query_params.multi_items())
    if not hits and not moved_query:
        return None
    url = request.url.replace(path="/".join(parts), query=urlencode(query))
    return str(url.path) + (f"?{url.query}" if url.query else "")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(request: Request, exc: DomainError) -> Response:
        if isinstance(exc, Moved) and (location := moved_location(request, exc)) is not None:
            return RedirectResponse(location, status_code=308)  # 308: the method and body are kept
        return _error(request, exc.message, exc.status_code, exc.field)

    @app.exception_handler(NotLoggedIn)
    async def _login(request: Request, exc: NotLoggedIn) -> Response:
        return login_required(request)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        parts = []
        first_field = None
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "form")]
            field = ".".join(loc)
            first_field = first_field or field
            parts.append(f"{field}: {error_words(err)}" if field else error_words(err))
        return _error(request, "; ".join(parts) or "Invalid request.", 422, first_field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        return _error(request, str(exc.detail), exc.status_code, headers=headers)


def _matching_routes(request: Request) -> dict[int, list[BaseRoute]]:
    """The routes whose path matches the request's, by their number of path parameters."""
    found: dict[int, list[BaseRoute]] = {}
    pending: list[Any] = list(request.app.router.routes)
    while pending:
        route = pending.pop()
        if hasattr(route, "effective_candidates"):  # FastAPI's included router: its routes with their prefix
            pending.extend(route.effective_candidates())
        elif getattr(route, "methods", None) and route.matches(request.scope)[0] != Match.NONE:
            found.setdefault(len(getattr(route, "param_convertors", {})), []).append(route)
    return found


def concrete_paths_first(request: Request) -> None:
    """A route dependency: a templated route does not answer a URL that a concrete path owns (GET
    `/api/campaigns/import` is not the campaign named "import", it is a 405 with `Allow: POST`)."""
    route = request.scope.get("route")
    found = _matching_routes(request)
    if found and min(found) < len(getattr(route, "param_convertors", {})):
        raise StarletteHTTPException(405)


def allowed_methods(request: Request) -> list[str]:
    """The methods the request's URL takes: Starlette's 405 names only the first route whose path matched,
    but FastAPI declares one route per method. A concrete path shadows a template (OpenAPI's rule:
    `/api/campaigns/import` before `/api/campaigns/{slug}`), so the routes with the fewest parameters count."""
    found = _matching_routes(request)
    return sorted({m for route in found[min(found)] for m in getattr(route, "methods", ())}) if found else []
