"""Counts in words (issue 32 item 15: "1 draft tokens", "trial(s)"): one helper, in Python and in templates."""

from __future__ import annotations

from pathlib import Path

import pytest

import app.domain.answer.cells as cells
import app.domain.answer.latency as latency
import app.domain.planning as planning
from app.domain.units import plural, size_label
from app.templating import make_templates, whole_tokens

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


def test_one_size_formatter_for_the_answer_its_latencies_and_planning():
    assert [size_label(n) for n in (512, 1024, 57344, 1000 * 1024, 1835008, 14 * 1024 * 1024)] == [
        "512 B",
        "1 KiB",
        "56 KiB",
        "1000 KiB",  # not 1e+03 KiB
        "1.75 MiB",
        "14 MiB",
    ]
    # The old copies are gone: every reader imports this one.
    assert cells.size_label is latency.size_label is planning.size_label is size_label
    assert not hasattr(latency, "_size") and not hasattr(planning, "_size")


def test_whole_tokens_keeps_each_flag_path_and_range_in_one_span_and_escapes_the_rest():
    """static/tables.css keeps a .token on one line: a browser breaks `--tp-size` after its hyphen otherwise."""
    said = whole_tokens("Add --model-path, <draft-path> & /models/x at batches 65-127 or k = 3")
    assert str(said) == (
        'Add <span class="token">--model-path,</span> <span class="token">&lt;draft-path&gt;</span> &amp; '
        '<span class="token">/models/x</span> at batches <span class="token">65-127</span> or k = 3'
    )
