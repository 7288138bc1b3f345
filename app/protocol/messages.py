"""Messages between a runner and the server, over one websocket (JSON text frames).

Pydantic only: the runner imports this module without any web code. Every message has a
`type`; `parse_runner_message` / `parse_server_message` turn a frame into the right model.

Flow: the runner connects to /api/runners/ws with `Authorization: Bearer <runner token>`, sends
`hello`, gets `welcome` (with the last seq the server stored for each attempt the runner says
it still holds, so it resends only the rest). The server pushes `dispatch` and `cancel`; the
runner sends `started`, `phase`, `log` chunks (each acked with `ack`), `finished`
(acked with `finished_ack`; the runner resends it until then), and `heartbeat`.
A message for an attempt that is not the trial's current one gets `reject` and is dropped.
"""

from __future__ import annotations

import json
from enum import IntEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

PROTOCOL_VERSION = 1


class CloseCode(IntEnum):
    """Every websocket close code the board sends (runner, live-log and page-feed sockets), spelled once; the
    browser reads the ones it acts on from the page (`close_codes_json`), never from its own copy."""

    GOING_AWAY = 1001  # the server (or the runner) shuts down: reconnect and catch up
    POLICY = 1008  # refused by policy (a page worker takes no websocket; a feed's bad request)
    SERVER_ERROR = 1011  # the server failed on a batch: reconnect and resend
    RESYNC = 4000  # a live-log viewer fell behind: reconnect with ?after=<last seq you have>
    BAD_HELLO = 4400  # a runner's first message was not a hello
    UNAUTHORIZED = 4401  # the credential ended: a browser's session or token, a runner's token (log in again)
    LOGIN_REQUIRED = 4403  # a browser socket with no credential
    NOT_FOUND = 4404  # no such trial
    SILENT = 4408  # a runner silent past the heartbeat limit
    REPLACED = 4409  # a runner's older socket, replaced by its newer connection


def close_codes_json() -> str:
    """The close codes by name, for the pages' data attributes (static/livelog.js, static/pagefeed.js)."""
    return json.dumps({c.name.lower(): int(c) for c in CloseCode})


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AttemptRef(_Msg):
    trial_id: int
    attempt_id: str


# ---- runner -> server ---------------------------------------------------------------------


class Hello(_Msg):
    type: Literal["hello"] = "hello"
    protocol: int = PROTOCOL_VERSION
    runner_version: str
    fingerprint: dict[str, Any]
    labels: list[str] = Field(default_factory=list)
    attempts: list[AttemptRef] = Field(default_factory=list, description="Attempts still running or with unsent spool.")


class Heartbeat(_Msg):
    type: Literal["heartbeat"] = "heartbeat"
    attempts: list[AttemptRef] = Field(default_factory=list)


class Started(AttemptRef):
    type: Literal["started"] = "started"
    pid: int


class Phase(AttemptRef):
    type: Literal["phase"] = "phase"
    phase: str = Field(max_length=40, description="launching, waiting for ready, benchmarking, tearing down, ...")


class LogChunkMsg(AttemptRef):
    type: Literal["log"] = "log"
    seq: int = Field(ge=0, description="0, 1, 2, ... per attempt")
    offset: int = Field(ge=0, description="Byte offset of this chunk in the attempt's output")
    data: str


class Finished(AttemptRef):
    type: Literal["finished"] = "finished"
    exit_code: int | None = None
    signal: int | None = None
    outcome: Literal["exited", "timed_out", "cancelled", "failed_to_start"] = "exited"
    error: str = ""
    last_seq: int = Field(-1, description="Seq of the last log chunk of this attempt (-1: none)")
    gpu_released: bool | None = None
    gpu_note: str = ""


RunnerMessage = Annotated[Hello | Heartbeat | Started | Phase | LogChunkMsg | Finished, Field(discriminator="type")]


# ---- server -> runner ---------------------------------------------------------------------


class Welcome(_Msg):
    type: Literal["welcome"] = "welcome"
    runner_id: int
    heartbeat_s: float
    acked: dict[str, int] = Field(default_factory=dict, description="attempt_id -> last stored seq (-1: none)")
    cancel: list[str] = Field(default_factory=list, description="Attempts the runner should stop (stale or cancelled).")


class Dispatch(AttemptRef):
    type: Literal["dispatch"] = "dispatch"
    recipe: dict[str, Any]
    approach_key: str = ""
    requirements: dict[str, Any] = Field(
        default_factory=dict,
        description="The approach's requirements (nodes, gpus_per_node, sbatch) for executors that allocate.",
    )


class Cancel(AttemptRef):
    type: Literal["cancel"] = "cancel"
    reason: str = ""


class Ack(AttemptRef):
    type: Literal["ack"] = "ack"
    seq: int


class FinishedAck(AttemptRef):
    type: Literal["finished_ack"] = "finished_ack"


class Reject(AttemptRef):
    type: Literal["reject"] = "reject"
    reason: str


ServerMessage = Annotated[Welcome | Dispatch | Cancel | Ack | FinishedAck | Reject, Field(discriminator="type")]

_runner_adapter: TypeAdapter[Any] = TypeAdapter(RunnerMessage)
_server_adapter: TypeAdapter[Any] = TypeAdapter(ServerMessage)


def parse_runner_message(raw: str | bytes) -> Hello | Heartbeat | Started | Phase | LogChunkMsg | Finished:
    return _runner_adapter.validate_json(raw)


def parse_server_message(raw: str | bytes) -> Welcome | Dispatch | Cancel | Ack | FinishedAck | Reject:
    return _server_adapter.validate_json(raw)
