"""Login by one-time link (printed by `campaign serve` / `campaign login-url`) and logout."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from app.deps import OperatorDep, SessionDep, SettingsDep, WriteSessionDep
from app.domain.errors import DomainError
from app.security import SESSION_COOKIE, end_session, redeem_login_token

router = APIRouter(include_in_schema=False)


def _safe_next(target: str | None) -> str:
    # Only same-site paths: never redirect to another host after login.
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


@router.get("/login")
def login(
    request: Request, session: WriteSessionDep, settings: SettingsDep, token: str | None = None, next: str | None = None
) -> Response:
    templates = request.app.state.templates
    if not token:
        return templates.TemplateResponse(request, "login.html", {"error": None})
    limiter = request.app.state.login_limiter
    client = request.client.host if request.client else "unknown"
    wait_s = limiter.retry_after(client)
    if wait_s:
        return templates.TemplateResponse(
            request,
            "login.html",
            {"error": f"Too many failed login attempts: wait {wait_s} s."},
            status_code=429,
            headers={"Retry-After": str(wait_s)},
        )
    try:
        session_id = redeem_login_token(session, token, settings.session_max_age_s)
    except DomainError as exc:
        limiter.failed(client)
        return templates.TemplateResponse(request, "login.html", {"error": exc.message}, status_code=403)
    session.commit()
    response = RedirectResponse(_safe_next(next), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        request.app.state.session_signer.issue(session_id),
        max_age=settings.session_max_age_s,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
def logout(session: SessionDep, operator: OperatorDep) -> Response:
    if operator.session_id:
        end_session(session, operator.session_id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response
