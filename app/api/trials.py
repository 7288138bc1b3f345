"""Trials, JSON: run next candidate, cancel, read a trial, download its log, and the browser's
live-log websocket.

The live-log socket (/api/trials/{id}/logs/ws?after=N) needs the operator's session cookie (or an
API token) and a same-origin Origin. It sends the trial's state, the stored chunks after seq N,
then live chunks and state changes, always in seq order:
    {"type": "state", ...trial fields...}
    {"type": "log", "chunks": [[seq, text], ...]}
A viewer that falls behind is closed with code 4000 (live.RESYNC_CLOSE_CODE): reconnect with the
last seq you have.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from fastapi import APIRouter, FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse
from sqlmodel import Session

from app.db import open_session
from app.deps import OperatorDep, RowId
from app.domain import logs as log_domain
from app.domain import scheduling
from app.domain.inventory import get_approach, get_campaign
from app.live import RESYNC_CLOSE_CODE, Subscriber, ensure_hub, get_hub, run_in_tx, trace
from app.models import Approach, Campaign, Trial
from app.security import SESSION_COOKIE, api_token_name, origin_ok

router = APIRouter(tags=["trials"])

BACKLOG_PAGE = 500
PENDING_LIMIT = 2000


# ---- what the HTML routes call too ------------------------------------------------------------

async def start_next(app: FastAPI, slug: str, actor: str, approach_key: str | None = None) -> scheduling.RunNext:
    """Run next candidate (or, with `approach_key`, "run this approach"): one transaction (serialized
    per campaign), then push the Dispatch."""
    hub = get_hub(app)

    def work(session: Session) -> scheduling.RunNext:
        campaign = get_campaign(session, slug)
        if approach_key is not None:
            approach = get_approach(session, campaign, approach_key)
            return scheduling.run_approach(session, campaign, approach, actor, online=hub.online())
        return scheduling.run_next(session, campaign, actor, online=hub.online())

    with hub.attempts.share() as validating:
        result: scheduling.RunNext = await run_in_tx(app.state.engine, work)
        if validating and result.trial is not None and result.runner is not None and result.dispatch is not None:
            hub.attempts.remember(result.trial.id, result.dispatch.attempt_id, result.runner.id)  # type: ignore[arg-type]
    if result.trial is not None and result.runner is not None and result.dispatch is not None:
        result.dispatch.approach_key = result.approach.key if result.approach else ""
        # If the push fails (the socket just closed), the runner gets it again when it reconnects
        # (scheduling.reconcile), or the trial is lost after runner_lost_after_s.
        await hub.send_to_runner(result.runner.id, result.dispatch)  # type: ignore[arg-type]
        hub.publish_state(result.trial.id, scheduling.trial_view(result.trial))  # type: ignore[arg-type]
    return result


async def cancel(app: FastAPI, trial_id: int, actor: str) -> Trial:
    """Ask a trial to stop: Cancel pushed to its runner, which reports Finished(cancelled)."""
    def work(session: Session) -> tuple[Trial, Any]:
        trial = scheduling.get_trial(session, trial_id)
        return trial, scheduling.request_cancel(session, trial, actor)

    trial, message = await run_in_tx(app.state.engine, work)
    hub = get_hub(app)
    if message is not None and trial.runner_id is not None:
        await hub.send_to_runner(trial.runner_id, message)
    hub.publish_state(trial.id, scheduling.trial_view(trial))
    return trial


def run_next_body(result: scheduling.RunNext) -> dict[str, Any]:
    return {"started": result.started, "trial_id": result.trial.id if result.trial else None,
            "approach": result.approach.key if result.approach else None,
            "runner": result.runner.name if result.runner else None, "reason": result.reason}


def trial_detail(session: Session, trial_id: int) -> dict[str, Any]:
    trial = scheduling.get_trial(session, trial_id)
    approach = session.get(Approach, trial.approach_id)
    campaign = session.get(Campaign, trial.campaign_id)
    return {**scheduling.trial_view(trial), "approach": approach.key if approach else None,
            "approach_title": approach.title if approach else None, "campaign": campaign.slug if campaign else None,
            "recipe": trial.recipe}


# ---- JSON routes ------------------------------------------------------------------------------

@router.post("/api/campaigns/{slug}/run-next")
async def run_next(request: Request, slug: str, operator: OperatorDep) -> dict[str, Any]:
    """Start the next candidate on a runner that can run it, or say why nothing can run."""
    return run_next_body(await start_next(request.app, slug, operator.name))


@router.post("/api/campaigns/{slug}/approaches/{key}/run")
async def run_approach(request: Request, slug: str, key: str, operator: OperatorDep) -> dict[str, Any]:
    """Start this approach (any status) on a runner that can run it, or say why it cannot run now."""
    return run_next_body(await start_next(request.app, slug, operator.name, approach_key=key))


@router.get("/api/trials/{trial_id}")
async def get_trial(request: Request, trial_id: RowId, operator: OperatorDep) -> dict[str, Any]:
    return await run_in_tx(request.app.state.engine, trial_detail, trial_id, write=False)


@router.post("/api/trials/{trial_id}/cancel")
async def cancel_trial(request: Request, trial_id: RowId, operator: OperatorDep) -> dict[str, Any]:
    trial = await cancel(request.app, trial_id, operator.name)
    return scheduling.trial_view(trial)


@router.get("/api/trials/{trial_id}/log", response_class=StreamingResponse)
async def download_log(request: Request, trial_id: RowId, operator: OperatorDep) -> StreamingResponse:
    """The full stored log (text/plain, as an attachment)."""
    engine = request.app.state.engine
    await run_in_tx(engine, scheduling.get_trial, trial_id, write=False)  # 404 before streaming starts

    def body():  # runs on a worker thread (Starlette iterates sync bodies off the event loop)
        with open_session(engine, write=False) as session:
            trial = scheduling.get_trial(session, trial_id)
            for text in log_domain.iter_full_log(session, trial):
                yield text.encode()

    return StreamingResponse(body(), media_type="text/plain; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="trial-{trial_id}.log"'})


# ---- the browser's live log ------------------------------------------------------------------

def browser_allowed(ws: WebSocket) -> bool:
    """The operator's session cookie (or an API token) and, from a browser, this server's Origin."""
    if not origin_ok(ws.headers.get("origin"), ws.headers.get("host")):
        return False
    app = ws.app
    if not app.state.settings.auth_enabled:
        return True
    auth = ws.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        with open_session(app.state.engine, write=False) as session:
            return api_token_name(session, auth[7:].strip()) is not None
    return app.state.session_signer.read(ws.cookies.get(SESSION_COOKIE)) is not None


class LogFollower:
    """Sends one viewer the backlog after its seq, then live chunks, in seq order without repeats."""

    def __init__(self, ws: WebSocket, sub: Subscriber, after: int) -> None:
        self.ws = ws
        self.sub = sub
        self.last = after
        self.pending: dict[int, str] = {}

    def _take(self, chunks: list[tuple[int, str]]) -> list[list[Any]]:
        out = []
        for seq, text in chunks:
            if seq > self.last:
                self.pending[seq] = text
        while self.last + 1 in self.pending:
            self.last += 1
            out.append([self.last, self.pending.pop(self.last)])
        return out

    async def backlog(self, engine: Any, trial: Trial) -> None:
        while True:
            rows = await run_in_tx(engine, log_domain.read_after, trial, self.last, BACKLOG_PAGE, write=False)
            out = []
            for seq, text, marker in rows:
                if marker:  # the seqs before the cap's marker were dropped, not late
                    self.pending = {s: t for s, t in self.pending.items() if s > seq}
                    self.last = seq - 1
                out += self._take([(seq, text)])
            if out:
                await self.ws.send_text(json.dumps({"type": "log", "chunks": out}))
            if len(rows) < BACKLOG_PAGE:
                return

    async def live(self) -> None:
        dropped = asyncio.ensure_future(self.sub.dropped.wait())
        try:
            while True:
                nxt = asyncio.ensure_future(self.sub.next())
                done, _ = await asyncio.wait({nxt, dropped}, return_when=asyncio.FIRST_COMPLETED)
                if dropped in done:
                    nxt.cancel()
                    await self._resync("fell behind; reconnect with ?after=%d" % self.last)
                    return
                kind, payload = nxt.result()
                if kind == "log":
                    dequeued = time.time_ns() if trace.on else 0
                    out = self._take(payload)
                    if len(self.pending) > PENDING_LIMIT:
                        await self._resync("too many chunks out of order")
                        return
                    if out:
                        await self._send_or_resync({"type": "log", "chunks": out}, dropped)
                        if trace.on:
                            sent = time.time_ns()
                            for seq, _ in out:
                                trace("s_dequeued", self.sub.trial_id, seq, dequeued)
                                trace("s_sent", self.sub.trial_id, seq, sent)
                else:
                    await self._send_or_resync({"type": "state", **payload}, dropped)
        finally:
            dropped.cancel()

    async def _send_or_resync(self, message: dict[str, Any], dropped: asyncio.Future) -> None:
        # A stuck viewer blocks in send; the hub drops it meanwhile, which ends the wait here.
        send = asyncio.ensure_future(self.ws.send_text(json.dumps(message)))
        done, _ = await asyncio.wait({send, dropped}, return_when=asyncio.FIRST_COMPLETED)
        if send not in done:
            send.cancel()
            raise _Dropped()
        send.result()

    async def _resync(self, reason: str) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(code=RESYNC_CLOSE_CODE, reason=reason), 2)


class _Dropped(Exception):
    pass


@router.websocket("/api/trials/{trial_id}/logs/ws")
async def trial_log_socket(ws: WebSocket, trial_id: RowId, after: int = -1) -> None:
    if not await asyncio.to_thread(browser_allowed, ws):
        await ws.close(code=4403, reason="log in first")  # before accept: HTTP 403
        return
    engine = ws.app.state.engine
    hub = get_hub(ws.app)
    sub = hub.subscribe(trial_id)  # before reading the database, so no chunk falls in between
    try:
        trial = await run_in_tx(engine, lambda s: s.get(Trial, trial_id), write=False)
        if trial is None:
            await ws.close(code=4404, reason="no such trial")
            return
        await ws.accept()
        follower = LogFollower(ws, sub, max(after, -1))
        await ws.send_text(json.dumps({"type": "state", **scheduling.trial_view(trial)}))
        await follower.backlog(engine, trial)
        await follower.live()
    except _Dropped:
        await follower._resync("fell behind")
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        hub.unsubscribe(sub)


def install(app: FastAPI) -> None:
    ensure_hub(app)
