"""Login by one-time link (printed by `campaign serve` / `campaign login-url`) and logout."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from app.deps import OperatorDep, SessionDep, SettingsDep
from app.domain.errors import DomainError
from app.security import SESSION_COOKIE, redeem_login_token

router = APIRouter(include_in_schema=False)


def _safe_next(target: str | None) -> str:
    # Only same-site paths: never redirect to another host after login.
    if target and target.startswith("/") and not target.startswith("//"):
        return target
    return "/"


@router.get("/login")
def login(request: Request, session: SessionDep, settings: SettingsDep,
          token: str | None = None, next: str | None = None) -> Response:
    templates = request.app.state.templates
    if not token:
        return templates.TemplateResponse(request, "login.html", {"error": None})
    try:
        redeem_login_token(session, token)
    except DomainError as exc:
        return templates.TemplateResponse(request, "login.html", {"error": exc.message}, status_code=403)
    session.commit()
    response = RedirectResponse(_safe_next(next), status_code=303)
    response.set_cookie(SESSION_COOKIE, request.app.state.session_signer.issue(),
                        max_age=settings.session_max_age_s, httponly=True, samesite="lax",
                        secure=request.url.scheme == "https")
    return response


@router.post("/logout")
def logout(operator: OperatorDep) -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response
