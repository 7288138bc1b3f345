"""Counts in words (issue 32 item 15: "1 draft tokens", "trial(s)"): one helper, in Python and in templates."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain.wording import plural
from app.templating import make_templates

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("count", "word", "expected"),
    [
        (1, "trial", "1 trial"),
        (0, "trial", "0 trials"),
        (2, "trial", "2 trials"),
        (1, "draft token", "1 draft token"),
        (3, "draft token", "3 draft tokens"),
        (2, "batch", "2 batches"),
        (1.5, "sample", "1.5 samples"),
        (2, "person", "2 people"),
    ],
)
def test_plural(count, word, expected):
    many = "people" if word == "person" else None
    assert plural(count, word, many) == expected


def test_templates_use_the_filter_and_never_write_s_in_brackets():
    env = make_templates().env
    assert env.from_string('{{ 1 | plural("trial") }}, {{ 4 | plural("trial") }}').render() == "1 trial, 4 trials"
    written = [p.name for p in (ROOT / "templates").rglob("*.html") if "(s)" in p.read_text()]
    assert written == []
