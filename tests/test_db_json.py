"""The engine's JSON reader (app.db.loads_json): orjson where it reads a text as json.loads does, json itself
where it would not, so every JSON column reads back the same values as with the standard library."""

from __future__ import annotations

import json
import math
import random

import pytest
from sqlmodel import select

from app.db import loads_json, make_engine, session_scope
from app.models import Runner

pytestmark = pytest.mark.both_databases  # JSON columns as each database stores and returns them

TEXTS = [
    "[1.5, 2.0, -0.0, 1e-07, 5e-324, 1.7976931348623157e+308, 0.30000000000000004]",
    "[1e400, -1e400, 1e-400]",  # out of range for orjson: inf, -inf, 0.0 as json reads them
    "[NaN, Infinity, -Infinity]",  # json.dumps writes these; orjson refuses them
    "[18446744073709551615, -9223372036854775808, 9223372036854775807]",  # the 64-bit ends
    "[18446744073709551616, -9223372036854775809, 123456789012345678901234567890]",  # past them: ints
    '{"tokens": 12345678901234567890123, "backend": "nccl", "p10_us": 12.5}',
    '{"a": 1, "a": 2}',
    '"\\ud800"',  # a lone surrogate
    '["\\u00e9", "\\ud83d\\ude00", "tab\\t", "quote\\""]',
    "  [1]  ",
    "[]",
    "{}",
    "null",
    "true",
    "-0",
    "1E5",
    "12345678901234567890.5",
]


def _same(a, b) -> bool:
    """Equal values of equal types all the way down (NaN equal to NaN, -0.0 apart from 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("text", TEXTS)
def test_reads_what_json_reads(text):
    assert _same(loads_json(text), json.loads(text))
    assert _same(loads_json(text.encode("utf-8", errors="surrogatepass")), json.loads(text))


def test_random_numbers_read_as_json_reads_them():
    rng = random.Random(34)
    values = [rng.uniform(-1e6, 1e6) for _ in range(2000)]
    values += [rng.gauss(0, 1) * 10.0 ** rng.randint(-320, 308) for _ in range(2000)]
    values += [rng.randint(-(2**70), 2**70) for _ in range(500)] + [
        rng.randint(-(2**63), 2**64 - 1) for _ in range(500)
    ]
    for chunk in range(0, len(values), 100):
        text = json.dumps(values[chunk : chunk + 100])
        assert _same(loads_json(text), json.loads(text)), text
    decimals = [
        f"{rng.randint(0, 10 ** rng.randint(1, 25))}.{rng.randint(0, 10 ** rng.randint(1, 25))}" for _ in range(500)
    ]
    text = "[" + ", ".join(decimals) + "]"
    assert _same(loads_json(text), json.loads(text))


@pytest.mark.parametrize("text", ["[1,]", "[1", '{"a" 1}', "", "nan", '"a\x00"', "[01]"])
def test_refuses_what_json_refuses(text):
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        loads_json(text)


def test_json_columns_read_back_as_json_reads_them(db_url):
    """Through the engine, on each backend: the values json.dumps wrote come back as json.loads reads them."""
    fingerprint = {
        "samples": [10.5, -0.0, 1e-07, 1.7976931348623157e308],
        "big": 2**70,
        "small": -(2**63) - 1,
        "u64": 2**64 - 1,
        "text": "é \U0001f600",
        "nested": {"tokens": [1, 2, 3], "none": None, "flag": True},
    }
    if db_url.startswith("sqlite"):
        fingerprint["not_finite"] = [math.inf, -math.inf, math.nan]  # PostgreSQL's json type refuses these
    engine = make_engine(db_url)
    try:
        assert engine.dialect._json_deserializer is loads_json
        with session_scope(engine) as s:
            s.add(Runner(name="json-node", token_hash="h", connected=False, fingerprint=fingerprint))
        with session_scope(engine, write=False) as s:
            read = s.exec(select(Runner.fingerprint).where(Runner.name == "json-node")).one()
        assert _same(read, json.loads(json.dumps(fingerprint)))
    finally:
        engine.dispose()
