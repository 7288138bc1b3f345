"""Runner-side orchestration: a runner's hello and its message batches (transaction, then publish to
viewers and reply), revoking a runner (transaction, then close its socket), the lost-runner sweep. A runner
just welcomed, or freed by a trial's end, takes the queue's next trial (app/services/trials.start_queued).

Batches: the raw texts are parsed and applied on a worker thread, in one transaction. Chunks of
attempts the AttemptGate already knows valid are published as soon as they are parsed (before the
commit), as `uncommitted` frames the hub hands to viewers that join meanwhile; the rest after the
commit. Acks go out after the commit.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from sqlmodel import Session

from app.domain import logs as log_domain
from app.domain import notifications, read_only, scheduling, trial_reads, trials
from app.domain import runners as runner_domain
from app.live import Frame, LiveHub, trace
from app.models import TERMINAL_TRIAL_STATES, Runner, Trial, utcnow
from app.protocol.messages import (
    Cancel,
    CloseCode,
    Finished,
    FinishedAck,
    Heartbeat,
    Hello,
    LogChunkMsg,
    Phase,
    Reject,
    Started,
    Welcome,
    parse_runner_message,
)
from app.services import events
from app.services.trials import start_queued
from app.state import app_state

log = logging.getLogger(__name__)


async def create(app: FastAPI, name: str) -> tuple[Runner, str]:
    """A new runner and its token (shown once); the Runners page hears of it."""
    runner, token = await app_state(app).db.run_in_tx(runner_domain.create_runner, name)
    events.publish(app, events.RUNNERS)
    return runner, token


async def revoke(app: FastAPI, runner_id: int) -> Runner:
    """Revoke a runner's token and close its live socket."""

    def work(session: Session) -> Runner:
        runner = runner_domain.get_runner(session, runner_id)
        runner_domain.revoke_runner(session, runner)
        return runner

    runner = await app_state(app).db.run_in_tx(work)
    await app_state(app).hub.disconnect_runner(runner_id, CloseCode.UNAUTHORIZED, "runner token revoked")
    events.publish(app, events.RUNNERS)
    return runner


def _sweep_lost(session: Session, lost_after_s: float, seen: dict[int, Any]) -> tuple[list[Trial], list[int]]:
    read_only.recording_runs(session)  # a trial's end is recorded, in an archived campaign too
    return trials.sweep_lost(session, lost_after_s, seen)


async def sweep_once(app: FastAPI) -> None:
    """Runners silent past runner_lost_after_s go offline and their trials are lost."""
    hub = app_state(app).hub
    async with hub.attempts.exclusive():  # it may end trials whose chunks are being published early
        lost, silent = await app_state(app).db.run_in_tx(
            _sweep_lost, app_state(app).settings.lost_after_s(), hub.last_seen()
        )
        for trial in lost:
            hub.attempts.forget(trial.id or 0)
    for trial in lost:
        hub.publish_state(trial.id or 0, trial_reads.trial_view(trial))
    if lost or silent:
        events.publish(app, events.RUNNERS, *(t for trial in lost for t in events.of_trial(trial)))
    for runner_id in silent:
        await hub.disconnect_runner(runner_id, CloseCode.SILENT, "silent past the heartbeat limit")


@dataclass
class BatchOut:
    replies: list[str] = field(default_factory=list)
    chunks: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    states: dict[int, dict[str, Any]] = field(default_factory=dict)
    validated: dict[int, str] = field(default_factory=dict)  # trial -> its current attempt, checked for this runner
    topics: set[str] = field(default_factory=set)  # page events (app/services/events.py) after the commit
    refuse: bool = False  # the runner was revoked (e.g. by the CLI): close its socket


def _ack_text(trial_id: int, attempt_id: str, seq: int) -> str:
    # Hot path (one ack per chunk): attempt ids here were checked against the trial's own.
    return f'{{"type":"ack","trial_id":{trial_id},"attempt_id":{json.dumps(attempt_id)},"seq":{seq}}}'


class RunnerIngest:
    """What one connected runner's messages do to the database and the hub."""

    def __init__(self, app: FastAPI, runner_id: int, name: str) -> None:
        self.app = app
        self.runner_id = runner_id
        self.name = name
        self.settings = app_state(app).settings
        self.db = app_state(app).db
        self.hub: LiveHub = app_state(app).hub
        self.feed = app_state(app).page_feed
        self.metrics: log_domain.MetricExtractor = app_state(app).metric_extractor
        self.received_ns: deque[int] = deque()  # tracing only: when each message was received

    async def hello(self, hello: Hello) -> tuple[Welcome, list[Any]]:
        """The welcome and the dispatches to send again; trials the runner no longer has end."""
        async with self.hub.attempts.exclusive():  # it may end this runner's trials (AttemptGate)
            self.hub.attempts.forget_runner(self.runner_id)
            welcome, redispatch, ended, topics = await self.db.run_in_tx(self._on_hello, hello)
        for view in ended:
            self.hub.publish_state(view["id"], view)
        self.feed.publish(events.RUNNERS, *topics)
        return welcome, redispatch

    async def welcomed(self) -> None:
        """The welcome (and the dispatches sent again) went out: the runner may take queued work."""
        await start_queued(self.app, self.runner_id)

    def gone(self) -> None:
        self.hub.attempts.forget_runner(self.runner_id)

    async def disconnected(self, last_seen: Any) -> None:
        """The runner's socket closed (it was this runner's current one): offline now."""
        await self.db.run_in_tx(
            functools.partial(
                runner_domain.mark_disconnected,
                reconnected=lambda: self.runner_id in self.hub.runners,  # a newer link registered
            ),
            self.runner_id,
            last_seen,
        )
        self.feed.publish(events.RUNNERS)

    def _on_hello(self, session: Session, hello: Hello) -> tuple[Welcome, list[Any], list[dict[str, Any]], list[str]]:
        read_only.recording_runs(session)  # what the runner reports is recorded, in an archived campaign too
        runner = session.get(Runner, self.runner_id)
        assert runner is not None
        runner_domain.mark_connected(session, runner, hello.fingerprint, hello.labels)
        notifications.retest_on_connect(session, runner)
        result = scheduling.reconcile(
            session, runner, hello.attempts, lambda t, a: log_domain.last_contiguous_seq(session, t, a)
        )
        welcome = Welcome(
            runner_id=self.runner_id, heartbeat_s=self.settings.heartbeat_s, acked=result.acked, cancel=result.cancel
        )
        topics = [topic for t in result.lost for topic in events.of_trial(t)]
        return welcome, result.redispatch, [trial_reads.trial_view(t) for t in result.lost], topics

    async def batch(self, raw: list[str]) -> BatchOut:
        """Parse and apply a batch of raw messages (worker thread, one transaction), publishing chunks."""
        loop = asyncio.get_running_loop()
        gate = self.hub.attempts
        early: list[tuple[int, Frame]] = []
        stamps: dict[str, int] = {}

        def publish_early(messages: list[Any]) -> None:  # on the event loop, before the commit
            by_trial: dict[int, list[tuple[int, str]]] = {}
            for msg in messages:
                if isinstance(msg, LogChunkMsg) and gate.may_publish(msg.trial_id, msg.attempt_id, self.runner_id):
                    by_trial.setdefault(msg.trial_id, []).append((msg.seq, msg.data))
            for trial_id, chunks in by_trial.items():
                frame = self.hub.publish_chunks(trial_id, chunks, committed=False)
                if frame is not None:
                    early.append((trial_id, frame))
            if trace.on:
                stamps["s_early"] = time.time_ns()

        with gate.share() as validating:

            def work() -> tuple[list[Any], BatchOut]:
                messages = self._parse(raw)
                if trace.on:
                    stamps["s_parsed"] = stamps["s_thread"] = time.time_ns()
                if validating:
                    loop.call_soon_threadsafe(publish_early, messages)
                with self.db.scope() as session:
                    out = self._apply(session, messages)
                    if trace.on:
                        stamps["s_applied"] = time.time_ns()
                if trace.on:
                    stamps["s_committed"] = time.time_ns()
                return messages, out

            try:
                messages, out = await asyncio.to_thread(work)
            finally:
                for trial_id, frame in early:
                    self.hub.settle(trial_id, frame)
            if trace.on:
                stamps["s_resumed"] = time.time_ns()
            # The rest after the commit (viewers' latency first), then acks.
            sent: dict[int, set[int]] = {}
            for trial_id, frame in early:
                sent.setdefault(trial_id, set()).update(seq for seq, _ in frame.chunks)
            for trial_id, chunks in out.chunks.items():
                if trial_id in sent:
                    chunks = [c for c in chunks if c[0] not in sent[trial_id]]
                self.hub.publish_chunks(trial_id, chunks)
            for trial_id, view in out.states.items():
                self.hub.publish_state(trial_id, view)
            self.feed.publish(*out.topics)
            if validating:
                for trial_id, attempt_id in out.validated.items():
                    gate.remember(trial_id, attempt_id, self.runner_id)
            for trial_id, view in out.states.items():
                if view.get("state") in TERMINAL_TRIAL_STATES:
                    gate.forget(trial_id)
        if any(view.get("state") in TERMINAL_TRIAL_STATES for view in out.states.values()):
            # A trial of this runner ended (committed): it is free for the queue's next trial.
            await start_queued(self.app, self.runner_id)
        if trace.on:
            stamps["s_published"] = time.time_ns()
            self._trace(raw, messages, stamps)
        return out

    def _parse(self, raw: list[str]) -> list[Any]:
        messages, bad = [], []
        for text in raw:
            try:
                messages.append(parse_runner_message(text))
            except ValueError as exc:
                bad.append(str(exc).splitlines()[0])
        if bad:
            log.warning("runner %s sent %d invalid message(s): %s", self.name, len(bad), bad[0])
        return messages

    def _apply(self, session: Session, messages: list[Any]) -> BatchOut:
        read_only.recording_runs(session)  # a trial that ran when its campaign was archived still ends here
        out = BatchOut()
        pending: list[log_domain.Chunk] = []

        def flush_logs() -> None:
            if not pending:
                return
            result = log_domain.append_chunks(
                session, pending, runner_id=self.runner_id, cap_bytes=self.settings.log_cap_bytes, metrics=self.metrics
            )
            out.replies.extend(_ack_text(c.trial_id, c.attempt_id, c.seq) for c in result.acked)
            out.replies.extend(
                Reject(trial_id=c.trial_id, attempt_id=c.attempt_id, reason=why).model_dump_json()
                for c, why in result.rejected
            )
            for c in result.stored:
                trial = result.trials[c.trial_id]
                if c.attempt_id == trial.attempt_id:
                    out.chunks.setdefault(c.trial_id, []).append((c.seq, c.data))
            for trial in result.trials.values():  # each passed trials.current_trial for this runner
                assert trial.id is not None and trial.attempt_id is not None  # a stored trial, current attempt
                out.validated[trial.id] = trial.attempt_id
                if trial.log_dropped_bytes:
                    out.states[trial.id] = trial_reads.trial_view(trial)
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

    def _heartbeat(self, session: Session, msg: Heartbeat, out: BatchOut) -> None:
        runner = session.get(Runner, self.runner_id)
        if runner is None or runner.revoked_at is not None:
            out.refuse = True
            return
        runner.last_seen_at = utcnow()
        runner.connected = True
        session.add(runner)
        out.topics.add(events.HEARTBEATS)  # the Runners page's "last seen" (one notice per window, all runners)
        for ref in msg.attempts:
            try:
                trial = trials.current_trial(session, ref, self.runner_id)
                cancel = trial.cancel_requested and trial.state not in TERMINAL_TRIAL_STATES
                reason = "cancel requested" if cancel else None
            except trials.StaleAttempt as exc:
                reason = exc.reason
            if reason is not None:
                out.replies.append(
                    Cancel(trial_id=ref.trial_id, attempt_id=ref.attempt_id, reason=reason).model_dump_json()
                )

    def _report(self, session: Session, msg: Started | Phase | Finished, out: BatchOut) -> None:
        try:
            trial = trials.current_trial(session, msg, self.runner_id)
        except trials.StaleAttempt as exc:
            out.replies.append(
                Reject(trial_id=msg.trial_id, attempt_id=msg.attempt_id, reason=exc.reason).model_dump_json()
            )
            return
        if isinstance(msg, Started):
            trials.mark_started(session, trial)
        elif isinstance(msg, Phase):
            trials.record_phase(session, trial, msg.phase)
        else:
            if trial.state not in TERMINAL_TRIAL_STATES:
                self.metrics.finish(session, trial, msg.last_seq)
                trials.finish(session, trial, msg, log_text=log_domain.head_and_tail(session, trial))
            out.replies.append(FinishedAck(trial_id=msg.trial_id, attempt_id=msg.attempt_id).model_dump_json())
        out.states[trial.id] = trial_reads.trial_view(trial)  # type: ignore[index]
        out.topics.update(events.of_trial(trial))

    # ---- tracing (bench/log_pipeline.py --trace) ----

    def _trace(self, raw: list[str], messages: list[Any], stamps: dict[str, int]) -> None:
        received = [self.received_ns.popleft() if self.received_ns else 0 for _ in raw]
        for msg, t in zip(messages, received):
            if isinstance(msg, LogChunkMsg):
                trace("s_received", msg.trial_id, msg.seq, t)
                for event, at in stamps.items():
                    trace(event, msg.trial_id, msg.seq, at)
