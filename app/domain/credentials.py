"""Secrets as the domain keeps them: a new secret and the SHA-256 hash that is all a row ever stores.

Runner tokens (app/domain/runners.py), API tokens, login links, invites and session ids (app/domain/logins.py)
are made with `new_secret` and looked up by `hash_token`. Pure: no web framework, no database.
"""

from __future__ import annotations

import hashlib
import secrets


def hash_token(token: str) -> str:
    """What a row stores for a secret: its SHA-256 hex digest."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_secret(prefix: str) -> str:
    """A fresh secret, `prefix_` then 32 random bytes (URL-safe base64)."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"
