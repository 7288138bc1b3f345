"""Counts in words: "1 trial", "3 trials", "1 draft token": the one helper for singular and plural, used by
the domain's messages, the templates (the `plural` filter) and the charts. Never "trial(s)". And byte counts in
words ("56 KiB", "1.75 MiB"): the one size formatter of the answer, its latencies and planning."""

from __future__ import annotations

IRREGULAR = {"entry": "entries", "query": "queries", "batch": "batches", "approach": "approaches"}


def plural(count: int | float, word: str, many: str | None = None) -> str:
    """`count` and `word`, the word in its plural unless the count is exactly 1 ("1 trial", "0 trials",
    "2 draft tokens"). `many` overrides the plural; otherwise the last word takes an "s" (or IRREGULAR's)."""
    if count == 1:
        return f"{count} {word}"
    if many is None:
        head, _, last = word.rpartition(" ")
        last = IRREGULAR.get(last, last + "s")
        many = f"{head} {last}" if head else last
    return f"{count} {many}"


def size_label(nbytes: int) -> str:
    """A message size in binary units, 4 significant digits: "512 B", "56 KiB", "1.75 MiB" (never 1e+03)."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} B"
