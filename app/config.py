"""Settings: one env prefix (CAMPAIGN_), a SQLite file under the data dir by default."""

from __future__ import annotations

import secrets
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.protocol.logconfig import known_level

PACKAGE_DIR = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """templates/, static/ or alembic/: inside the installed package (the wheel maps them there, see
    setup.py), else at the top of the checkout beside app/ (source tree, editable install)."""
    for candidate in (PACKAGE_DIR / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"{name}/ is neither in {PACKAGE_DIR} nor beside it: a broken install")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CAMPAIGN_", env_file=".env", extra="ignore")

    data_dir: Path = Field(Path("data"), description="Where the SQLite file, the secret key and runner spools live.")
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL; default sqlite:///<data_dir>/campaign.db. PostgreSQL: postgresql+psycopg://user@host/db",
    )
    secret_key: str | None = Field(
        None, description="Signs session cookies and share links; generated once into <data_dir>/secret_key when unset."
    )
    host: str = Field("127.0.0.1", description="Bind address; 127.0.0.1 unless you mean to expose the board.")
    port: int = Field(8000, description="HTTP port.")
    public_url: str | None = Field(
        None, description="Base URL printed in login and share links; default http://host:port."
    )
    auth_enabled: bool = Field(
        True, description="Login required for every state-changing request. Off only for local experiments."
    )
    session_max_age_s: int = Field(14 * 24 * 3600, description="Lifetime of a login session cookie.")
    login_token_ttl_s: int = Field(24 * 3600, description="How long a printed one-time login URL stays valid.")
    embedded_runner: bool = Field(True, description="`campaign serve` also starts a local runner on this machine.")
    page_workers: int = Field(
        1,
        ge=0,
        le=32,
        description="Processes that serve pages and reads beside the hub (sockets, writes), so rendering pages "
        "never takes CPU from the live logs; 0 serves everything from one process.",
    )
    log_cap_bytes: int = Field(
        32 * 1024 * 1024, description="Stored log bytes per trial; past it the head and tail are kept."
    )
    heartbeat_s: float = Field(5.0, gt=0, le=3600, description="Runner heartbeat period.")
    heartbeat_notice_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description='Open Runners pages are told of runners\' heartbeats (their "last seen") at most once per this '
        "many seconds, however many runners beat.",
    )
    access_recheck_s: float = Field(
        3.0,
        gt=0,
        le=3600,
        description="How often open page feeds and live-log sockets check that their session or API token is still "
        "live (revoked elsewhere, expired, user disabled); a revoke on this server closes them at once.",
    )
    runner_lost_after_s: float | None = Field(
        None,
        gt=0,
        description="A runner silent this long is offline; its running trial is lost. Default: three heartbeats.",
    )
    allowed_hosts: str = Field(
        "",
        description="Comma-separated Host names the server also answers to (besides loopback names, CAMPAIGN_HOST "
        "and the public URL's host), e.g. board.example.org; a request with any other Host (DNS rebinding) gets 400.",
    )
    max_body_bytes: int = Field(1024 * 1024, ge=1024, description="Largest request body a route accepts (413 past it).")
    max_campaign_file_bytes: int = Field(
        2 * 1024 * 1024,
        ge=1024,
        description="Largest campaign file an import accepts as sent, YAML or gzip-compressed YAML (413 past it).",
    )
    max_campaign_file_expanded_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Largest YAML a gzip-compressed campaign file may expand to (a results campaign); past it the "
        "import is refused and nothing is imported.",
    )
    login_attempts_per_minute: int = Field(
        10, ge=1, description="Failed login-link attempts allowed per client address per minute; then 429."
    )
    artifact_max_file_bytes: int = Field(
        4 * 1024**3, ge=1, description="Largest artifact file a trial may upload (413 past it)."
    )
    artifact_max_trial_bytes: int = Field(
        8 * 1024**3, ge=1, description="Most artifact bytes one trial may keep, all its files together."
    )
    artifact_retention_bytes: int = Field(
        50 * 1024**3,
        ge=1,
        description="Most artifact bytes a campaign keeps; past it the oldest artifacts are removed first.",
    )
    cancel_grace_s: float = Field(10.0, description="SIGTERM to SIGKILL grace when a trial is cancelled or times out.")
    log_level: str = Field(
        "INFO", description="Level of the server's and the runner's logs on stderr: DEBUG, INFO, WARNING or ERROR."
    )

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        return known_level(value)

    @model_validator(mode="after")
    def _default_lost_after(self) -> Settings:
        if self.runner_lost_after_s is None:
            self.runner_lost_after_s = self.lost_after_s()
        return self

    def lost_after_s(self) -> float:
        """How long a silent runner stays online: runner_lost_after_s, or three heartbeats when unset."""
        return self.runner_lost_after_s if self.runner_lost_after_s is not None else 3 * self.heartbeat_s

    def host_allowlist(self) -> list[str]:
        """Host header values this server answers to: loopback names, the bind address, the public
        URL's host and CAMPAIGN_ALLOWED_HOSTS. Anything else is a DNS-rebinding attempt."""
        hosts = {"localhost", "127.0.0.1", "::1"}
        if self.host not in ("0.0.0.0", "::", ""):
            hosts.add(self.host)
        public_host = urlsplit(self.public_url).hostname if self.public_url else None
        if public_host:
            hosts.add(public_host)
        hosts.update(h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip())
        return sorted(hosts)

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'campaign.db').resolve()}"

    def resolved_secret_key(self) -> str:
        """The configured secret, or one generated once and kept in the data dir."""
        if self.secret_key:
            return self.secret_key
        path = self.data_dir / "secret_key"
        if path.exists():
            return path.read_text().strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(48)
        path.write_text(key)
        path.chmod(0o600)
        return key

    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
