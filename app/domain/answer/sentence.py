"""The answer's sentence and headline: up to which batch speculation pays, with how many draft tokens and
which allreduce, by batch range. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.answer.grid import ALGORITHM, ApproachAnswer


def _batches_text(values: Sequence[int]) -> str:
    values = sorted(set(values))
    return ", ".join(str(v) for v in values)


def _size_bytes(label: str) -> float:
    number, unit = label.split(" ")
    return float(number) * {"B": 1, "KiB": 1024, "MiB": 1024 * 1024}[unit]


def _tokens(k: int) -> str:
    return f"{k} draft token" if k == 1 else f"{k} draft tokens"


def _sentence(
    answer_approaches: list[ApproachAnswer], tiers: tuple[tuple[str, ...], ...], chosen: ApproachAnswer | None
) -> str:
    if chosen is None:
        return f"Not known yet whether {ALGORITHM} pays above batch 1 on this node: nothing usable is measured over batch sizes."
    by_key = {a.key: a for a in answer_approaches}
    tier = next((t for t in tiers if chosen.key in t), (chosen.key,))
    peers = [by_key[k].title for k in tier if k != chosen.key]
    named = peers if len(peers) <= 3 else [*peers[:3], f"{len(peers) - 3} more"]
    listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}" if named else ""
    tail = (
        f" ({listed} {'is' if len(peers) == 1 else 'are'} not shown to differ from it by the minimum effect "
        "at the campaign's confidence)"
        if peers
        else ""
    )
    if not chosen.best_speedup:
        t = chosen.tau_star
        b0 = min(c.batch for c in chosen.cells if c.tau_star is not None)
        return (
            f"On this node {ALGORITHM} needs an accept length above {t.value:.2f} at batch {b0} with "  # type: ignore[union-attr]
            f"{_tokens(chosen.headline_k or 0)} using {chosen.title}{tail}; enter or measure tau per draft length "
            f"to find the batch where it stops paying."
        )
    measured_b = sorted(chosen.best_speedup)
    b_star = chosen.break_even_batch
    if b_star is None:
        return (
            f"On this node {ALGORITHM} does not pay at any measured batch ({measured_b[0]}-{measured_b[-1]}) using "
            f"{chosen.title}{tail}: turn it off."
        )
    below = [b for b in measured_b if b <= b_star]
    if {chosen.decision.get(b) for b in below} != {"yes"} or len({chosen.best_draft_tokens[b] for b in below}) > 1:
        # The batches up to B* do not all pay with one k: the sentence names k per batch range, as the grid does.
        return _sentence_by_range(chosen, tail)
    k = chosen.best_draft_tokens[b_star]
    if chosen.first_losing_batch is None:
        return (
            f"On this node {ALGORITHM} pays at every measured batch up to {b_star} with {_tokens(k)} using "
            f"{chosen.title}{tail}; above batch {b_star} it is not measured."
        )
    losing = chosen.first_losing_batch
    how = (
        "it does not pay"
        if chosen.best_speedup[losing].value <= 1
        else "it is not shown to pay: its interval holds 1, or one trial leaves a margin below the minimum effect"
    )
    return (
        f"On this node {ALGORITHM} pays up to batch {b_star} with {_tokens(k)} using {chosen.title}{tail}; "
        f"above batch {b_star} turn it off (at batch {losing} {how})."
    )


def _batches_words(first: int, last: int) -> str:
    return f"batch {first}" if first == last else f"batches {first}-{last}"


def batch_ranges(a: ApproachAnswer) -> list[tuple[int, int, str, int]]:
    """The measured batches in runs of one decision: (first batch, last batch, "yes" / "no" / "unclear", k), k the
    draft length on ("yes") and 0 otherwise; consecutive measured batches with the same decision and k merge."""
    out: list[tuple[int, int, str, int]] = []
    for b in sorted(a.best_speedup):
        state, k = a.decision.get(b, "unclear"), a.best_draft_tokens.get(b, 0)
        if out and out[-1][2] == state and out[-1][3] == k:
            out[-1] = (out[-1][0], b, state, k)
        else:
            out.append((b, b, state, k))
    return out


def _sentence_by_range(chosen: ApproachAnswer, tail: str) -> str:
    """The answer per batch range, from the same decisions the grid shows (ApproachAnswer.decision)."""
    parts = []
    for first, last, state, k in batch_ranges(chosen):
        where = _batches_words(first, last)
        if state == "yes":
            parts.append(f"{_tokens(k)} at {where}")
        elif state == "no":
            parts.append(f"off at {where} (it does not pay)")
        else:
            parts.append(
                f"off at {where} (not shown to pay: the interval holds 1, or one trial leaves a margin below the "
                "minimum effect)"
            )
    top = max(chosen.best_speedup)
    return (
        f"On this node {ALGORITHM} with {chosen.title}{tail}, by batch: {'; '.join(parts)}; above batch {top} it is "
        "not measured."
    )
