"""Probes that preflight runs under the node's sglang interpreter (it has the node's torch and sglang).

    python -m runners.preflight.probes flags -- --model-path M --tp-size 8 ...
    python -m runners.preflight.probes symm_mem [--world-size 2]
    python -m runners.preflight.probes graph_collective [--world-size 2]
    python -m runners.preflight.probes jit_target
    python -m runners.preflight.probes gpus

Exit 0: passed; 1: failed (the output says why, in the words the underlying tool uses, so the
failure classifier recognizes it); 2: bad usage. Each probe is bounded by the caller's timeout.
Imports torch / sglang only inside the probe that needs them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import traceback

from runners.recipes._dist import exit_after_teardown

# The verify step's allreduce message: 1 token x hidden 7168, bf16 (shared/domain.md).
HIDDEN = 7168
# Bound on leaving the process group once a probe has printed its verdict.
TEARDOWN_TIMEOUT_S = 10.0


def probe_flags(argv: list[str]) -> int:
    """Parse the server's argv with the installed sglang's own ServerArgs CLI definition."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="launch_server.py")
    ServerArgs.add_cli_args(parser)
    parser.parse_args(argv)  # unknown flag: exit 2, "launch_server.py: error: unrecognized arguments: ..."
    import sglang

    print(f"sglang {sglang.__version__} accepts: {' '.join(argv)}")
    return 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _need_gpus(world_size: int):
    try:
        import torch
    except ImportError as exc:
        print(f"preflight probe: torch is not importable by {sys.executable}: {exc}")
        return None

    if not torch.cuda.is_available():
        print(
            f"preflight probe: no CUDA GPU visible to torch {torch.__version__} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})"
        )
        return None
    if torch.cuda.device_count() < world_size:
        print(f"preflight probe: needs {world_size} GPUs, torch sees {torch.cuda.device_count()}")
        return None
    return torch


def _join(rank: int, world_size: int, port: int) -> None:
    """This rank's GPU and its NCCL process group (rendezvous over TCP on this node)."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        device_id=torch.device("cuda", rank),
    )


def _symm_mem_rank(rank: int, world_size: int, port: int) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    _join(rank, world_size, port)
    # No finally/destroy here: _worker leaves the process group within a bound.
    world = dist.group.WORLD
    assert world is not None  # init_process_group above created it
    group_name = world.group_name
    major = torch.cuda.get_device_capability(rank)[0]
    try:  # the table sglang's torch_symm_mem communicator indexes (the seed's `KeyError: 12`)
        from sglang.srt.distributed.device_communicators.all_reduce_utils import (
            TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES as sizes,
        )
    except ImportError:
        sizes = None
    if sizes is not None:
        max_size = sizes[major][world_size]  # raises KeyError: <major> where sglang lacks the SM
        if rank == 0:
            print(f"sglang symm_mem table: SM {major}, world size {world_size}: max {max_size} bytes")
    if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed before torch 2.8, a no-op after
        symm_mem.enable_symm_mem_for_group(group_name)
    t = symm_mem.empty((1, HIDDEN), dtype=torch.bfloat16, device=torch.device("cuda", rank))
    symm_mem.rendezvous(t, group_name)
    t.fill_(rank + 1)
    out = torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group_name)
    torch.cuda.synchronize()
    want = world_size * (world_size + 1) / 2
    if float(out[0, 0]) != want:
        raise RuntimeError(f"symm_mem one_shot_all_reduce gave {float(out[0, 0])}, expected {want}")
    if rank == 0:
        print(
            f"symm_mem rendezvous + one_shot_all_reduce ok on {world_size} ranks, SM {major}, torch {torch.__version__}"
        )


def _graph_rank(rank: int, world_size: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    _join(rank, world_size, port)
    # No finally/destroy here: _worker leaves the process group within a bound.
    t = torch.full((1, HIDDEN), float(rank + 1), dtype=torch.bfloat16, device=f"cuda:{rank}")
    dist.all_reduce(t)  # warm-up outside the graph, as sglang does before capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        dist.all_reduce(t)
    t.fill_(float(rank + 1))
    graph.replay()
    torch.cuda.synchronize()
    want = world_size * (world_size + 1) / 2
    if float(t[0, 0]) != want:
        raise RuntimeError(f"graph-captured all_reduce gave {float(t[0, 0])}, expected {want}")
    if rank == 0:
        knobs = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
        print(f"CUDA graph capture + replay of one NCCL all_reduce ok on {world_size} ranks ({knobs})")


def _worker(target, rank: int, world_size: int, port: int) -> None:
    """One rank: run the probe, then leave the process group within a bound and exit. The verdict is
    printed before teardown, which can hang after a graph-captured NCCL collective (seen on 2x H200,
    torch 2.11, NCCL 2.28): a hung teardown must not turn a pass into a timeout."""
    try:
        target(rank, world_size, port)
    except BaseException:
        traceback.print_exc()
        exit_after_teardown(1, TEARDOWN_TIMEOUT_S, f"preflight probe rank {rank}")
    exit_after_teardown(0, TEARDOWN_TIMEOUT_S, f"preflight probe rank {rank}")


def _two_ranks(target, world_size: int) -> int:
    torch = _need_gpus(world_size)
    if torch is None:
        return 1
    import torch.multiprocessing as mp

    port = _free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(target, rank, world_size, port)) for rank in range(world_size)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    codes = [proc.exitcode for proc in procs]
    if any(codes):
        print(f"preflight probe: rank exit codes {codes}")
        return 1
    return 0


def probe_jit_target() -> int:
    """Can this node's nvcc build for the GPU's architecture (with the arch-specific `a` target)?"""
    torch = _need_gpus(1)
    if torch is None:
        return 1
    major, minor = torch.cuda.get_device_capability(0)
    sm = f"{major}{minor}"
    arch = f"compute_{sm}a" if major >= 9 else f"compute_{sm}"
    print(
        f"GPU SM {major}.{minor}; torch {torch.__version__} (CUDA {torch.version.cuda}) arch list: "
        f"{' '.join(torch.cuda.get_arch_list())}"
    )
    nvcc = shutil.which("nvcc") or (
        os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if os.environ.get("CUDA_HOME") else None
    )
    if not nvcc or not os.path.exists(nvcc):
        print("nvcc not found (PATH, CUDA_HOME): JIT kernels (FlashInfer, sglang jit) cannot be built on this node")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.cu")
        with open(src, "w") as fh:
            fh.write("__global__ void probe(float *x) { x[threadIdx.x] += 1.0f; }\n")
        argv = [
            nvcc,
            f"-gencode=arch={arch},code=sm_{sm}{'a' if major >= 9 else ''}",
            "-c",
            src,
            "-o",
            os.path.join(tmp, "probe.o"),
        ]
        print("$ " + " ".join(argv))
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        sys.stdout.write(done.stdout + done.stderr)
        if done.returncode != 0:
            return 1
    print(f"nvcc builds for {arch}")
    try:
        import flashinfer

        print(f"flashinfer {getattr(flashinfer, '__version__', '?')} importable")
    except ImportError:
        print("flashinfer not importable (only needed by FlashInfer approaches)")
    return 0


def probe_gpus() -> int:
    """One JSON line: the GPUs torch sees, their SM and free memory."""
    torch = _need_gpus(1)
    if torch is None:
        return 1
    gpus = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        major, minor = torch.cuda.get_device_capability(index)
        gpus.append(
            {
                "index": index,
                "name": torch.cuda.get_device_name(index),
                "sm": f"{major}.{minor}",
                "free_bytes": free,
                "total_bytes": total,
            }
        )
    print(json.dumps({"gpus": gpus}))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__)
        return 2
    name, rest = argv[0], argv[1:]
    if name == "flags":
        if rest[:1] == ["--"]:
            rest = rest[1:]
        return probe_flags(rest)
    parser = argparse.ArgumentParser(prog=f"runners.preflight.probes {name}")
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args(rest)
    if name in ("symm_mem", "graph_collective") and args.world_size < 2:
        # One rank's allreduce is a no-op: a graph of it is empty and proves nothing (seen on 1x H200).
        print(f"preflight probe {name}: --world-size must be at least 2 (got {args.world_size})", file=sys.stderr)
        return 2
    if name == "symm_mem":
        return _two_ranks(_symm_mem_rank, args.world_size)
    if name == "graph_collective":
        return _two_ranks(_graph_rank, args.world_size)
    if name == "jit_target":
        return probe_jit_target()
    if name == "gpus":
        return probe_gpus()
    print(f"unknown probe {name!r}; expected flags, symm_mem, graph_collective, jit_target", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
