"""Logging for `campaign serve` and `campaign runner`: records of app/ and runners/ go to stderr at
CAMPAIGN_LOG_LEVEL; other libraries (httpx, websockets, ...) only say warnings and worse."""

from __future__ import annotations

import logging.config

# The loggers this project names: app.* (server), runners.* and campaign.runner (the runner sidecar).
PROJECT_LOGGERS = ("app", "runners", "campaign")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def known_level(value: str) -> str:
    """A log level as the settings take it (any case, spaces around), or a ValueError naming the known ones."""
    level = value.strip().upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"unknown log level {value!r}; one of {', '.join(LOG_LEVELS)}")
    return level


def configure_logging(level: str, *, label: str = "") -> None:
    """Replace the root handlers with one stderr handler; `label` (say, "runner node-a") starts each line."""
    prefix = f"{label} " if label else ""
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "line": {"format": f"%(asctime)s {prefix}%(levelname)s %(name)s: %(message)s", "datefmt": "%H:%M:%S"}
            },
            "handlers": {
                "stderr": {"class": "logging.StreamHandler", "formatter": "line", "stream": "ext://sys.stderr"}
            },
            "root": {"level": "WARNING", "handlers": ["stderr"]},
            "loggers": {name: {"level": level} for name in PROJECT_LOGGERS},
        }
    )
