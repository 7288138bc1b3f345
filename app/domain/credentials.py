"""Secrets as the domain keeps them: a new secret and the SHA-256 hash that is all a row ever stores.

Runner tokens (app/domain/runners.py), API tokens, login links, invites and session ids (app/domain/logins.py)
are made with `new_secret` and looked up by `hash_token`. Pure: no web framework, no database.

A transaction that ends credentials (a session revoked or logged out, a token revoked, a user disabled) says so
on its session, `session.info[CREDENTIALS_ENDED]`; once it commits, app/services/access.py closes the open
streams those credentials held.
"""

from __future__ import annotations

import hashlib
import secrets

CREDENTIALS_ENDED = "credentials_ended"  # session.info key: this transaction ended sessions, tokens or users


def hash_token(token: str) -> str:
    """What a row stores for a secret: its SHA-256 hex digest."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_secret(prefix: str) -> str:
    """A fresh secret, `prefix_` then 32 random bytes (URL-safe base64)."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"
