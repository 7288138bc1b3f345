"""A campaign file as sent: YAML, or YAML gzip-compressed (a results campaign past the import limit as YAML).
The decompression is bounded: a small upload that expands past the limit, a truncated or damaged one, and
binary content are refused with one clear message."""

from __future__ import annotations

import gzip

import pytest

from app.domain.campaign_files import campaign_file_text
from app.domain.errors import Invalid

TEXT = "format: campaign-board/v1\ncampaign: {slug: x, name: X}\napproaches: []\n"


def test_plain_yaml_and_gzip_compressed_yaml_give_the_same_text():
    assert campaign_file_text(TEXT.encode(), expanded_limit=1024) == TEXT
    assert campaign_file_text(gzip.compress(TEXT.encode()), expanded_limit=1024) == TEXT


def test_a_small_upload_that_expands_past_the_limit_is_refused():
    bomb = gzip.compress(b" " * (8 << 20))  # 8 MiB of spaces in a few KB
    assert len(bomb) < 64 << 10
    with pytest.raises(Invalid) as exc:
        campaign_file_text(bomb, expanded_limit=1 << 20)
    assert "expands past 1048576 bytes" in exc.value.message and exc.value.field == "file"
    assert campaign_file_text(gzip.compress(b"a: 1\n" * 1000), expanded_limit=5000) == "a: 1\n" * 1000  # at it


@pytest.mark.parametrize(
    "data, message",
    [
        (gzip.compress(TEXT.encode(), mtime=0)[:-12], "truncated"),
        (gzip.compress(TEXT.encode(), mtime=0) * 2, "more than one file"),
        (b"\x1f\x8b" + bytes(range(40)), "damaged"),
        (gzip.compress(bytes(range(256)), mtime=0), "not a UTF-8 text file"),
        (bytes(range(256)), "not a UTF-8 text file"),
    ],
    # Named, not by their bytes: gzip writes the time into its header, and pytest-xdist's workers must collect
    # the same test ids.
    ids=["truncated", "two-members", "damaged", "gzip-of-binary", "binary"],
)
def test_broken_gzip_and_binary_content_are_refused(data, message):
    with pytest.raises(Invalid) as exc:
        campaign_file_text(data, expanded_limit=1 << 20)
    assert message in exc.value.message
