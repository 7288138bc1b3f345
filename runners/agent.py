"""The runner sidecar: holds a websocket to the server, runs the trials it is sent, streams logs.

Protocol (app/protocol/messages.py): connect to <server>/api/runners/ws with the runner's bearer token,
send `hello` (fingerprint, labels, attempts still held), get `welcome` (heartbeat period, the
last seq the server stored per attempt), then the server pushes `dispatch` / `cancel` and the
runner sends `started`, `phase`, `log`, `finished` and `heartbeat`.

Log path: output reader thread -> spool on disk (runners/spool.py) -> sender task -> websocket.
The reader never waits for the network; the sender sends what the spool holds past the last
seq sent on this connection, as fast as the socket drains. `ack(seq)` means the server stored
every chunk through seq; on reconnect the sender restarts after welcome's acked seq, so the
server gets each chunk at least once and stores it once (idempotent on attempt + seq).
`finished` is kept in the spool and resent on every connection until `finished_ack`.

Reconnects use exponential backoff with jitter (0.5 s doubling to 30 s). A token the server
refuses (HTTP 401/403 at the handshake) ends the runner with exit code 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import gc
import logging
import os
import random
import signal
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from app.protocol.messages import (
    Ack,
    AttemptRef,
    Cancel,
    CloseCode,
    Dispatch,
    Finished,
    FinishedAck,
    Heartbeat,
    Hello,
    LogChunkMsg,
    Phase,
    Reject,
    Started,
    Welcome,
    parse_server_message,
)
from app.protocol.recipes import RecipeError
from runners import artifacts
from runners import fingerprint as node
from runners.executors import Executor, LocalExecutor, TrialHandle, spooled_end
from runners.process import (
    STARTED_PREFIX,
    OutputChunk,
    ProcessId,
    gpu_memory_used,
    stop_attempt_leftovers,
    trace,
    withhold,
)
from runners.recipes import build_launch
from runners.spool import AttemptSpool, Spool, SpoolBusy, SpooledChunk

log = logging.getLogger("campaign.runner")

WS_PATH = "/api/runners/ws"
TOKEN_ENV = "CAMPAIGN_RUNNER_TOKEN"
EXIT_OK, EXIT_USAGE, EXIT_TOKEN_REFUSED = 0, 2, 3
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.5, 30.0
WELCOME_TIMEOUT_S = 30.0
SEND_BATCH = 64
FRESH_MAX = 128  # chunks just spooled, kept in memory for the sender (beyond: it reads them back from the spool)
FLUSH_TIMEOUT_S = 10.0  # an ended attempt waits at most this for the board to store its last chunks


class RunnerFatal(Exception):
    """Retrying cannot help (refused token, bad URL): the runner stops with `exit_code`."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def ws_url(server_url: str) -> str:
    """http(s)://host[:port][/prefix] -> ws(s)://host[:port][/prefix]/api/runners/ws."""
    parts = urlsplit(server_url.strip())
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise RunnerFatal(f"--server {server_url!r}: expected an http:// or https:// URL of the board", EXIT_USAGE)
    path = parts.path.rstrip("/")
    if not path.endswith(WS_PATH):
        path += WS_PATH
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def backoff_delays(first: float = BACKOFF_FIRST_S, most: float = BACKOFF_MAX_S):
    """0.5, 1, 2, ... 30, 30, ... each with +-25% jitter so runners do not reconnect in lockstep."""
    delay = first
    while True:
        yield delay * random.uniform(0.75, 1.25)
        delay = min(delay * 2, most)


@dataclass
class Attempt:
    """One attempt this runner holds: running, or ended with log chunks / finished not yet acked."""

    trial_id: int
    attempt_id: str
    spool: AttemptSpool
    process: TrialHandle | None = None
    task: asyncio.Task[None] | None = None
    running: bool = False
    cancel_requested: bool = False
    cancel_reason: str = ""  # the board's Cancel reason ("cancelled by ada"), for the log's closing line
    output_end: tuple[int, bool] = (0, True)  # (byte offset after the last chunk, it ended a line)
    rejected: bool = False
    sent_seq: int = -1  # last seq sent on the current connection
    finished_sent: bool = False  # on the current connection
    # What the reader just spooled, so the sender need not read it back (same bytes as the spool's).
    fresh: deque[SpooledChunk] = field(default_factory=deque)
    flush_seq: int = -1  # an ended attempt waits for the board to ack through this seq (_flush_logs)
    flushed: asyncio.Event = field(default_factory=asyncio.Event)

    def next_chunks(self, limit: int) -> list[SpooledChunk]:
        """Up to `limit` chunks after sent_seq, in order: from memory when they are there, else from the spool."""
        fresh = self.fresh
        while fresh and fresh[0].seq <= self.sent_seq:
            fresh.popleft()
        out: list[SpooledChunk] = []
        while fresh and len(out) < limit and fresh[0].seq == self.sent_seq + 1 + len(out):
            out.append(fresh.popleft())
        return out or self.spool.chunks_after(self.sent_seq, limit=limit)

    @property
    def ref(self) -> AttemptRef:
        return AttemptRef(trial_id=self.trial_id, attempt_id=self.attempt_id)


@dataclass(frozen=True)
class Ending:
    """How an attempt ended: what its Finished message says."""

    outcome: str
    exit_code: int | None = None
    signal: int | None = None
    error: str = ""
    gpu_released: bool | None = None
    gpu_note: str = ""


@dataclass
class RunnerOptions:
    server_url: str
    token: str
    spool_dir: Path
    labels: list[str] = field(default_factory=list)
    name: str = ""
    python: str | None = None  # interpreter for recipes (default: this one)
    sglang_python: str | None = None  # interpreter SGLang lives in, for the fingerprint
    cancel_grace_s: float = 10.0
    max_concurrent: int = 1
    parent_pid: int | None = None  # stop when this process is gone (the embedded runner's server)
    executor: Executor | None = None  # runners.executors: LocalExecutor (default) or SlurmExecutor


class Agent:
    """The runner's state and its connection loop. `await agent.run()` returns an exit code."""

    def __init__(self, options: RunnerOptions, *, fingerprint: dict[str, Any] | None = None) -> None:
        self.options = options
        self.url = ws_url(options.server_url)
        self.fingerprint = fingerprint
        self.spool = Spool(options.spool_dir)
        self.executor: Executor = options.executor or LocalExecutor()
        self.attempts: dict[str, Attempt] = {}
        self.heartbeat_s = 5.0
        self.connected = asyncio.Event()
        self._outbox: list[Started | Phase] = []
        self._wake = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ws: ClientConnection | None = None
        self._fingerprint_task: asyncio.Task[dict[str, Any]] | None = None
        self._uploads: set[asyncio.Task[None]] = set()

    # ---- lifecycle ------------------------------------------------------------------------

    async def run(self) -> int:
        self._loop = asyncio.get_running_loop()
        # What was loaded so far lives as long as the process: keep it out of the collector's full
        # passes (tens of ms each on a busy node, right in the log path).
        gc.collect()
        gc.freeze()
        try:
            if self.fingerprint is None:  # collected while the first connection is made
                self._fingerprint_task = asyncio.create_task(
                    asyncio.to_thread(
                        lambda: {
                            **node.collect(python=self.options.python, sglang_python=self.options.sglang_python),
                            **self.executor.describe(),
                        }
                    )
                )
            await self._recover_spool()
            for trial_id, _ in artifacts.pending_dirs(self.options.spool_dir):  # left by a runner that died
                self._upload_artifacts(trial_id)
            connection = asyncio.create_task(self._connection_loop())
            helpers: list[asyncio.Task[object]] = [asyncio.create_task(self._stopping.wait())]
            if self.options.parent_pid:
                helpers.append(asyncio.create_task(self._watch_parent()))
            try:
                await asyncio.wait({connection, helpers[0]}, return_when=asyncio.FIRST_COMPLETED)
                if connection.done():
                    connection.result()  # raises RunnerFatal
                await self._shutdown(connection)
            finally:
                for task in helpers:
                    task.cancel()
            return EXIT_OK
        except RunnerFatal as exc:
            log.error("%s", exc)
            await self._stop_all_attempts()
            return exc.exit_code
        finally:
            if self._fingerprint_task is not None and not self._fingerprint_task.done():
                self._fingerprint_task.cancel()
            self.spool.close()

    def stop(self) -> None:
        """Ask the runner to stop: running trials are cancelled, then it exits (thread-unsafe; loop only)."""
        self._stopping.set()

    async def _shutdown(self, connection: asyncio.Task[None]) -> None:
        log.info("stopping: cancelling running trials")
        await self._stop_all_attempts()
        # Give the server a moment to get the last chunks and finished messages.
        deadline = time.monotonic() + 5.0
        while (
            time.monotonic() < deadline
            and self.connected.is_set()
            and any(a.spool.has_unacked for a in self.attempts.values())
        ):
            await asyncio.sleep(0.05)
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._ws.close(CloseCode.GOING_AWAY, "runner stopping"), 5)
        connection.cancel()
        with contextlib.suppress(asyncio.CancelledError, RunnerFatal):
            await connection

    async def _stop_all_attempts(self) -> None:
        running = [a for a in self.attempts.values() if a.task is not None and not a.task.done()]
        for attempt in running:
            process = attempt.process
            # A SLURM job goes on (the next runner re-attaches); a local process is cancelled.
            if process is None or not process.detach():
                self._cancel_attempt(attempt)
        if running:
            tasks = [a.task for a in running if a.task is not None]
            await asyncio.wait(tasks, timeout=self.options.cancel_grace_s + 15)

    async def _watch_parent(self) -> None:
        while os.getppid() == self.options.parent_pid:
            await asyncio.sleep(1.0)
        log.warning("the server process %s is gone; stopping", self.options.parent_pid)
        self.stop()

    async def _recover_spool(self) -> None:
        """Attempts a previous runner process left in the spool: stop their processes if still
        alive and report them finished (cancelled: the trial did not get to finish)."""
        for spooled in self.spool.attempts():
            attempt = Attempt(spooled.trial_id, spooled.attempt_id, spooled, sent_seq=spooled.acked_seq)
            self.attempts[attempt.attempt_id] = attempt
            if spooled.finished is not None:
                continue
            handle = self.executor.reattach(
                attempt.attempt_id,
                resume_offset=spooled_end(spooled),
                grace_s=self.options.cancel_grace_s,
                **self._callbacks(attempt),
            )
            if handle is not None:
                log.info("trial %s: re-attached to SLURM job %s", attempt.trial_id, handle.pid)
                attempt.process, attempt.running = handle, True
                attempt.task = asyncio.create_task(self._follow(attempt, handle))
                continue
            leader = ProcessId(spooled.leader["pid"], spooled.leader["create_time"]) if spooled.leader else None
            killed = await asyncio.to_thread(
                stop_attempt_leftovers, attempt.attempt_id, leader, self.options.cancel_grace_s
            )
            error = "the runner restarted while this attempt ran"
            if killed:
                error += f"; stopped what it left running (pids {', '.join(map(str, killed))})"
            self._finish(attempt, outcome="cancelled", error=error)

    # ---- connection --------------------------------------------------------------------------

    async def _connection_loop(self) -> None:
        delays = backoff_delays()
        headers = {"Authorization": f"Bearer {self.options.token}"}
        while True:
            began = time.monotonic()
            try:
                async with connect(
                    self.url, additional_headers=headers, open_timeout=15, max_size=16 * 1024 * 1024
                ) as ws:
                    self._ws = ws
                    await self._session(ws)
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    raise RunnerFatal(
                        f"the server at {self.options.server_url} refused this runner's token (HTTP {status}); "
                        f"check --token / {TOKEN_ENV}, or create a new runner token on the board",
                        EXIT_TOKEN_REFUSED,
                    ) from None
                log.warning("server answered HTTP %s at %s", status, self.url)
            except InvalidURI as exc:
                raise RunnerFatal(f"--server: {exc}", EXIT_USAGE) from None
            except (
                OSError,
                ConnectionClosed,
                InvalidHandshake,
                TimeoutError,
                ValidationError,
                ProtocolViolation,
            ) as exc:
                log.warning("connection to %s lost: %s", self.url, exc or type(exc).__name__)
            except Exception:  # a runner bug: say so, keep the trials' logs, try again
                log.exception("connection to %s failed", self.url)
            finally:
                self.connected.clear()
                self._ws = None
            if time.monotonic() - began > 10.0:  # it was up a while: start over with short delays
                delays = backoff_delays()
            delay = next(delays)
            log.info("reconnecting in %.1f s", delay)
            await asyncio.sleep(delay)

    async def _session(self, ws: ClientConnection) -> None:
        if self.fingerprint is None and self._fingerprint_task is not None:
            self.fingerprint = await self._fingerprint_task
        held = [a.ref for a in self.attempts.values() if not a.rejected and (a.running or a.spool.has_unacked)]
        await self._send(
            ws,
            Hello(
                runner_version=node.runner_version(),
                fingerprint=self.fingerprint or {},
                labels=self.options.labels,
                attempts=held,
            ),
        )
        welcome = parse_server_message(await asyncio.wait_for(ws.recv(), WELCOME_TIMEOUT_S))
        if not isinstance(welcome, Welcome):
            raise ProtocolViolation(f"expected welcome, got {welcome.type}")
        self.heartbeat_s = welcome.heartbeat_s
        for attempt in self.attempts.values():
            stored = welcome.acked.get(attempt.attempt_id)
            if stored is not None:
                attempt.spool.ack(stored)
            attempt.sent_seq = attempt.spool.acked_seq
            attempt.finished_sent = False
        # Stop what the server no longer wants run; what has ended is still reported (the server
        # acks it, or rejects it when stale, and only then is it dropped).
        for attempt_id in welcome.cancel:
            unwanted = self.attempts.get(attempt_id)
            if unwanted is not None and unwanted.running:
                self._cancel_attempt(unwanted)
        log.info("connected to %s as runner %s (holding %d attempt(s))", self.url, welcome.runner_id, len(held))
        self.connected.set()
        self._wake.set()
        tasks = [
            asyncio.create_task(self._receive(ws)),
            asyncio.create_task(self._sender(ws)),
            asyncio.create_task(self._heartbeat(ws)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _send(self, ws: ClientConnection, message: Any) -> None:
        async with self._send_lock:
            await ws.send(message.model_dump_json())

    async def _heartbeat(self, ws: ClientConnection) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            await self._send(ws, Heartbeat(attempts=[a.ref for a in self.attempts.values() if a.running]))

    async def _sender(self, ws: ClientConnection) -> None:
        while True:
            self._wake.clear()
            if not await self._send_pending(ws):
                await self._wake.wait()

    async def _send_pending(self, ws: ClientConnection) -> bool:
        """Send a batch of what is waiting; True when something was sent."""
        sent = False
        while self._outbox:
            message = self._outbox[0]
            attempt = self.attempts.get(message.attempt_id)
            if attempt is not None and not attempt.rejected:
                await self._send(ws, message)
                sent = True
            self._outbox.pop(0)
        for attempt in list(self.attempts.values()):
            if attempt.rejected:
                continue
            chunks = attempt.next_chunks(SEND_BATCH)
            for chunk in chunks:
                await self._send(
                    ws,
                    LogChunkMsg(
                        trial_id=attempt.trial_id,
                        attempt_id=attempt.attempt_id,
                        seq=chunk.seq,
                        offset=chunk.offset,
                        data=chunk.data,
                    ),
                )
                if trace.on:
                    trace("r_sent", attempt.trial_id, chunk.seq)
                attempt.sent_seq = chunk.seq
                sent = True
            finished = attempt.spool.finished
            if (
                finished is not None
                and not attempt.finished_sent
                and attempt.sent_seq >= attempt.spool.last_seq
                and self.attempts.get(attempt.attempt_id) is attempt
            ):
                await self._send(ws, Finished.model_validate(finished))
                attempt.finished_sent = True
                sent = True
        return sent

    async def _receive(self, ws: ClientConnection) -> None:
        async for raw in ws:
            try:
                message = parse_server_message(raw)
            except ValidationError as exc:
                log.warning("ignoring a message the runner does not understand: %s", exc.errors()[:1])
                continue
            attempt = self.attempts.get(getattr(message, "attempt_id", ""))
            if isinstance(message, Dispatch):
                self._dispatch(message)
            elif attempt is None:
                continue  # about an attempt this runner no longer holds
            elif isinstance(message, Ack):
                attempt.spool.ack(message.seq)
                if message.seq >= attempt.flush_seq:
                    attempt.flushed.set()
            elif isinstance(message, FinishedAck):
                if attempt.spool.finished is not None:
                    self._drop(attempt)
            elif isinstance(message, Cancel):
                log.info("trial %s: cancel (%s)", attempt.trial_id, message.reason or "no reason given")
                attempt.cancel_reason = message.reason or "cancelled by the board"
                self._cancel_attempt(attempt)
            elif isinstance(message, Reject):
                log.warning(
                    "trial %s attempt %s rejected by the server: %s",
                    attempt.trial_id,
                    attempt.attempt_id,
                    message.reason,
                )
                attempt.rejected = True
                if attempt.process is not None:
                    attempt.process.cancel(kill_now=True)
                self._drop(attempt)

    # ---- attempts -------------------------------------------------------------------------------

    def _dispatch(self, message: Dispatch) -> None:
        if message.attempt_id in self.attempts:
            return  # a repeat of a dispatch this runner already has
        spooled = self.spool.open(message.trial_id, message.attempt_id)
        attempt = Attempt(message.trial_id, message.attempt_id, spooled, sent_seq=spooled.acked_seq)
        self.attempts[attempt.attempt_id] = attempt
        busy = sum(1 for a in self.attempts.values() if a.running)
        if busy >= self.options.max_concurrent or self._stopping.is_set():
            reason = (
                "the runner is stopping" if self._stopping.is_set() else f"the runner is busy ({busy} trial(s) running)"
            )
            self._finish(attempt, outcome="failed_to_start", error=reason)
            return
        attempt.running = True
        attempt.task = asyncio.create_task(self._run_attempt(attempt, message.recipe, message.requirements))

    def _callbacks(self, attempt: Attempt) -> dict[str, Any]:
        loop = self._loop
        assert loop is not None  # run() sets it before any trial starts
        return dict(
            on_chunk=lambda chunk: self._spool_chunk(attempt, chunk),
            on_phase=lambda name: loop.call_soon_threadsafe(self._queue_phase, attempt, name),
            on_teardown=lambda: loop.call_soon_threadsafe(self._queue_phase, attempt, "tearing down"),
        )

    async def _follow(self, attempt: Attempt, handle: Any) -> None:
        """A re-attached trial: wait for its end, then the same cleanup as `_run_attempt`."""
        ending: Ending | None = None
        try:
            result = await asyncio.to_thread(handle.wait)
            if result is not None:
                ending = Ending(result.outcome, result.exit_code, result.signal, result.error)
        except Exception as exc:  # a runner bug must not leave the trial hanging on the board
            log.exception("trial %s: the runner failed following it", attempt.trial_id)
            ending = Ending("exited", error=f"runner error: {exc!r}"[:2000])
        finally:
            await self._end_attempt(attempt, ending)

    async def _run_attempt(
        self, attempt: Attempt, recipe: dict[str, Any], requirements: dict[str, Any] | None = None
    ) -> None:
        """One attempt, from launch to its reported end. Every way out (a recipe that does not build, a
        program that does not start, a cancel, a timeout, a runner bug, the normal end) comes back here
        with its `Ending`, and `_end_attempt` then does the one cleanup (buildkite/agent's run_job.go)."""
        label = f"trial {attempt.trial_id} attempt {attempt.attempt_id}"
        ending: Ending | None = None
        try:
            ending = await self._attempt(attempt, recipe, requirements, label)
        except Exception as exc:  # a runner bug must not leave the trial hanging on the board
            log.exception("%s: the runner failed", label)
            process = attempt.process
            if process is not None and process.popen and process.popen.returncode is None:
                process.cancel(kill_now=True)
                await asyncio.to_thread(process.wait)
            outcome = "failed_to_start" if process is None else "exited"
            ending = Ending(outcome, error=f"runner error: {exc!r}"[:2000])
        finally:
            await self._end_attempt(attempt, ending)

    async def _attempt(
        self, attempt: Attempt, recipe: dict[str, Any], requirements: dict[str, Any] | None, label: str
    ) -> Ending | None:
        """Launch the attempt and wait for its end: how it ended (None: detached from a SLURM job, which
        the next runner process re-attaches and ends)."""
        self._queue(Phase(trial_id=attempt.trial_id, attempt_id=attempt.attempt_id, phase="launching"))
        try:
            spec = build_launch(recipe, python=self.options.python)
        except RecipeError as exc:
            return Ending("failed_to_start", error=str(exc))
        # Whatever the trial writes there is uploaded to the board when it ends (runners/artifacts.py).
        artifacts_dir = artifacts.trial_dir(self.options.spool_dir, attempt.trial_id)
        artifacts_dir.mkdir(parents=True, exist_ok=True)
        spec = dataclasses.replace(spec, env={**spec.env, artifacts.ARTIFACTS_ENV: str(artifacts_dir)})
        gpu_before = await asyncio.to_thread(gpu_memory_used)
        if attempt.cancel_requested:
            return Ending("cancelled", error="cancelled before it started")
        try:
            process = self.executor.trial(
                spec,
                attempt.attempt_id,
                trial_id=attempt.trial_id,
                requirements=requirements,
                grace_s=self.options.cancel_grace_s,
                **self._callbacks(attempt),
            )
        except RecipeError as exc:
            return Ending("failed_to_start", error=str(exc))
        try:
            process.start()
        except OSError as exc:
            return Ending("failed_to_start", error=f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}")
        attempt.process = process
        if process.leader is not None:
            attempt.spool.set_leader(process.leader.pid, process.leader.create_time)
        log.info("%s: started %s %s: %s", label, self.executor.name, process.pid, " ".join(spec.argv)[:200])
        await asyncio.to_thread(process.wait_running)  # a queued SLURM job reports its reason as the phase
        self._queue(Started(trial_id=attempt.trial_id, attempt_id=attempt.attempt_id, pid=process.pid))
        self._queue_phase(attempt, "running")
        if attempt.cancel_requested:
            process.cancel()
        result = await asyncio.to_thread(process.wait)  # the output reader is done: every chunk is spooled
        if result is None:
            return None
        released, note = await asyncio.to_thread(self.executor.gpus_released, gpu_before)
        log.info(
            "%s: %s (exit code %s, signal %s)%s",
            label,
            result.outcome,
            result.exit_code,
            result.signal,
            f"; {note}" if note else "",
        )
        return Ending(result.outcome, result.exit_code, result.signal, result.error, released, note)

    async def _end_attempt(self, attempt: Attempt, ending: Ending | None) -> None:
        """The one cleanup of an attempt, whatever the way out: its logs flushed to the board, its artifacts
        uploaded, then its end reported, last and once. `None`: nothing ends (a detached SLURM job)."""
        try:
            if ending is None:
                return
            try:
                if ending.outcome == "cancelled" and attempt.cancel_reason and not attempt.rejected:
                    # the board's Cancel: the log's closing line, flushed with the rest before the end
                    self._closing_line(attempt, f"{attempt.cancel_reason}; the trial's processes were stopped")
                await self._flush_logs(attempt)
                await self._upload_now(attempt.trial_id)
            except Exception:  # the end is reported all the same (what was not uploaded stays on disk)
                log.exception("trial %s: cleanup failed", attempt.trial_id)
            finally:
                self._finish(attempt, **dataclasses.asdict(ending))
        finally:
            attempt.running = False

    async def _flush_logs(self, attempt: Attempt, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Wait until the board has stored every chunk spooled so far (the spool keeps resending what it
        has not: this only orders the end after the log), while connected, at most `timeout_s`."""
        last = attempt.spool.last_seq
        attempt.flushed.clear()
        if attempt.rejected or attempt.spool.acked_seq >= last or not self.connected.is_set():
            return
        attempt.flush_seq = last
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(attempt.flushed.wait(), timeout_s)

    def _upload_artifacts(self, trial_id: int) -> None:
        """Upload the artifact directory a runner that died left for a trial, in the background."""
        if self._artifacts_dir(trial_id) is None:
            return
        task = asyncio.create_task(self._upload_now(trial_id))
        self._uploads.add(task)
        task.add_done_callback(self._uploads.discard)

    async def _upload_now(self, trial_id: int) -> None:
        """Upload the trial's artifact directory (one the trial left empty is removed at once)."""
        directory = self._artifacts_dir(trial_id)
        if directory is not None:
            await self._upload(trial_id, directory)

    def _artifacts_dir(self, trial_id: int) -> Path | None:
        """The trial's artifact directory when it holds files to upload; an empty one is removed."""
        directory = artifacts.trial_dir(self.options.spool_dir, trial_id)
        if not directory.is_dir():
            return None
        if not artifacts.files_of(directory):
            artifacts.remove_dir(directory)
            return None
        return directory

    async def _upload(self, trial_id: int, directory: Path, tries: int = 8) -> None:
        delays = backoff_delays()
        for attempt in range(1, tries + 1):
            try:
                done = await asyncio.to_thread(
                    artifacts.upload_dir, self.options.server_url, self.options.token, trial_id, directory
                )
            except artifacts.UploadError as exc:
                log.warning("trial %s: artifact upload failed (try %s of %s): %s", trial_id, attempt, tries, exc)
                await asyncio.sleep(next(delays))
                continue
            if done:
                total = sum(u.size for u in done)
                log.info("trial %s: uploaded %s artifact(s), %s bytes", trial_id, len(done), total)
            return
        log.warning("trial %s: artifacts left in %s; the next runner start uploads them", trial_id, directory)

    def _spool_chunk(self, attempt: Attempt, chunk: OutputChunk) -> None:
        """Called on the output reader thread: to disk first, then wake the sender."""
        if attempt.rejected:
            return
        seq = attempt.spool.append(chunk.offset, chunk.data)
        attempt.output_end = (chunk.offset + chunk.nbytes, chunk.data.endswith("\n"))
        if seq >= 0 and len(attempt.fresh) < FRESH_MAX:
            attempt.fresh.append(SpooledChunk(seq, chunk.offset, chunk.data))
        if trace.on:
            trace("r_read", attempt.trial_id, seq, chunk.read_ns)
            trace("r_spooled", attempt.trial_id, seq)
        assert self._loop is not None  # run() sets it before any trial starts
        self._loop.call_soon_threadsafe(self._wake.set)

    def _queue(self, message: Started | Phase) -> None:
        self._outbox.append(message)
        self._wake.set()

    def _queue_phase(self, attempt: Attempt, name: str) -> None:
        self._queue(Phase(trial_id=attempt.trial_id, attempt_id=attempt.attempt_id, phase=name[:40]))

    def _finish(
        self,
        attempt: Attempt,
        *,
        outcome: str,
        exit_code: int | None = None,
        signal: int | None = None,
        error: str = "",
        gpu_released: bool | None = None,
        gpu_note: str = "",
    ) -> None:
        if attempt.rejected:
            return
        message = Finished(
            trial_id=attempt.trial_id,
            attempt_id=attempt.attempt_id,
            outcome=outcome,
            exit_code=exit_code,
            signal=signal,
            error=error,
            last_seq=attempt.spool.last_seq,
            gpu_released=gpu_released,
            gpu_note=gpu_note[:500],
        )
        attempt.spool.set_finished(message.model_dump())
        self._wake.set()

    def _closing_line(self, attempt: Attempt, text: str) -> None:
        """The runner's own last line of the trial's log (as its first is), spooled before Finished."""
        offset, whole = attempt.output_end
        line = ("" if whole else "\n") + f"{STARTED_PREFIX}{text}\n"
        self._spool_chunk(attempt, OutputChunk(offset, line, len(line.encode())))

    def _cancel_attempt(self, attempt: Attempt) -> None:
        attempt.cancel_requested = True
        if attempt.process is not None:
            attempt.process.cancel()

    def _drop(self, attempt: Attempt) -> None:
        """Forget an attempt: its spool is deleted (finished and acked, rejected, or stale)."""
        self.attempts.pop(attempt.attempt_id, None)
        attempt.spool.remove()
        self.executor.forget(attempt.attempt_id)


class ProtocolViolation(Exception):
    """The server sent something out of order; reconnect."""


# ---- entry points ---------------------------------------------------------------------------------


def run(
    server_url: str,
    token: str,
    *,
    spool_dir: Path,
    labels: Sequence[str] = (),
    name: str = "",
    python: str | None = None,
    sglang_python: str | None = None,
    cancel_grace_s: float = 10.0,
    max_concurrent: int = 1,
    parent_pid: int | None = None,
    executor: Executor | None = None,
) -> int:
    """Run the runner until SIGTERM/SIGINT (exit 0) or a fatal error (2: bad arguments,
    3: the server refused the token). Blocks; sets up logging to stderr when none is set."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO,
            format=f"%(asctime)s runner{' ' + name if name else ''}: %(message)s",
            datefmt="%H:%M:%S",
        )
    if not token:
        log.error("no runner token: pass --token-file or set %s", TOKEN_ENV)
        return EXIT_USAGE
    # The token lives in this process's memory only: trials never inherit it, nor read it from
    # /proc/<runner>/environ or memory (a non-dumpable process's /proc files belong to root).
    withhold(token)
    os.environ.pop(TOKEN_ENV, None)
    _not_dumpable()
    say_recipe_interpreter(python or sys.executable)
    options = RunnerOptions(
        server_url=server_url,
        token=token,
        spool_dir=Path(spool_dir),
        labels=list(labels),
        name=name,
        python=python,
        sglang_python=sglang_python,
        cancel_grace_s=cancel_grace_s,
        max_concurrent=max_concurrent,
        parent_pid=parent_pid,
        executor=executor,
    )

    async def main() -> int:
        try:
            agent = Agent(options)
        except (RunnerFatal, SpoolBusy) as exc:
            log.error("%s", exc)
            return getattr(exc, "exit_code", EXIT_USAGE)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, agent.stop)
        return await agent.run()

    return asyncio.run(main())


def say_recipe_interpreter(python: str) -> bool:
    """Log which interpreter, torch and CUDA the recipes will use (a warning when it has no torch, or
    cannot be run); returns whether it has torch. Asked in a subprocess with a deadline."""
    has_torch, summary = node.interpreter_summary(python, node.probe_interpreter(python))
    log.log(logging.INFO if has_torch else logging.WARNING, "%s", summary)
    return has_torch


def _not_dumpable() -> None:
    if sys.platform != "linux":
        return
    PR_SET_DUMPABLE = 4
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
