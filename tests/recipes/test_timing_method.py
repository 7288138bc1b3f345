"""The headline timing method (nccl-tests: K calls back to back between two marks / K) against a
simulated device whose timer marks cost launch time, and its tags on a real gloo run."""

from __future__ import annotations

import statistics

import pytest

from runners.recipes import _timing
from tests.support.recipes import by_name, metrics, run_module


class FakeStream:
    """A device queue: the host issues work and marks (each costing host time); the device runs
    the work in order, starting each item when both it is free and the item has been issued.
    A mark records the device time at which the queue reaches it (as a CUDA event does)."""

    def __init__(self, launch_us: float, work_us: float, mark_us: float):
        self.host = 0.0
        self.device_free = 0.0
        self.launch_us, self.work_us, self.mark_us = launch_us, work_us, mark_us

    def call(self) -> None:
        self.host += self.launch_us
        self.device_free = max(self.device_free, self.host) + self.work_us

    def record(self) -> float:
        self.host += self.mark_us
        self.device_free = max(self.device_free, self.host)
        return self.device_free

    def drain(self) -> None:
        self.host = max(self.host, self.device_free)


class FakeTimer:
    name = "fake"

    def __init__(self, stream: FakeStream):
        self.stream = stream

    def mark(self) -> float:
        return self.stream.record()

    def synchronize(self) -> None:
        self.stream.drain()

    def elapsed_us(self, start: float, end: float) -> float:
        return end - start


def measure(mark_us: float, *, launch_us: float = 4.0, work_us: float = 10.0):
    stream = FakeStream(launch_us, work_us, mark_us)
    timer = FakeTimer(stream)
    headline = statistics.median(_timing.time_back_to_back(stream.call, timer, calls=100, samples=9))
    per_call = statistics.median(_timing.time_per_call(stream.call, timer, iters=50))
    return headline, per_call


def test_launch_gaps_of_the_marks_do_not_change_the_headline():
    clean_headline, clean_per_call = measure(mark_us=0.0)
    gappy_headline, gappy_per_call = measure(mark_us=6.0)
    assert clean_headline == pytest.approx(10.0) and clean_per_call == pytest.approx(10.0)
    assert gappy_headline == pytest.approx(clean_headline)  # back to back: the device never waits
    assert gappy_per_call > 1.3 * clean_per_call  # the per-call artefact the headline avoids


def test_a_launch_bound_collective_reports_its_launch_rate():
    # When launching one call costs more than running it, back to back is launch-bound: that is
    # a real cost a decode step pays, and the method keeps it.
    headline, _ = measure(mark_us=0.0, launch_us=30.0, work_us=10.0)
    assert headline == pytest.approx(30.0, rel=0.02)


def test_gloo_eager_headline_is_the_nccl_tests_method_with_spread_and_tags():
    done = run_module(
        "runners.recipes.allreduce",
        "--backend",
        "gloo",
        "--world-size",
        "2",
        "--tokens",
        "1,4",
        "--hidden-size",
        "128",
        "--warmup",
        "1",
        "--iters",
        "5",
        "--calls",
        "7",
        "--per-call-iters",
        "6",
        "--dtype",
        "fp32",
    )
    assert done.returncode == 0, done.stderr
    found = metrics(done.stdout)
    latency = by_name(found, "allreduce_latency_us")
    per_call = by_name(found, "allreduce_per_call_us")
    assert [m["tags"]["tokens"] for m in latency] == [1, 4] == [m["tags"]["tokens"] for m in per_call]
    for lat in latency:
        tags = lat["tags"]
        assert tags["method"] == "nccl-tests" and tags["timer"] == "perf_counter"
        assert tags["sample_count"] == 5 and tags["calls_per_sample"] == 7
        assert len(lat["samples"]) == 5 and sorted(lat["samples"])[2] == lat["value"]  # the median of its R samples
        assert tags["device"] == "cpu" and tags["scaled"] is True and tags["mode"] == "eager"
        assert tags["backend"] == "gloo" and tags["world_size"] == 2 and tags["dtype"] == "fp32"
        assert tags["bytes"] == tags["tokens"] * 128 * 4
        assert 0 < tags["min_us"] <= tags["p10_us"] <= lat["value"] <= tags["p90_us"] <= tags["max_us"]
    for pc in per_call:
        assert pc["tags"]["method"] == "per-call-events" and pc["tags"]["sample_count"] == 6 and pc["unit"] == "us"
        assert len(pc["samples"]) == 6
    for metric in found:  # the CPU floor contract: every metric says where it ran and whether it is scaled
        assert metric["tags"]["device"] == "cpu" and metric["tags"]["scaled"] is True, metric["name"]


def test_per_call_timing_can_be_switched_off():
    done = run_module(
        "runners.recipes.allreduce",
        "--backend",
        "gloo",
        "--tokens",
        "1",
        "--hidden-size",
        "7168",
        "--warmup",
        "0",
        "--iters",
        "3",
        "--calls",
        "2",
        "--per-call-iters",
        "0",
    )
    assert done.returncode == 0, done.stderr
    found = metrics(done.stdout)
    assert by_name(found, "allreduce_per_call_us") == []
    assert by_name(found, "allreduce_latency_us")[0]["tags"]["scaled"] is False  # the full hidden size
