"""The app's routes as the role tests walk them: every unsafe route a viewer must be refused, with its path
parameters filled in."""

from __future__ import annotations

import re

from fastapi.routing import APIRoute, iter_route_contexts

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


# What a viewer may still write: the public writes (first login, accepting an invite; they spend a
# secret from the form), logging out and ending their own sessions, and their own inbox: what they watch and
# what they have read (app/web/inbox.py, app/api/inbox.py).
VIEWER_MAY = {
    "/login",
    "/invite/{token}",
    "/logout",
    "/sessions/{session_row_id}/revoke",
    "/api/sessions/{session_id}",
    "/inbox/read",
    "/inbox/{item_id}/read",
    "/campaigns/{slug}/watch",
    "/campaigns/{slug}/unwatch",
    "/campaigns/{slug}/approaches/{key}/watch",
    "/campaigns/{slug}/approaches/{key}/unwatch",
    "/api/inbox/read",
    "/api/inbox/{item_id}/read",
    "/api/watches",
    "/api/watches/remove",
}


def unsafe_routes(app) -> list[tuple[str, str]]:
    routes: list[tuple[str, str]] = []
    for ctx in iter_route_contexts(app.routes):
        path, methods = ctx.path or "", ctx.methods or set()
        if isinstance(ctx.route, APIRoute) and path not in VIEWER_MAY and not path.startswith("/s/"):
            routes += [(method, path) for method in sorted(set(methods) & UNSAFE)]
    return routes


def fill(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)
