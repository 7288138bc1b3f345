"""Multi-node allreduce figures: which ranks share a node, the per-node, world and leaders figures a
simulated 2-node world reports (real gloo ranks started as srun would start them, through
runners.executors.srun_task with SLURM's variables set per rank), single-node output unchanged,
and the model reading the world's figures only."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from app.domain.answer import CampaignMetrics, MetricRow, allreduce_curve, is_world_figure
from app.protocol.metrics import MetricName
from runners.recipes._dist import Topology, group_nodes, node_identity
from tests.support.net import free_port
from tests.support.paths import ROOT
from tests.support.recipes import by_name, metrics, run_module

# ---- grouping ranks into nodes ------------------------------------------------------------------


def test_launcher_node_ids_decide_even_when_hostnames_are_equal():
    topo = group_nodes([("0", "vm"), ("0", "vm"), ("1", "vm"), ("1", "vm")])
    assert topo == Topology((0, 0, 1, 1), ("vm/0", "vm/1"), "launcher")
    assert topo.members(1) == [2, 3] and topo.leaders == [0, 2]
    assert (topo.nodes, topo.ranks_per_node, topo.has_leaders_scope) == (2, 2, True)
    assert topo.tags() == {"nodes": 2, "ranks_per_node": 2}


def test_slurm_node_names_and_cyclic_placement():
    # srun --distribution=cyclic: rank 0 on n1, rank 1 on n2, ...; nodes are numbered by their lowest rank.
    topo = group_nodes([("0", "n1"), ("1", "n2"), ("0", "n1"), ("1", "n2")])
    assert topo.node_of == (0, 1, 0, 1) and topo.names == ("n1", "n2")
    assert topo.members(0) == [0, 2] and topo.leaders == [0, 1]


def test_hostnames_group_ranks_when_the_launcher_gives_no_node_id():
    topo = group_nodes([(None, "a"), (None, "a"), (None, "b")])
    assert topo == Topology((0, 0, 1), ("a", "b"), "hostname")
    assert topo.ranks_per_node == "2,1" and topo.shared_nodes == [0]
    # One rank without a launcher id: the ids cannot be trusted, hostnames decide.
    assert group_nodes([("0", "a"), (None, "a")]).source == "hostname"


def test_one_node_and_one_rank_per_node():
    single = group_nodes([(None, "vm"), (None, "vm")])
    assert (single.nodes, single.shared_nodes, single.has_leaders_scope) == (1, [0], False)
    spread = group_nodes([("0", "n1"), ("1", "n2")])
    assert (spread.nodes, spread.ranks_per_node, spread.shared_nodes, spread.has_leaders_scope) == (2, 1, [], False)


def test_node_identity_prefers_the_launcher():
    env = {"SLURM_NODEID": "1", "NODE_RANK": "0", "SLURMD_NODENAME": "n2"}
    assert node_identity(env) == ("1", "n2")
    assert node_identity({"GROUP_RANK": "3"})[0] == "3"
    node_id, name = node_identity({})
    assert node_id is None and name  # the hostname


# ---- a simulated 2-node world ------------------------------------------------------------------


def _two_node_world(ranks_per_node: int, *args: str) -> list[subprocess.CompletedProcess]:
    """2 nodes x ranks_per_node gloo ranks on this machine, each started as srun starts a task."""
    world = 2 * ranks_per_node
    port = free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(world),
            "SLURM_NNODES": "2",
            "SLURM_NTASKS_PER_NODE": f"{ranks_per_node}(x2)",
            "SLURM_NODEID": str(rank // ranks_per_node),
            "SLURM_LOCALID": str(rank % ranks_per_node),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURMD_NODENAME", "CAMPAIGN_RANK_WORKER"):
            env.pop(name, None)
        argv = [sys.executable, "-m", "runners.executors.srun_task", "--", sys.executable, "-m", *args]
        procs.append(
            subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


ALLREDUCE = (
    "runners.recipes.allreduce",
    "--backend=gloo",
    "--tokens=1,4",
    "--hidden-size=64",
    "--dtype=fp32",
    "--warmup=1",
    "--iters=3",
    "--calls=5",
    "--per-call-iters=0",
)


def test_two_nodes_of_two_ranks_report_each_node_the_world_and_the_leaders():
    ranks = _two_node_world(2, *ALLREDUCE)
    assert [r.returncode for r in ranks] == [0, 0, 0, 0], ranks[0].stderr + ranks[2].stderr
    assert not any(metrics(r.stdout) for r in ranks[1:])  # rank 0 reports for the world
    found = metrics(ranks[0].stdout)
    hostname = node_identity({})[1]
    assert f"2 nodes x 2 ranks (nodes from the launcher: {hostname}/0: ranks [0, 1], {hostname}/1: ranks [2, 3])" in (
        ranks[0].stdout
    )
    for tokens in (1, 4):
        latency = [m for m in by_name(found, MetricName.ALLREDUCE_LATENCY_US) if m["tags"]["tokens"] == tokens]
        # Order: the world's figure first, then each node's, then the leaders'.
        assert [(m["tags"]["scope"], m["tags"].get("node")) for m in latency] == [
            ("world", None),
            ("node", 0),
            ("node", 1),
            ("cross-node", None),
        ]
        for m in latency:
            tags = m["tags"]
            assert (tags["nodes"], tags["ranks_per_node"], tags["world_size"]) == (2, 2, 4)
            assert tags["method"] == "nccl-tests" and tags["calls_per_sample"] == 5 and tags["sample_count"] == 3
            assert len(m["samples"]) == 3
            assert tags["bytes"] == tokens * 64 * 4 and tags["backend"] == "gloo" and m["value"] > 0
            assert 0 < tags["min_us"] <= tags["p10_us"] <= m["value"] <= tags["p90_us"] <= tags["max_us"]
        assert [m["tags"]["ranks"] for m in latency] == [4, 2, 2, 2]
        assert [m["tags"].get("node_name") for m in latency] == [None, f"{hostname}/0", f"{hostname}/1", None]
        algbw = [m for m in by_name(found, MetricName.ALLREDUCE_ALGBW_GBPS) if m["tags"]["tokens"] == tokens]
        busbw = [m for m in by_name(found, MetricName.ALLREDUCE_BUSBW_GBPS) if m["tags"]["tokens"] == tokens]
        for lat, alg, bus in zip(latency, algbw, busbw, strict=True):
            n = lat["tags"]["ranks"]
            assert alg["tags"]["scope"] == bus["tags"]["scope"] == lat["tags"]["scope"]
            assert math.isclose(alg["value"], lat["tags"]["bytes"] / (lat["value"] * 1e-6) / 1e9, rel_tol=1e-12)
            assert math.isclose(bus["value"], alg["value"] * 2 * (n - 1) / n, rel_tol=1e-12)
    checks = by_name(found, MetricName.ALLREDUCE_CHECK_PASSED)
    assert [(m["value"], m["tags"]["scope"]) for m in checks] == [(1.0, "world"), (1.0, "world")]


def test_two_nodes_of_one_rank_report_the_world_only():
    """One rank per node: no node has an allreduce of its own, and the leaders are the world."""
    ranks = _two_node_world(1, *ALLREDUCE)
    assert [r.returncode for r in ranks] == [0, 0], ranks[0].stderr
    latency = by_name(metrics(ranks[0].stdout), MetricName.ALLREDUCE_LATENCY_US)
    assert [(m["tags"]["tokens"], m["tags"]["scope"]) for m in latency] == [(1, "world"), (4, "world")]
    assert all((m["tags"]["nodes"], m["tags"]["ranks_per_node"], m["tags"]["ranks"]) == (2, 1, 2) for m in latency)


@pytest.mark.parametrize(
    "args",
    [
        ("runners.recipes.allreduce", "--backend=symm_mem_two_shot", "--hidden-size=64"),
        ("runners.recipes.verify_step", "--backend=symm_mem_one_shot", "--hidden-size=64", "--ffn-size=128"),
    ],
)
def test_symmetric_memory_across_nodes_is_refused_before_joining(args):
    ranks = _two_node_world(1, *args)
    for done in ranks:
        assert done.returncode == 2, done.stderr
        assert "reaches only one node's GPUs" in done.stderr and "this world spans 2 nodes: use nccl" in done.stderr
        assert "Traceback" not in done.stderr


def test_verify_step_across_two_nodes_reports_the_step_and_each_nodes_communication():
    ranks = _two_node_world(
        2,
        "runners.recipes.verify_step",
        "--backend=gloo",
        "--hidden-size=64",
        "--ffn-size=128",
        "--layers=2",
        "--tokens=2",
        "--dtype=fp32",
        "--warmup=1",
        "--iters=3",
        "--calls=2",
    )
    assert [r.returncode for r in ranks] == [0, 0, 0, 0], ranks[0].stderr
    found = metrics(ranks[0].stdout)
    for name in (MetricName.VERIFY_TIME_MS, MetricName.VERIFY_COMM_SHARE, MetricName.ALLREDUCE_IN_SITU_US):
        (world,) = by_name(found, name)
        assert (world["tags"]["scope"], world["tags"]["nodes"], world["tags"]["ranks_per_node"]) == ("world", 2, 2)
        assert world["tags"]["world_size"] == 4 and world["tags"]["ranks"] == 4
    share = by_name(found, MetricName.VERIFY_COMM_SHARE)[0]["value"]
    assert 0 <= share <= 1
    isolated = by_name(found, MetricName.VERIFY_COMM_ISOLATED_MS)
    assert [(m["tags"]["scope"], m["tags"].get("node"), m["tags"]["ranks"]) for m in isolated] == [
        ("world", None, 4),
        ("node", 0, 2),
        ("node", 1, 2),
        ("cross-node", None, 2),
    ]
    assert all(m["value"] > 0 and m["tags"]["allreduces"] == 4 for m in isolated)
    per_allreduce = by_name(found, MetricName.ALLREDUCE_ISOLATED_US)
    assert [m["tags"]["scope"] for m in per_allreduce] == ["world", "node", "node", "cross-node"]


# ---- single node: unchanged --------------------------------------------------------------------

SINGLE_NODE_LATENCY_TAGS = {
    "backend",
    "mode",
    "world_size",
    "dtype",
    "hidden_size",
    "scaled",
    "timer",
    "torch",
    "device",
    "tokens",
    "bytes",
    "p10_us",
    "p90_us",
    "min_us",
    "max_us",
    "method",
    "sample_count",
    "calls_per_sample",
}


@pytest.mark.parametrize("node_env", [{}, {"SLURM_NODEID": "0", "SLURMD_NODENAME": "n1"}])
def test_single_node_output_is_unchanged(node_env):
    """A local launch (also inside a one-node SLURM job) emits the figures and tags it always did."""
    done = run_module(
        "runners.recipes.allreduce",
        "--backend=gloo",
        "--world-size=2",
        "--tokens=1",
        "--hidden-size=64",
        "--warmup=0",
        "--iters=2",
        "--per-call-iters=2",
        env=node_env,
    )
    assert done.returncode == 0, done.stderr
    found = metrics(done.stdout)
    assert [m["name"] for m in found] == [
        MetricName.ALLREDUCE_CHECK_PASSED,
        MetricName.ALLREDUCE_LATENCY_US,
        MetricName.ALLREDUCE_ALGBW_GBPS,
        MetricName.ALLREDUCE_BUSBW_GBPS,
        MetricName.ALLREDUCE_PER_CALL_US,
    ]
    assert set(by_name(found, MetricName.ALLREDUCE_LATENCY_US)[0]["tags"]) == SINGLE_NODE_LATENCY_TAGS
    assert not any({"scope", "nodes", "ranks_per_node", "node", "ranks"} & set(m["tags"]) for m in found)
    assert "scope" not in done.stdout.split("@@campaign-metric")[-1]  # the table has no scope column

    verify = run_module(
        "runners.recipes.verify_step",
        "--backend=gloo",
        "--world-size=2",
        "--hidden-size=64",
        "--ffn-size=128",
        "--layers=1",
        "--warmup=0",
        "--iters=2",
        "--calls=1",
        env=node_env,
    )
    assert verify.returncode == 0, verify.stderr
    found = metrics(verify.stdout)
    assert [m["name"] for m in found] == [
        MetricName.VERIFY_TIME_MS,
        MetricName.VERIFY_COMPUTE_MS,
        MetricName.VERIFY_COMM_MS,
        MetricName.VERIFY_COMM_ISOLATED_MS,
        MetricName.VERIFY_COMM_SHARE,
        MetricName.ALLREDUCE_IN_SITU_US,
        MetricName.ALLREDUCE_ISOLATED_US,
    ]
    assert not any({"scope", "nodes", "ranks_per_node", "node", "ranks"} & set(m["tags"]) for m in found)


# ---- readers: the model takes the world's figure ----------------------------------------------


def _row(value: float, seq: int, **tags) -> MetricRow:
    base = {"backend": "nccl", "mode": "graph", "device": "cuda", "world_size": 16, "bytes": 57344, "tokens": 4}
    return MetricRow(7, 1, MetricName.ALLREDUCE_LATENCY_US, value, {**base, **tags}, seq, 0)


def test_the_model_and_charts_read_the_world_figure_of_a_multi_node_trial():
    rows = [
        _row(41.0, 1, scope="world", nodes=2, ranks_per_node=8, ranks=16),
        _row(9.0, 2, scope="node", node=0, nodes=2, ranks_per_node=8, ranks=8),
        _row(9.5, 3, scope="node", node=1, nodes=2, ranks_per_node=8, ranks=8),
        _row(30.0, 4, scope="cross-node", nodes=2, ranks_per_node=8, ranks=2),
    ]
    found = CampaignMetrics(rows).newest(MetricName.ALLREDUCE_LATENCY_US, 1)
    assert [m.value for m in found] == [41.0]
    (point,) = allreduce_curve(found)
    assert point.latency_us == 41.0 and point.tags["scope"] == "world"
    assert is_world_figure({}) and is_world_figure({"scope": "world"}) and not is_world_figure({"scope": "node"})
