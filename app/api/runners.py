"""Runners: the runner websocket (/api/runners/ws) and the JSON API to create and revoke runners.

The socket: `Authorization: Bearer <runner token>` at the handshake (refused before accept, HTTP
403, when unknown or revoked), then `hello` -> `welcome`, then messages both ways (app/protocol.py).
Received messages are processed in batches: whatever is already queued when the previous batch
is done goes into one transaction, and acks are sent after it commits.

`install(app)` adds the lost-runner sweeper and the embedded runner to the app's lifespan.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, Request, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, Field
from sqlmodel import Session, select

from app.deps import OperatorDep, RowId
from app.domain import logs as log_domain
from app.domain import runners as runner_domain
from app.domain import scheduling
from app.db import session_scope
from app.live import RunnerLink, ensure_hub, get_hub, run_in_tx, trace, trace_probes
from app.models import Runner, utcnow
from app.protocol import (Ack, Cancel, Finished, FinishedAck, Heartbeat, Hello, LogChunkMsg, Phase, Reject,
                          Started, Welcome, parse_runner_message)

log = logging.getLogger(__name__)
router = APIRouter(tags=["runners"])

REFUSED_CLOSE_CODE = 4401
BATCH_MAX = 512          # messages per transaction
RECEIVE_QUEUE = 256      # received, not yet processed (beyond this the runner's sends wait: TCP backpressure)


# ---- JSON API ---------------------------------------------------------------------------------

class RunnerCreate(BaseModel):
    name: str = Field(min_length=1, max_length=120, description="The node's name, e.g. its hostname.")


class RunnerCreated(BaseModel):
    id: int
    name: str
    token: str = Field(description="Shown once: give it to `campaign runner --token ...`.")


@router.get("/api/runners")
async def list_runners(request: Request, operator: OperatorDep) -> list[dict[str, Any]]:
    views = await run_in_tx(request.app.state.engine, runner_domain.list_runners, write=False)
    return [v.as_dict() for v in views]


@router.post("/api/runners", status_code=201)
async def create_runner(request: Request, body: RunnerCreate, operator: OperatorDep) -> RunnerCreated:
    runner, token = await run_in_tx(request.app.state.engine, runner_domain.create_runner, body.name)
    return RunnerCreated(id=runner.id, name=runner.name, token=token)


@router.post("/api/runners/{runner_id}/revoke")
async def revoke_runner(request: Request, runner_id: RowId, operator: OperatorDep) -> dict[str, Any]:
    await revoke(request.app, runner_id)
    return {"id": runner_id, "revoked": True}


async def revoke(app: FastAPI, runner_id: int) -> Runner:
    """Revoke a runner's token and close its live socket (the HTML route uses this too)."""
    def work(session: Session) -> Runner:
        runner = runner_domain.get_runner(session, runner_id)
        runner_domain.revoke_runner(session, runner)
        return runner

    runner = await run_in_tx(app.state.engine, work)
    await get_hub(app).disconnect_runner(runner_id, REFUSED_CLOSE_CODE, "runner token revoked")
    return runner


# ---- the runner socket ------------------------------------------------------------------------

def _bearer(value: str | None) -> str | None:
    if value and value.lower().startswith("bearer "):
        return value[7:].strip()
    return None


@dataclass
class BatchOut:
    replies: list[str] = field(default_factory=list)
    chunks: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    states: dict[int, dict[str, Any]] = field(default_factory=dict)
    validated: dict[int, str] = field(default_factory=dict)  # trial -> its current attempt, checked for this runner
    refuse: bool = False  # the runner was revoked (e.g. by the CLI): close its socket


def _ack_text(trial_id: int, attempt_id: str, seq: int) -> str:
    # Hot path (one ack per chunk): attempt ids here were checked against the trial's own.
    return f'{{"type":"ack","trial_id":{trial_id},"attempt_id":{json.dumps(attempt_id)},"seq":{seq}}}'


class RunnerSession:
    """One connected runner: reads its socket, processes its messages in batches."""

    def __init__(self, app: FastAPI, ws: WebSocket, runner: Runner) -> None:
        self.app = app
        self.ws = ws
        self.runner_id: int = runner.id  # type: ignore[assignment]
        self.name = runner.name
        self.settings = app.state.settings
        self.engine = app.state.engine
        self.hub = get_hub(app)
        self.metrics: log_domain.MetricExtractor = app.state.metric_extractor
        self.link = RunnerLink(self.runner_id, runner.name, ws.send_text, self._close)
        self.inbox: asyncio.Queue[str | None] = asyncio.Queue(RECEIVE_QUEUE)
        self._received_ns: deque[int] = deque()  # tracing only: when each inbox message was received

    async def _close(self, code: int, reason: str) -> None:
        await self.ws.close(code=code, reason=reason)

    async def run(self) -> None:
        try:
            hello = parse_runner_message(await asyncio.wait_for(self.ws.receive_text(), 30))
        except Exception:
            await self.ws.close(code=4400, reason="expected hello")
            return
        if not isinstance(hello, Hello):
            await self.ws.close(code=4400, reason="expected hello")
            return
        await self.hub.register_runner(self.link)
        try:
            async with self.hub.attempts.exclusive():  # it may end this runner's trials (AttemptGate)
                self.hub.attempts.forget_runner(self.runner_id)
                welcome, redispatch, ended = await run_in_tx(self.engine, self._on_hello, hello)
            await self.link.send(welcome)
            for message in redispatch:
                await self.link.send(message)
            for view in ended:
                self.hub.publish_state(view["id"], view)
            self.link.ready = True
            reader = asyncio.create_task(self._read())
            try:
                await self._process()
            finally:
                reader.cancel()
                with contextlib.suppress(BaseException):
                    await reader
        finally:
            self.link.closed = True
            self.hub.attempts.forget_runner(self.runner_id)
            if self.hub.unregister_runner(self.link):
                with contextlib.suppress(Exception):
                    await run_in_tx(self.engine, runner_domain.mark_disconnected, self.runner_id, self.link.last_seen)

    def _on_hello(self, session: Session, hello: Hello) -> tuple[Welcome, list[Any], list[dict[str, Any]]]:
        runner = session.get(Runner, self.runner_id)
        assert runner is not None
        runner_domain.mark_connected(session, runner, hello.fingerprint, hello.labels)
        result = scheduling.reconcile(session, runner, hello.attempts,
                                      lambda t, a: log_domain.last_contiguous_seq(session, t, a))
        welcome = Welcome(runner_id=self.runner_id, heartbeat_s=self.settings.heartbeat_s, acked=result.acked,
                          cancel=result.cancel)
        return welcome, result.redispatch, [scheduling.trial_view(t) for t in result.lost]

    async def _read(self) -> None:
        try:
            while True:
                text = await self.ws.receive_text()
                self.link.last_seen = utcnow()
                if trace.on:
                    self._received_ns.append(time.time_ns())
                await self.inbox.put(text)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                self.inbox.put_nowait(None)
            if self.inbox.full():  # make room for the end marker: the batch is dropped unacked (resent later)
                with contextlib.suppress(asyncio.QueueEmpty):
                    self.inbox.get_nowait()
                self.inbox.put_nowait(None)

    async def _process(self) -> None:
        while True:
            first = await self.inbox.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < BATCH_MAX and not self.inbox.empty():
                item = self.inbox.get_nowait()
                if item is None:
                    await self._handle(batch)
                    return
                batch.append(item)
            await self._handle(batch)

    async def _handle(self, raw: list[str]) -> None:
        messages, bad = [], []
        for text in raw:
            try:
                messages.append(parse_runner_message(text))
            except ValueError as exc:
                bad.append(str(exc).splitlines()[0])
        if bad:
            log.warning("runner %s sent %d invalid message(s): %s", self.name, len(bad), bad[0])
        if trace.on:
            stamps = self._trace_batch(raw, messages)
        gate = self.hub.attempts
        with gate.share() as validating:
            # Chunks of attempts already validated go to viewers now, before the commit (see AttemptGate).
            early: dict[int, list[tuple[int, str]]] = {}
            if validating:
                for msg in messages:
                    if isinstance(msg, LogChunkMsg) and gate.may_publish(msg.trial_id, msg.attempt_id, self.runner_id):
                        early.setdefault(msg.trial_id, []).append((msg.seq, msg.data))
                for trial_id, chunks in early.items():
                    self.hub.publish_chunks(trial_id, chunks)
                if trace.on:
                    stamps["s_early"] = time.time_ns()
            try:
                out: BatchOut = await (self._apply_traced(messages, stamps) if trace.on else
                                       run_in_tx(self.engine, self._apply, messages))
            except Exception:
                log.exception("runner %s: a batch of %d messages failed; closing so it resends", self.name, len(messages))
                await self.link.close(1011, "server error; reconnect and resend")
                raise
            if trace.on:
                stamps["s_resumed"] = time.time_ns()
            # The rest after the commit (viewers' latency first), then acks.
            for trial_id, chunks in out.chunks.items():
                if trial_id in early:
                    sent = {seq for seq, _ in early[trial_id]}
                    chunks = [c for c in chunks if c[0] not in sent]
                self.hub.publish_chunks(trial_id, chunks)
            for trial_id, view in out.states.items():
                self.hub.publish_state(trial_id, view)
            if validating:
                for trial_id, attempt_id in out.validated.items():
                    gate.remember(trial_id, attempt_id, self.runner_id)
            for trial_id, view in out.states.items():
                if view.get("state") in scheduling.TERMINAL_STATES:
                    gate.forget(trial_id)
        if trace.on:
            stamps["s_published"] = time.time_ns()
            self._trace_done(messages, stamps)
        if out.replies:
            await self.link.send_many(out.replies)
        if out.refuse:
            await self.link.close(REFUSED_CLOSE_CODE, "runner token revoked")

    def _apply(self, session: Session, messages: list[Any]) -> BatchOut:
        out = BatchOut()
        pending: list[log_domain.Chunk] = []

        def flush_logs() -> None:
            if not pending:
                return
            result = log_domain.append_chunks(session, pending, runner_id=self.runner_id,
                                              cap_bytes=self.settings.log_cap_bytes, metrics=self.metrics)
            out.replies.extend(_ack_text(c.trial_id, c.attempt_id, c.seq) for c in result.acked)
            out.replies.extend(Reject(trial_id=c.trial_id, attempt_id=c.attempt_id, reason=why).model_dump_json()
                               for c, why in result.rejected)
            for c in result.stored:
                trial = result.trials[c.trial_id]
                if c.attempt_id == trial.attempt_id:
                    out.chunks.setdefault(c.trial_id, []).append((c.seq, c.data))
            for trial in result.trials.values():  # each passed scheduling.current_trial for this runner
                out.validated[trial.id] = trial.attempt_id  # type: ignore[index]
                if trial.log_dropped_bytes:
                    out.states[trial.id] = scheduling.trial_view(trial)  # type: ignore[index]
            pending.clear()

        for msg in messages:
            if isinstance(msg, LogChunkMsg):
                pending.append(log_domain.Chunk(msg.trial_id, msg.attempt_id, msg.seq, msg.offset, msg.data))
                continue
            flush_logs()
            if isinstance(msg, Heartbeat):
                self._heartbeat(session, msg, out)
            elif isinstance(msg, (Started, Phase, Finished)):
                self._report(session, msg, out)
            elif isinstance(msg, Hello):
                log.warning("runner %s sent a second hello; ignored", self.name)
        flush_logs()
        return out

    # ---- tracing (bench/log_pipeline.py --trace) ----

    def _trace_batch(self, raw: list[str], messages: list[Any]) -> dict[str, int]:
        received = [self._received_ns.popleft() if self._received_ns else 0 for _ in raw]
        for msg, t in zip(messages, received):
            if isinstance(msg, LogChunkMsg):
                trace("s_received", msg.trial_id, msg.seq, t)
        return {"s_parsed": time.time_ns()}

    async def _apply_traced(self, messages: list[Any], stamps: dict[str, int]) -> BatchOut:
        def work() -> BatchOut:
            stamps["s_thread"] = time.time_ns()
            with session_scope(self.engine) as session:
                out = self._apply(session, messages)
                stamps["s_applied"] = time.time_ns()
            stamps["s_committed"] = time.time_ns()
            return out

        return await asyncio.to_thread(work)

    def _trace_done(self, messages: list[Any], stamps: dict[str, int]) -> None:
        for msg in messages:
            if isinstance(msg, LogChunkMsg):
                for event, t in stamps.items():
                    trace(event, msg.trial_id, msg.seq, t)

    def _heartbeat(self, session: Session, msg: Heartbeat, out: BatchOut) -> None:
        runner = session.get(Runner, self.runner_id)
        if runner is None or runner.revoked_at is not None:
            out.refuse = True
            return
        if runner is not None:
            runner.last_seen_at = utcnow()
            runner.connected = True
            session.add(runner)
        for ref in msg.attempts:
            try:
                trial = scheduling.current_trial(session, ref, self.runner_id)
            except scheduling.StaleAttempt as exc:
                out.replies.append(Cancel(trial_id=ref.trial_id, attempt_id=ref.attempt_id,
                                          reason=exc.reason).model_dump_json())
                continue
            if trial.cancel_requested and trial.state not in scheduling.TERMINAL_STATES:
                out.replies.append(Cancel(trial_id=ref.trial_id, attempt_id=ref.attempt_id,
                                          reason="cancel requested").model_dump_json())

    def _report(self, session: Session, msg: Started | Phase | Finished, out: BatchOut) -> None:
        try:
            trial = scheduling.current_trial(session, msg, self.runner_id)
        except scheduling.StaleAttempt as exc:
            out.replies.append(Reject(trial_id=msg.trial_id, attempt_id=msg.attempt_id, reason=exc.reason).model_dump_json())
            return
        if isinstance(msg, Started):
            scheduling.mark_started(session, trial)
        elif isinstance(msg, Phase):
            scheduling.record_phase(session, trial, msg.phase)
        else:
            if trial.state not in scheduling.TERMINAL_STATES:
                self.metrics.finish(session, trial, msg.last_seq)
                text = log_domain.head_and_tail(session, trial) if _has_classifier() else None
                scheduling.finish(session, trial, msg, log_text=text)
            out.replies.append(FinishedAck(trial_id=msg.trial_id, attempt_id=msg.attempt_id).model_dump_json())
        out.states[trial.id] = scheduling.trial_view(trial)  # type: ignore[index]


def _has_classifier() -> bool:
    try:
        import app.domain.signatures  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


def _authenticate(session: Session, token: str | None) -> Runner | None:
    return runner_domain.authenticate(session, token)


@router.websocket("/api/runners/ws")
async def runner_socket(ws: WebSocket) -> None:
    runner = await run_in_tx(ws.app.state.engine, _authenticate, _bearer(ws.headers.get("authorization")), write=False)
    if runner is None:
        await ws.close(code=REFUSED_CLOSE_CODE, reason="unknown or revoked runner token")  # before accept: HTTP 403
        return
    await ws.accept()
    await RunnerSession(ws.app, ws, runner).run()


# ---- lifespan: the sweeper and the embedded runner --------------------------------------------

async def _sweep_once(app: FastAPI) -> None:
    hub = get_hub(app)
    async with hub.attempts.exclusive():  # it may end trials whose chunks are being published early
        lost, silent = await run_in_tx(app.state.engine, scheduling.sweep_lost,
                                       app.state.settings.runner_lost_after_s, hub.last_seen())
        for trial in lost:
            hub.attempts.forget(trial.id)
    for trial in lost:
        hub.publish_state(trial.id, scheduling.trial_view(trial))
    for runner_id in silent:
        await hub.disconnect_runner(runner_id, 4408, "silent past the heartbeat limit")


def _needs_sweep(session: Session) -> bool:
    from app.models import ACTIVE_TRIAL_STATES, Trial
    return session.exec(select(Runner.id).where(Runner.connected.is_(True))).first() is not None or \
        session.exec(select(Trial.id).where(Trial.state.in_(ACTIVE_TRIAL_STATES))).first() is not None  # type: ignore[attr-defined]


async def _sweeper(app: FastAPI, period_s: float = 1.0) -> None:
    """Every second: runners silent past runner_lost_after_s go offline and their trials are lost."""
    while True:
        await asyncio.sleep(period_s)
        try:
            if await run_in_tx(app.state.engine, _needs_sweep, write=False):
                await _sweep_once(app)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("lost-runner sweep failed")


def _all_offline(session: Session) -> None:
    # This process holds no runner socket yet; the lost-after clock restarts now for all of them.
    now = utcnow()
    for runner in session.exec(select(Runner).where(Runner.connected.is_(True))):
        runner.connected = False
        runner.last_seen_at = now
        session.add(runner)


async def _start(app: FastAPI) -> None:
    await run_in_tx(app.state.engine, _all_offline)
    # Modules, routes, the engine: they live as long as the process. Keep them out of the collector's full
    # passes, which otherwise stall the event loop (and the live logs) for tens of ms now and then.
    gc.collect()
    gc.freeze()
    app.state.runner_sweeper = asyncio.create_task(_sweeper(app))
    app.state.trace_probes = asyncio.create_task(trace_probes()) if trace.on else None
    settings = app.state.settings
    app.state.embedded_runner = None
    if settings.embedded_runner:
        try:
            from runners.agent import start_embedded  # type: ignore[import-not-found]
        except ImportError:
            log.warning("embedded runner not available (runners.agent missing)")
            return
        runner, token = await run_in_tx(app.state.engine, runner_domain.ensure_embedded_runner)
        # The runner retries its connection with backoff, so starting it before the server listens is fine.
        app.state.embedded_runner = start_embedded(settings.base_url(), token, settings.data_dir / "spool")


async def _stop(app: FastAPI) -> None:
    for name in ("runner_sweeper", "trace_probes"):
        task = getattr(app.state, name, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    proc: subprocess.Popen | None = getattr(app.state, "embedded_runner", None)
    if proc is not None:
        from runners.agent import stop_embedded

        # SIGTERM: it cancels its running trial and reports it while the server still listens.
        await asyncio.to_thread(stop_embedded, proc, app.state.settings.cancel_grace_s + 5)
    for link in list(get_hub(app).runners.values()):
        await link.close(1001, "server shutting down")


def install(app: FastAPI) -> None:
    ensure_hub(app)
    if not hasattr(app.state, "metric_extractor"):
        app.state.metric_extractor = log_domain.MetricExtractor()
    app.state.startup_hooks.append(_start)
    app.state.shutdown_hooks.append(_stop)
