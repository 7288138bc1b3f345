"""The runner's on-disk log spool: every chunk is written here before it is sent.

Layout under the spool directory (one runner process per directory, held by an flock):
    <attempt>/chunks.jsonl   append-only, one JSON object per chunk: {"seq", "offset", "data"}
    <attempt>/meta.json      trial_id, attempt_id, acked_seq, base_seq (first seq still in the
                             file), finished (the Finished message once the trial ended),
                             leader (pid + create_time of the trial's process)
A chunk is sent until the server acks it (`ack(seq)`: every chunk through seq is stored).
When everything written is acked the chunk file is truncated (compaction); when the
Finished message is acked too, the attempt's directory is deleted. After a runner restart
`Spool.attempts()` finds what is left and the agent resends it.

No fsync per chunk: a crash can lose the tail the OS had not written, never corrupt what is
before it (a torn last line is cut off on reopen). Acks are persisted lazily: after a crash
the runner may resend chunks the server already has, which it stores idempotently.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ACK_PERSIST_S = 1.0


class SpoolBusy(RuntimeError):
    """Another runner process holds this spool directory."""


@dataclass(frozen=True)
class SpooledChunk:
    seq: int
    offset: int
    data: str


def _dir_name(attempt_id: str) -> str:
    if _SAFE_NAME.fullmatch(attempt_id):
        return attempt_id
    return "a-" + hashlib.sha256(attempt_id.encode()).hexdigest()[:32]


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, sort_keys=True))
    os.replace(tmp, path)


class AttemptSpool:
    """The spooled output of one attempt. Thread-safe: the output reader appends while the
    network side reads, acks and compacts."""

    def __init__(self, directory: Path, meta: dict[str, Any]) -> None:
        self.directory = directory
        self.trial_id: int = meta["trial_id"]
        self.attempt_id: str = meta["attempt_id"]
        self.acked_seq: int = meta.get("acked_seq", -1)
        self._base_seq: int = meta.get("base_seq", 0)
        self.finished: dict[str, Any] | None = meta.get("finished")
        self.leader: dict[str, Any] | None = meta.get("leader")
        self._lock = threading.RLock()
        self._positions: list[int] = []  # file position of seq base_seq + i
        self._chunks_path = directory / "chunks.jsonl"
        self._meta_path = directory / "meta.json"
        self._last_persist = 0.0
        self._removed = False
        self._load_chunks()
        self._writer = open(self._chunks_path, "ab")
        self._reader = open(self._chunks_path, "rb")
        self._persist()

    # -- state --

    @property
    def last_seq(self) -> int:
        """Seq of the last chunk written (-1: none)."""
        with self._lock:
            return self._base_seq + len(self._positions) - 1

    @property
    def has_unacked(self) -> bool:
        with self._lock:
            return self.last_seq > self.acked_seq or self.finished is not None

    # -- writing --

    def append(self, offset: int, data: str) -> int:
        """Spool one chunk; returns its seq (-1: the attempt was removed, nothing is kept)."""
        with self._lock:
            if self._removed:
                return -1
            seq = self.last_seq + 1
            line = json.dumps({"seq": seq, "offset": offset, "data": data}, ensure_ascii=False)
            self._positions.append(self._writer.tell())
            self._writer.write(line.encode() + b"\n")
            self._writer.flush()
            return seq

    def set_leader(self, pid: int, create_time: float) -> None:
        with self._lock:
            self.leader = {"pid": pid, "create_time": create_time}
            self._persist()

    def set_finished(self, message: dict[str, Any]) -> None:
        """Keep the attempt's Finished message until the server acks it."""
        with self._lock:
            self.finished = message
            self._persist()  # no-op once removed

    # -- reading and acking --

    def chunks_after(self, seq: int, limit: int = 64) -> list[SpooledChunk]:
        """Up to `limit` spooled chunks with a seq greater than `seq`, in order."""
        with self._lock:
            if self._removed:
                return []
            start = max(seq + 1, self._base_seq, self.acked_seq + 1)
            index = start - self._base_seq
            if index >= len(self._positions):
                return []
            self._writer.flush()
            self._reader.seek(self._positions[index])
            out = []
            for _ in range(min(limit, len(self._positions) - index)):
                record = json.loads(self._reader.readline())
                out.append(SpooledChunk(record["seq"], record["offset"], record["data"]))
            return out

    def ack(self, seq: int) -> None:
        """The server has stored every chunk through seq. Compacts when nothing is left to send."""
        with self._lock:
            if seq <= self.acked_seq or self._removed:
                return
            self.acked_seq = seq
            if self._positions and seq >= self.last_seq:
                self._base_seq = self.last_seq + 1
                self._positions = []
                self._writer.truncate(0)
                self._writer.seek(0)
                self._persist()
            elif time.monotonic() - self._last_persist >= _ACK_PERSIST_S:
                self._persist()

    def remove(self) -> None:
        """Forget the attempt: delete its files (finished and acked, or rejected by the server)."""
        with self._lock:
            if self._removed:
                return
            self._removed = True
            self._writer.close()
            self._reader.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- internals --

    def _persist(self) -> None:
        if self._removed:
            return
        _write_json_atomic(
            self._meta_path,
            {
                "trial_id": self.trial_id,
                "attempt_id": self.attempt_id,
                "acked_seq": self.acked_seq,
                "base_seq": self._base_seq,
                "finished": self.finished,
                "leader": self.leader,
            },
        )
        self._last_persist = time.monotonic()

    def _load_chunks(self) -> None:
        """Index the chunk file; cut off a torn or unexpected tail."""
        if not self._chunks_path.exists():
            return
        good_end = 0
        expected = self._base_seq
        with open(self._chunks_path, "rb") as handle:
            for line in iter(handle.readline, b""):
                try:
                    if not line.endswith(b"\n"):
                        raise ValueError("torn line")
                    record = json.loads(line)
                    if record["seq"] != expected:
                        raise ValueError("seq out of order")
                except (ValueError, KeyError, TypeError):
                    break
                self._positions.append(good_end)
                good_end += len(line)
                expected += 1
        if good_end != self._chunks_path.stat().st_size:
            os.truncate(self._chunks_path, good_end)


class Spool:
    """All attempts spooled by one runner, under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.root / ".lock", "w")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise SpoolBusy(
                f"spool directory {self.root} is in use by another runner; give each runner its own --spool-dir"
            ) from None
        self._open: dict[str, AttemptSpool] = {}

    def open(self, trial_id: int, attempt_id: str) -> AttemptSpool:
        """The spool of an attempt, created empty when new."""
        if attempt_id in self._open and not self._open[attempt_id]._removed:
            return self._open[attempt_id]
        directory = self.root / _dir_name(attempt_id)
        directory.mkdir(exist_ok=True)
        meta = {"trial_id": trial_id, "attempt_id": attempt_id}
        meta_path = directory / "meta.json"
        if meta_path.exists():
            try:
                meta = json.loads(meta_path.read_text())
            except ValueError:
                pass
        spool = AttemptSpool(directory, meta)
        self._open[attempt_id] = spool
        return spool

    def attempts(self) -> list[AttemptSpool]:
        """Every attempt with files in the spool (after a restart: what is left to send)."""
        found = []
        for meta_path in sorted(self.root.glob("*/meta.json")):
            try:
                meta = json.loads(meta_path.read_text())
                found.append(self.open(int(meta["trial_id"]), str(meta["attempt_id"])))
            except (ValueError, KeyError, TypeError, OSError):
                continue  # not ours or unreadable: leave it alone
        return found

    def close(self) -> None:
        for spool in self._open.values():
            if not spool._removed:
                with spool._lock:
                    spool._persist()
                    spool._writer.close()
                    spool._reader.close()
        self._open.clear()
        self._lock_file.close()
