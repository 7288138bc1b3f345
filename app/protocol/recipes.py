"""The recipe contract's shared words: the error a bad recipe raises and a trial's time limit. The server's
schema and the runner's `build_launch` (runners/recipes) both use them. Standard library only."""

from __future__ import annotations

MAX_TIMEOUT_S = 7 * 24 * 3600  # a trial's time limit: longer is a typo, not a trial


class RecipeError(ValueError):
    """A recipe or its parameters are invalid; the message says which field and why."""
