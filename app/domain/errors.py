"""Domain errors. app/errors.py is the one place that maps them to HTTP responses."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


class DomainError(Exception):
    """A request the rules refuse. `field` names the input at fault, when there is one."""

    status_code = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class NotFound(DomainError):
    status_code = 404


class Conflict(DomainError):
    status_code = 409


class Invalid(DomainError):
    status_code = 422


class Moved(NotFound):
    """A campaign's old slug: it was renamed to `slug` (app/errors.py redirects a URL that names the old one)."""

    def __init__(self, message: str, *, old: str, slug: str) -> None:
        super().__init__(message, field="slug")
        self.old = old
        self.slug = slug


def or_not_found(row: T | None, message: str, *, field: str | None = None) -> T:
    """`row`, or NotFound(message) when there is none: the get-or-404 of a lookup (`session.get`, `.first()`)."""
    if row is None:
        raise NotFound(message, field=field)
    return row
