"""/docs: Swagger UI for the JSON API, served from static/vendor (works offline), started by
static/docs.js (no inline script), with the API-token Bearer scheme behind its Authorize button."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.web.render import render

router = APIRouter(include_in_schema=False)


@router.get("/docs")
def api_docs(request: Request) -> Response:
    return render(request, "docs.html", {"openapi_url": request.app.openapi_url})
