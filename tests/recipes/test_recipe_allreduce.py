"""The allreduce recipe, run for real on gloo with 2 processes."""

from __future__ import annotations

import math

import pytest

from runners.recipes import build_launch
from tests.support.recipes import by_name, metrics, run_module, run_spec


def test_gloo_two_ranks_measure_and_report():
    spec = build_launch(
        {
            "kind": "allreduce",
            "params": {
                "backend": "gloo",
                "world_size": 2,
                "tokens": [1, 4],
                "hidden_size": 256,
                "warmup": 1,
                "iters": 5,
            },
            "env": {"NCCL_ALGO": "Ring", "NCCL_MAX_NCHANNELS": "2"},
        }
    )
    done = run_spec(spec)
    assert done.returncode == 0, done.stderr
    found = metrics(done.stdout)
    checks = by_name(found, "allreduce_check_passed")
    assert [(m["value"], m["tags"]["tokens"]) for m in checks] == [(1.0, 1), (1.0, 4)]
    assert "correctness ok tokens=1" in done.stdout
    latency = by_name(found, "allreduce_latency_us")
    algbw = by_name(found, "allreduce_algbw_gbps")
    busbw = by_name(found, "allreduce_busbw_gbps")
    assert len(latency) == len(algbw) == len(busbw) == 2
    for lat, alg, bus in zip(latency, algbw, busbw):
        tags = lat["tags"]
        n = tags["world_size"]
        assert n == 2 and tags["backend"] == "gloo" and tags["mode"] == "eager" and tags["dtype"] == "bf16"
        assert tags["bytes"] == tags["tokens"] * 256 * 2  # tokens x hidden x bf16
        assert tags["nccl_algo"] == "Ring" and tags["nccl_max_nchannels"] == "2"
        assert lat["unit"] == "us" and lat["value"] > 0
        assert 0 < tags["min_us"] <= tags["p10_us"] <= lat["value"] <= tags["p90_us"] <= tags["max_us"]
        assert math.isclose(alg["value"], tags["bytes"] / (lat["value"] * 1e-6) / 1e9, rel_tol=1e-12)
        assert math.isclose(bus["value"], alg["value"] * 2 * (n - 1) / n, rel_tol=1e-12)
        assert alg["unit"] == bus["unit"] == "GB/s"
    assert "median_us" in done.stdout and "busbw_GB/s" in done.stdout  # the human table


def test_three_ranks_busbw_differs_from_algbw():
    done = run_module(
        "runners.recipes.allreduce",
        "--backend",
        "gloo",
        "--world-size",
        "3",
        "--tokens",
        "2",
        "--hidden-size",
        "64",
        "--dtype",
        "fp32",
        "--warmup",
        "0",
        "--iters",
        "3",
    )
    assert done.returncode == 0, done.stderr
    found = metrics(done.stdout)
    alg, bus = by_name(found, "allreduce_algbw_gbps")[0], by_name(found, "allreduce_busbw_gbps")[0]
    assert math.isclose(bus["value"], alg["value"] * 4 / 3, rel_tol=1e-12)
    assert by_name(found, "allreduce_check_passed")[0]["tags"]["world_size"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "gloo", "--mode", "graph"], "graph mode needs CUDA graphs"),
        (["--backend", "nccl"], "needs CUDA GPUs"),
        (["--backend", "symm_mem_two_shot"], "needs CUDA GPUs"),
        (["--backend", "gloo", "--world-size", "1"], "at least 2 ranks"),
        (["--tokens", "1,x"], "--tokens"),
        (["--dtype", "fp8"], "--dtype"),
    ],
)
def test_unsupported_or_bad_input_exits_2_with_a_message(args, message):
    done = run_module("runners.recipes.allreduce", *args, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_ranks_that_overrun_are_stopped():
    done = run_module(
        "runners.recipes.allreduce",
        "--backend",
        "gloo",
        "--tokens",
        "1",
        "--hidden-size",
        "8",
        "--warmup",
        "0",
        "--iters",
        "10000000",
        "--run-timeout-s",
        "4",
        timeout=60,
    )
    assert done.returncode == 124
    assert "did not finish within 4s" in done.stderr
