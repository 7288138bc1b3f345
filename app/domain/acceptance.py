"""Acceptance as entered: the one bound every entry point applies (tau <= k + 1) and vLLM's unconditional
per-position rates turned into the conditional ones the model reads (domain.md, "reading acceptance right").

- An accept length tau counts the accepted draft tokens plus the bonus token, so with k draft tokens (steps)
  tau <= k + 1. The form, the what-if, the API and the campaign-file import all call `check_accept_length`.
- vLLM logs `accepted at position i / drafts` (unconditional, u_i); the model's alpha_i is position i accepted
  given all before it were: alpha_i = u_i / u_{i-1}, u_0 = 1. A position no draft reached (u_{i-1} = 0) adds
  nothing to tau, so its alpha is 0.

Pure, no imports from the app: app/schemas.py and the answer's loader import it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def accept_length_bound_error(tau: float, k: int, what: str = "draft token") -> str | None:
    """Why tau is impossible with k draft tokens (or steps: `what`, singular), or None when it is possible."""
    if tau > k + 1:
        return (
            f"accept length {tau:g} is above {k + 1}, the most {k} {what}{'' if k == 1 else 's'} and the bonus "
            "token can give (tau <= k + 1)"
        )
    return None


def check_accept_length(tau: float, k: int, what: str = "draft token") -> None:
    """ValueError when tau > k + 1 (pydantic validators turn it into a field error)."""
    error = accept_length_bound_error(tau, k, what)
    if error:
        raise ValueError(error)


def check_accept_length_by_k(values: Mapping[str, float]) -> Mapping[str, float]:
    """Each entered tau(k) within its bound (an AfterValidator of schemas.AcceptLengthByK)."""
    for k_text, tau in values.items():
        error = accept_length_bound_error(tau, int(k_text))
        if error:
            raise ValueError(f"at k = {k_text}: {error}")
    return values


def check_unconditional(rates: Sequence[float]) -> Sequence[float]:
    """vLLM's unconditional rates can only fall with position (a position is reached only through the ones
    before it): u_1 >= u_2 >= ... (an AfterValidator of schemas.AcceptUnconditional)."""
    for i in range(1, len(rates)):
        if rates[i] > rates[i - 1] + 1e-12:
            raise ValueError(
                f"position {i + 1}'s rate {rates[i]:g} is above position {i}'s {rates[i - 1]:g}: unconditional rates "
                "(accepted at position i / drafts) cannot rise with position; were these conditional rates?"
            )
    return rates


def alphas_from_unconditional(rates: Sequence[float]) -> list[float]:
    """alpha_i = u_i / u_{i-1} with u_0 = 1 (0 where no draft reached position i)."""
    out: list[float] = []
    previous = 1.0
    for u in rates:
        out.append(min(1.0, u / previous) if previous > 0 else 0.0)
        previous = u
    return [round(a, 12) if math.isfinite(a) else 0.0 for a in out]


def conversion_words(rates: Sequence[float]) -> str:
    """How the conditional alphas were obtained, for wherever they are shown."""
    alphas = alphas_from_unconditional(rates)
    return (
        "converted from vLLM's unconditional per-position rates u ("
        + ", ".join(f"{u:g}" for u in rates)
        + ") as alpha_i = u_i / u_(i-1), u_0 = 1: "
        + ", ".join(f"{a:.3g}" for a in alphas)
    )
