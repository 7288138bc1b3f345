"""The runner's side of trial artifacts: each trial gets a directory (`CAMPAIGN_ARTIFACTS_DIR` in its
environment) under the runner's spool; when the trial ends the runner uploads every regular file in it to
the board, in chunks, resuming where the board's copy stops (a runner restarted mid-upload, a dropped
connection), then removes the directory. A directory left by a runner that died is uploaded when the next
runner process starts. Standard library only (urllib): the runner's environment stays small.

The board's side, and the protocol, are app/domain/artifacts.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

ARTIFACTS_ENV = "CAMPAIGN_ARTIFACTS_DIR"
CHUNK_BYTES = 4 << 20  # per PUT; the board refuses bodies over 8 MiB on this route
MAX_FILES = 200
TIMEOUT_S = 60.0

log = logging.getLogger(__name__)


class UploadError(Exception):
    """The board refused an upload (said in its words) or could not be reached. `refused`: the board said
    no (a 4xx: too large, a bad name, not this runner's trial): trying again will not help."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass
class Uploaded:
    name: str
    size: int
    sha256: str
    resumed_from: int


def trial_dir(spool_dir: Path, trial_id: int) -> Path:
    return spool_dir / "artifacts" / str(trial_id)


def pending_dirs(spool_dir: Path) -> list[tuple[int, Path]]:
    """Artifact directories still waiting for upload: (trial id, directory)."""
    root = spool_dir / "artifacts"
    if not root.is_dir():
        return []
    return sorted((int(p.name), p) for p in root.iterdir() if p.is_dir() and p.name.isdigit())


def files_of(directory: Path) -> list[tuple[str, Path]]:
    """(name, path) of the regular files below `directory` (links are not followed), sorted, at most MAX_FILES."""
    found = []
    for path in sorted(directory.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        found.append((path.relative_to(directory).as_posix(), path))
    return found[:MAX_FILES]


class Client:
    """The board's upload routes, with the runner's token."""

    def __init__(self, server_url: str, token: str) -> None:
        self.base = server_url.rstrip("/")
        self.token = token

    def _call(self, method: str, path: str, body: bytes | None = None, content_type: str = "") -> dict:
        request = urllib.request.Request(self.base + path, data=body, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if content_type:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                detail = json.loads(exc.read() or b"{}").get("detail", "")
            except ValueError:
                detail = ""
            refused = 400 <= exc.code < 500 and exc.code not in (408, 429)
            raise UploadError(f"{method} {path}: {exc.code} {detail or exc.reason}", refused=refused) from None
        except (urllib.error.URLError, OSError) as exc:
            raise UploadError(f"{method} {path}: {exc}") from None

    def upload(self, trial_id: int, name: str, path: Path) -> Uploaded:
        where = f"/api/trials/{trial_id}/uploads/{quote(name)}"
        status = self._call("GET", where)
        size = path.stat().st_size
        offset = int(status.get("offset", 0))
        if offset > size:  # the board holds more than the file now has: it changed, start over
            self._call("DELETE", where)
            offset = 0
        resumed = offset
        digest = hashlib.sha256()
        with path.open("rb") as f:
            hashed = 0
            while hashed < offset:  # the bytes the board already has, for the whole file's hash
                block = f.read(min(CHUNK_BYTES, offset - hashed))
                if not block:
                    break
                digest.update(block)
                hashed += len(block)
            while True:
                block = f.read(CHUNK_BYTES)
                if not block:
                    break
                digest.update(block)
                answer = self._call("PUT", f"{where}?offset={offset}", block, "application/octet-stream")
                offset = int(answer["offset"])
        self._call(
            "POST",
            f"/api/trials/{trial_id}/artifacts",
            json.dumps({"name": name, "size": offset, "sha256": digest.hexdigest()}).encode(),
            "application/json",
        )
        return Uploaded(name, offset, digest.hexdigest(), resumed)


def upload_dir(server_url: str, token: str, trial_id: int, directory: Path) -> list[Uploaded]:
    """Upload every file of a trial's artifact directory, then remove it. A file the board refuses (too
    large, a bad name) is logged and dropped; an unreachable board raises UploadError and leaves what was
    not uploaded on disk for the next try (an uploaded file is removed as soon as the board has it)."""
    client = Client(server_url, token)
    done = []
    for name, path in files_of(directory):
        try:
            done.append(client.upload(trial_id, name, path))
        except UploadError as exc:
            if not exc.refused:
                raise
            log.warning("trial %s: artifact %s refused by the board: %s", trial_id, name, exc)
        path.unlink(missing_ok=True)
    remove_dir(directory)
    return done


def remove_dir(directory: Path) -> None:
    """The trial's directory, and the artifacts folder when no other trial's is left in it."""
    shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(OSError):
        directory.parent.rmdir()
