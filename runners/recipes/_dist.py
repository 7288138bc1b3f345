"""Shared machinery of the collective recipes (allreduce, verify_step): launching ranks,
process-group setup with timeouts, allreduce implementations, the scopes of a multi-node world, bounded
teardown. A `Rank` is a `_timing.Place`: the measuring loop (`_timing.Sampling`) runs on it.

The module that is run (`python -m runners.recipes.allreduce ...`) is the *launcher*: it
validates, checks what the machine can do, then starts one subprocess per rank running the
same module and argv with CAMPAIGN_RANK_WORKER=1 set. Subprocesses rather than
torch.multiprocessing so the launcher can bound and kill a rank that hangs (real trials hang
in NCCL teardown). Standard library + torch only; torch is imported lazily so that
`build_launch` can validate without it.
"""

from __future__ import annotations

import copy
import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from app.protocol.metrics import emit_phase
from app.protocol.recipes import RecipeError
from runners.recipes import SAFE_ENV  # defaulted (never overridden) for every rank we start
from runners.recipes._params import Param, parse_cli, usage_error
from runners.recipes._timing import Sampling, torch_dtype

# Parameters every collective recipe takes the same way.
WORLD_SIZE = Param(
    "world_size", "int", None, "ranks (gloo default 2; GPU backends default all visible GPUs)", minimum=1
)
TIMEOUTS = (
    Param("init_timeout_s", "float", 120.0, "process-group init (and collective) timeout", minimum=1),
    Param("run_timeout_s", "float", 600.0, "the launcher stops ranks still running after this", minimum=1),
    Param("teardown_timeout_s", "float", 30.0, "bound on process-group teardown after results", minimum=0.1),
)
# NCCL knobs arrive through the environment (the recipe's env); recipes only record them.
NCCL_KNOBS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_P2P_LEVEL")

BACKENDS = ("gloo", "nccl", "symm_mem_one_shot", "symm_mem_two_shot")
GPU_BACKENDS = ("nccl", "symm_mem_one_shot", "symm_mem_two_shot")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# Unit roundoff per dtype, for the correctness tolerance.
DTYPE_ROUNDOFF = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24}
MODES = ("eager", "graph")

WORKER_ENV = "CAMPAIGN_RANK_WORKER"


def apply_safe_env(env: dict[str, str] | os._Environ) -> None:
    for key, value in SAFE_ENV.items():
        env.setdefault(key, value)


def knob_tags() -> dict[str, str]:
    """The NCCL knobs set in this environment, as metric tags (lower-case names)."""
    return {k.lower(): os.environ[k] for k in NCCL_KNOBS if os.environ.get(k)}


def is_worker() -> bool:
    return os.environ.get(WORKER_ENV) == "1"


def static_checks(values: dict[str, Any], min_world: int = 2) -> None:
    """Combinations that can be refused without looking at the machine (raises RecipeError).
    `min_world`: 2 for an allreduce; 1 for a step that runs without one at world size 1."""
    if values["backend"] == "gloo" and values["mode"] == "graph":
        raise RecipeError("params.mode (--mode): graph mode needs CUDA graphs; backend gloo runs on CPU")
    if values.get("world_size") is not None and values["world_size"] < min_world:
        raise RecipeError("params.world_size (--world-size): an allreduce needs at least 2 ranks")


def machine_checks(prog: str, values: dict[str, Any], min_world: int = 2) -> int:
    """Checks that need torch and the GPUs. Returns the world size to launch, or exits 2."""
    backend = values["backend"]
    if backend == "gloo":
        return values["world_size"] or 2
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        usage_error(prog, f"backend {backend} needs CUDA GPUs; none is visible to torch {torch.__version__}")
    world = values["world_size"] or gpus
    if world < min_world:
        usage_error(prog, f"backend {backend} needs at least 2 GPUs for an allreduce; {gpus} visible")
    if world > gpus:
        usage_error(prog, f"world size {world} is more than the {gpus} GPU(s) visible (one rank per GPU)")
    if backend.startswith("symm_mem"):
        try:
            import torch.distributed._symmetric_memory
        except ImportError as exc:
            usage_error(prog, f"backend {backend} needs torch.distributed._symmetric_memory: {exc}")
    return world


def launch_nodes(environ: Mapping[str, str]) -> int:
    """Nodes the launcher says this world spans (SLURM_NNODES under srun; 1 when it says nothing)."""
    try:
        return max(1, int(environ.get("SLURM_NNODES", "1")))
    except ValueError:
        return 1


def _across_nodes_refusal(backend: str, nodes: int) -> str | None:
    if nodes > 1 and backend.startswith("symm_mem"):
        return (
            f"backend {backend} reaches only one node's GPUs (symmetric memory over NVLink); "
            f"this world spans {nodes} nodes: use nccl"
        )
    return None


def node_checks(prog: str, values: dict[str, Any], nodes: int) -> None:
    """What a rank can refuse before joining a world the launcher says spans `nodes` nodes (exits 2)."""
    refusal = _across_nodes_refusal(values["backend"], nodes)
    if refusal:
        usage_error(prog, refusal)


def refused_across_nodes(rank: Rank, prog: str) -> bool:
    """The same refusal once the world's nodes are known (a launcher that did not say): rank 0 says why."""
    refusal = _across_nodes_refusal(rank.backend, rank.topology.nodes)
    if refusal and rank.rank == 0:
        print(f"{prog}: error: {refusal}", file=sys.stderr, flush=True)
    return refusal is not None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(procs: list[subprocess.Popen], grace_s: float = 5.0) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def launch_ranks(
    prog: str, module: str, argv: list[str], world_size: int, run_timeout_s: float, teardown_timeout_s: float
) -> int:
    """Start one process per rank (same module and argv), wait with a deadline, return an exit code.

    Ranks inherit stdout/stderr, so their lines reach the runner as they are printed. A rank
    that fails stops the others; ranks still running at the deadline are stopped and reported.
    """
    apply_safe_env(os.environ)
    port = free_port()
    procs: list[subprocess.Popen] = []
    # The handler goes in before the first rank exists: a SIGTERM between a spawn and the handler would end
    # the launcher and leave its ranks running. One that comes while ranks are being spawned stops those
    # spawned so far (and starts no more).
    state: dict[str, Any] = {"spawning": True, "signal": None}

    def on_term(signum: int, _frame: Any) -> None:
        if state["spawning"]:
            state["signal"] = signum  # acted on once the spawn at hand returns
            return
        _stop(procs, grace_s=2.0)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    for rank in range(world_size):
        if state["signal"] is not None:
            break
        env = dict(os.environ)
        env.update(
            {
                WORKER_ENV: "1",
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_WORLD_SIZE": str(world_size),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "PYTHONUNBUFFERED": "1",
            }
        )
        procs.append(subprocess.Popen([sys.executable, "-m", module, *argv], env=env))
    state["spawning"] = False  # from here the handler stops the ranks itself
    if state["signal"] is not None:
        _stop(procs, grace_s=2.0)
        print(f"{prog}: signal {state['signal']} while starting the ranks: stopped them", file=sys.stderr, flush=True)
        return 128 + int(state["signal"])
    deadline = time.monotonic() + run_timeout_s
    while True:
        codes = [p.poll() for p in procs]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            rank, code = failed[0]
            _stop(procs)
            print(f"{prog}: rank {rank} exited with code {code}; stopped the other ranks", file=sys.stderr, flush=True)
            return code if code > 0 else 1
        if all(c == 0 for c in codes):
            return 0
        if codes[0] == 0:
            # Rank 0 has reported; the others get the teardown allowance, no more.
            deadline = min(deadline, time.monotonic() + teardown_timeout_s)
        if time.monotonic() > deadline:
            hung = [r for r, c in enumerate(codes) if c is None]
            _stop(procs)
            if codes[0] == 0:
                print(
                    f"{prog}: ranks {hung} did not exit within {teardown_timeout_s:g}s of the results; "
                    "stopped them (teardown hang)",
                    file=sys.stderr,
                    flush=True,
                )
                return 0
            print(
                f"{prog}: ranks {hung} did not finish within {run_timeout_s:g}s; stopped them",
                file=sys.stderr,
                flush=True,
            )
            return 124
        time.sleep(0.05)


def run_rank(values: dict[str, Any], measure: Callable[[Rank, dict[str, Any]], int]) -> None:
    """A rank's whole life: join the group, measure, then leave within the teardown bound
    (NCCL teardown can hang; the results are printed before it starts)."""
    rank = Rank(values["backend"], values["init_timeout_s"])
    code = 1
    try:
        code = measure(rank, values)
    except Exception:
        traceback.print_exc()
    finally:
        rank.finish(code, values["teardown_timeout_s"])


# ---- nodes: which ranks share one ----------------------------------------------------------

# The launcher's node id, best first: srun's SLURM_NODEID, then what srun_task or torchrun set.
NODE_ID_VARS = ("SLURM_NODEID", "NODE_RANK", "GROUP_RANK")


def node_identity(environ: Mapping[str, str]) -> tuple[str | None, str]:
    """(the launcher's node id or None, the node's name) of this process. The name is SLURM's node
    name when srun started us (two slurmd "nodes" on one machine share a hostname), else the hostname."""
    node_id = next((environ[v].strip() for v in NODE_ID_VARS if environ.get(v, "").strip()), None)
    return node_id, environ.get("SLURMD_NODENAME") or socket.gethostname()


@dataclass(frozen=True)
class Topology:
    """Which node each rank is on. Nodes are numbered by their lowest rank (0 is rank 0's)."""

    node_of: tuple[int, ...]  # rank -> node index
    names: tuple[str, ...]  # node index -> name
    source: str  # "launcher" (node ids from the launch environment) or "hostname"

    @property
    def nodes(self) -> int:
        return len(self.names)

    def members(self, node: int) -> list[int]:
        return [r for r, n in enumerate(self.node_of) if n == node]

    @property
    def leaders(self) -> list[int]:
        """The lowest rank of each node."""
        return [self.members(node)[0] for node in range(self.nodes)]

    @property
    def ranks_per_node(self) -> int | str:
        """Ranks on each node: a number when every node has as many, else them all ("2,1")."""
        counts = [len(self.members(node)) for node in range(self.nodes)]
        return counts[0] if len(set(counts)) == 1 else ",".join(map(str, counts))

    @property
    def shared_nodes(self) -> list[int]:
        """The nodes with more than one rank: those that have an allreduce of their own."""
        return [node for node in range(self.nodes) if len(self.members(node)) > 1]

    @property
    def has_leaders_scope(self) -> bool:
        """A leaders-only allreduce differs from the world's only when some node has more than one rank."""
        return self.nodes > 1 and len(self.node_of) > self.nodes

    def tags(self) -> dict[str, Any]:
        """What every metric of a multi-node world carries."""
        return {"nodes": self.nodes, "ranks_per_node": self.ranks_per_node}


def group_nodes(identities: list[tuple[str | None, str]]) -> Topology:
    """Each rank's node from every rank's node_identity (rank order). The launcher's node ids decide
    when every rank has one (robust where "nodes" share a host); else ranks are grouped by hostname."""
    if identities and all(node_id is not None for node_id, _ in identities):
        keys = [str(node_id) for node_id, _ in identities]
        source = "launcher"
    else:
        keys = [name for _, name in identities]
        source = "hostname"
    index = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    node_of = tuple(index[key] for key in keys)
    first_name = {index[key]: name for key, (_, name) in reversed(list(zip(keys, identities)))}
    names = [first_name[i] for i in range(len(index))]
    if len(set(names)) < len(names):  # nodes on one host without SLURM names: say which is which
        names = [f"{name}/{key}" for key, name in zip(index, names)]
    return Topology(node_of, tuple(names), source)


@dataclass
class Scope:
    """One allreduce the world measures: the whole world, one node's ranks, or the leaders."""

    name: str  # world | node | cross-node
    members: list[int]  # global ranks in it
    view: Rank | None  # this rank's place in it; None when this rank is not a member
    node: int | None = None  # scope "node": which node

    def tags(self, topology: Topology) -> dict[str, Any]:
        tags: dict[str, Any] = {"scope": self.name, "ranks": len(self.members)}
        if self.node is not None:
            tags.update(node=self.node, node_name=topology.names[self.node])
        return tags


def time_scopes(
    rank: Rank,
    scopes: list[Scope],
    prepare: Callable[[Rank], tuple[bool, Callable[[], Any]]],
    sampling: Sampling,
) -> list[tuple[Scope, list[float]]] | None:
    """Time a body on the node and cross-node scopes, by the world figure's `sampling`: every node's ranks
    at once (as tensor parallelism inside each node runs), then the leaders while the other ranks wait.
    `prepare(view)` checks and builds the body for one scope ((False, _) when its check failed). Returns each
    scope's samples (slowest rank of the scope, every rank gets them all), or None when a check failed on
    any rank."""
    out: list[tuple[Scope, list[float]]] = []
    for batch in ([s for s in scopes if s.name == "node"], [s for s in scopes if s.name == "cross-node"]):
        if not batch:
            continue
        mine = next((i for i, s in enumerate(batch) if s.view is not None), None)
        ok, samples = True, [0.0] * sampling.iters
        if mine is not None:
            view = batch[mine].view
            assert view is not None
            ok, body = prepare(view)
            if ok:
                samples = sampling.samples(view, body)
            del body
        if not rank.all_true(ok):
            return None
        out += zip(batch, rank.gather_rows(len(batch), mine, samples, sampling.iters))
    return out


class Rank:
    """This worker's place in the world, its device and process group."""

    def __init__(self, backend: str, init_timeout_s: float):
        import torch
        import torch.distributed as dist

        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.backend = backend
        self.on_gpu = backend in GPU_BACKENDS
        if self.on_gpu:
            self.device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
            torch.cuda.set_device(self.device)
            dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=init_timeout_s), device_id=self.device)
        else:
            self.device = torch.device("cpu")
            # Ranks share the cores: more threads than cores per rank makes compute spin, not run.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // self.world_size))
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=init_timeout_s))
        self.global_rank = self.rank
        world = dist.group.WORLD
        if world is None:  # init_process_group above sets it
            raise RuntimeError("torch.distributed has no WORLD group after init_process_group")
        self.group = world
        self.group_name = world.group_name
        # Which ranks share a node (one small all_gather); the node and leaders groups of a multi-node
        # world, created by every rank in the same order as new_group requires. On GPUs the exchange goes
        # over a gloo group: the NCCL group's settings are what a trial tests, and some leave NCCL without
        # an AllGather (NCCL_ALGO=Tree: "no algorithm/protocol available for function AllGather", seen
        # on 2x H200 with NCCL 2.28.9), which would fail the trial before it measured anything.
        bookkeeping = dist.new_group(backend="gloo") if self.on_gpu else None
        identities: list[Any] = [None] * self.world_size
        dist.all_gather_object(identities, node_identity(os.environ), group=bookkeeping)
        self.topology = group_nodes(identities)
        self.node = self.topology.node_of[self.rank]
        self._node_group: Any = None
        self._leaders_group: Any = None
        if self.topology.nodes > 1:
            for node in self.topology.shared_nodes:
                group = dist.new_group(self.topology.members(node))
                if node == self.node:
                    self._node_group = group
            if self.topology.has_leaders_scope:
                group = dist.new_group(self.topology.leaders)
                if self.rank in self.topology.leaders:
                    self._leaders_group = group

    def view(self, group: Any, members: list[int]) -> Rank:
        """This rank as a member of a subgroup: the same interface (rank and world_size are the place in
        the group), so Allreduce, check_allreduce and the timing functions run on it unchanged."""
        view = copy.copy(self)
        view.group = group
        view.group_name = group.group_name
        view.rank = members.index(self.global_rank)
        view.world_size = len(members)
        return view

    def scopes(self) -> list[Scope]:
        """Where this world measures an allreduce: the world; in a multi-node world also each node's
        ranks and the leaders (one rank per node: what crosses the fabric without intra-node hops)."""
        topo = self.topology
        out = [Scope("world", list(range(self.world_size)), self)]
        if topo.nodes == 1:
            return out
        for node in topo.shared_nodes:  # a node of one rank has no allreduce of its own
            members = topo.members(node)
            out.append(
                Scope("node", members, self.view(self._node_group, members) if node == self.node else None, node)
            )
        if topo.has_leaders_scope:
            leaders = topo.leaders
            out.append(
                Scope("cross-node", leaders, self.view(self._leaders_group, leaders) if self._leaders_group else None)
            )
        return out

    def log(self, text: str) -> None:
        if self.global_rank == 0:
            print(text, flush=True)

    def phase(self, name: str) -> None:
        """Rank 0 announces what the trial is doing now (shown on the trial page)."""
        if self.global_rank == 0:
            emit_phase(name)

    def barrier(self) -> None:
        import torch.distributed as dist

        if self.on_gpu:
            dist.barrier(group=self.group, device_ids=[self.device.index])
        else:
            dist.barrier(group=self.group)

    def max_across(self, values: list[float]) -> list[float]:
        """Elementwise max over ranks: a collective is as slow as its slowest rank."""
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t.cpu().tolist()

    def all_true(self, flag: bool) -> bool:
        import torch
        import torch.distributed as dist

        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return bool(t.item())

    def gather_rows(self, rows: int, mine: int | None, values: list[float], width: int) -> list[list[float]]:
        """A rows x width table over the world, each rank filling its own row (or none): every rank
        gets every row (MAX of non-negative figures with zeros elsewhere)."""
        import torch
        import torch.distributed as dist

        t = torch.zeros((rows, width), dtype=torch.float64, device=self.device)
        if mine is not None:
            t[mine] = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t.cpu().tolist()

    def synchronize(self) -> None:
        import torch

        if self.on_gpu:
            torch.cuda.synchronize(self.device)

    def finish(self, code: int, teardown_timeout_s: float) -> None:
        """Flush, destroy the process group within a bound, and exit even if teardown hangs."""
        exit_after_teardown(code, teardown_timeout_s, f"rank {self.rank}")


def exit_after_teardown(code: int, teardown_timeout_s: float, who: str) -> NoReturn:
    """Flush, destroy the process group (if any) within a bound, then `os._exit(code)`: NCCL teardown
    can hang (after a graph-captured collective, typically), and by then the result is already out."""
    import torch.distributed as dist

    sys.stdout.flush()
    sys.stderr.flush()
    done = threading.Event()

    def teardown() -> None:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        finally:
            done.set()

    threading.Thread(target=teardown, daemon=True).start()
    if not done.wait(teardown_timeout_s):
        print(
            f"{who}: process-group teardown did not finish within {teardown_timeout_s:g}s; exiting anyway",
            file=sys.stderr,
            flush=True,
        )
    os._exit(code)


class Allreduce:
    """One allreduce of a fixed shape on a fixed buffer, by the chosen implementation.

    `buffer` is what a caller fills; `__call__` reduces it (sum) and returns the result
    (the buffer itself for in-place implementations, a new tensor for one-shot).
    """

    def __init__(self, rank: Rank, shape: tuple[int, ...], dtype_name: str):
        import torch

        self.rank = rank
        dtype = torch_dtype(dtype_name)
        if rank.backend.startswith("symm_mem"):
            import torch.distributed._symmetric_memory as symm_mem

            self.buffer = symm_mem.empty(shape, dtype=dtype, device=rank.device)
            symm_mem.rendezvous(self.buffer, rank.group_name)
        else:
            self.buffer = torch.empty(shape, dtype=dtype, device=rank.device)
        self.buffer.zero_()
        self._fn = self._pick(rank.backend)

    def _pick(self, backend: str) -> Callable[[], Any]:
        import torch
        import torch.distributed as dist

        name = self.rank.group_name
        buf = self.buffer
        if backend == "symm_mem_one_shot":
            return lambda: torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", name)
        if backend == "symm_mem_two_shot":
            return lambda: torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", name)

        group = self.rank.group

        def in_place():
            dist.all_reduce(buf, group=group)
            return buf

        return in_place

    def __call__(self):
        return self._fn()


class AllGather:
    """The gather of a tensor-parallel LM head: each rank's [rows x cols] share of the logits into the
    whole [rows x world*cols] on every rank (one all_gather_into_tensor, then the shares side by side)."""

    def __init__(self, rank: Rank, shape: tuple[int, int], dtype):
        import torch

        self.rank = rank
        rows, cols = shape
        self.pieces = torch.empty(rank.world_size * rows, cols, dtype=dtype, device=rank.device)
        self.out = torch.empty(rows, rank.world_size * cols, dtype=dtype, device=rank.device)

    def __call__(self, part):
        import torch.distributed as dist

        dist.all_gather_into_tensor(self.pieces, part.contiguous(), group=self.rank.group)
        rows, cols = part.shape
        self.out.copy_(self.pieces.view(self.rank.world_size, rows, cols).permute(1, 0, 2).reshape(rows, -1))
        return self.out


def reducer(ar: Allreduce) -> Callable[[Any], Any]:
    """x -> its allreduce over the ranks, through the allreduce's own buffer (copied out: it is reused)."""

    def reduce(x):
        ar.buffer.copy_(x)
        return ar().clone()

    return reduce


def repeated(call: Callable[[], Any], times: int) -> Callable[[], None]:
    """One body of `times` calls back to back (a step's allreduces, a graph's worth of them)."""

    def body() -> None:
        for _ in range(times):
            call()

    return body


def known_values(seed: int, rank: int, shape: tuple[int, ...], dtype_name: str):
    """Rank-dependent random values any rank can regenerate (CPU generator, exact in dtype)."""
    import torch

    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    return (torch.rand(shape, generator=gen, dtype=torch.float32) * 2 - 1).to(torch_dtype(dtype_name))


def check_allreduce(ar: Allreduce, seed: int, dtype_name: str) -> tuple[bool, float, float]:
    """Fill each rank with known values, reduce, compare to the exact sum.

    Tolerance per element: (world+1) roundings of at most the running absolute sum, which a
    correct reduction in any order meets and a missing or doubled rank does not.
    Returns (all ranks passed, max abs error, max tolerance) for this rank.
    """
    import torch

    rank = ar.rank
    shape = tuple(ar.buffer.shape)
    mine = known_values(seed, rank.rank, shape, dtype_name)
    ar.buffer.copy_(mine.to(rank.device))
    rank.barrier()
    out = ar().float().cpu()
    rank.synchronize()
    inputs = [known_values(seed, r, shape, dtype_name).float() for r in range(rank.world_size)]
    expected = torch.stack(inputs).sum(0)
    abs_sum = torch.stack(inputs).abs().sum(0)
    tol = DTYPE_ROUNDOFF[dtype_name] * (rank.world_size + 1) * abs_sum + 1e-30
    err = (out - expected).abs()
    ok = bool(torch.isfinite(out).all()) and bool((err <= tol).all())
    ar.buffer.zero_()
    rank.synchronize()
    return rank.all_true(ok), float(err.max()), float(tol.max())


def stack_tags(rank: Rank) -> dict[str, Any]:
    import torch

    tags: dict[str, Any] = {"torch": torch.__version__, "device": rank.device.type}
    if rank.on_gpu:
        try:
            tags["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # NCCL version is a nice-to-have tag, never a failure
            pass
    return tags


def rank_env_from_launcher(environ: dict[str, str] | os._Environ) -> dict[str, str]:
    """torch.distributed env:// variables for a rank started by `srun` (SLURM_PROCID, SLURM_NTASKS,
    SLURM_LOCALID, SLURM_NTASKS_PER_NODE) or torchrun (already set: kept). MASTER_ADDR / MASTER_PORT
    come from the batch script (the allocation's first node). {} when not launched by either."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return {WORKER_ENV: "1"}
    if "SLURM_PROCID" not in environ or "SLURM_NTASKS" not in environ:
        return {}
    per_node = environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0].split(",")[0]
    return {
        WORKER_ENV: "1",
        "RANK": environ["SLURM_PROCID"],
        "WORLD_SIZE": environ["SLURM_NTASKS"],
        "LOCAL_RANK": environ.get("SLURM_LOCALID", "0"),
        "LOCAL_WORLD_SIZE": per_node,
        "NODE_RANK": environ.get("SLURM_NODEID", "0"),
    }


def recipe_main(
    prog: str,
    doc: str | None,
    spec: Sequence[Param],
    argv: Sequence[str] | None,
    *,
    validate: Callable[[dict[str, Any]], Any],
    measure: Callable[[Rank, dict[str, Any]], int],
    world_check: Callable[[dict[str, Any], int], str | None] | None = None,
    min_world: int = 2,
) -> int:
    """A distributed recipe's `main`: parse and validate its flags (exit 2 with a usage error), then
    either run this rank's `measure` (a worker started by `launch_ranks` here or by srun on a node; it
    exits through `Rank.finish`) or check the machine and launch the ranks. `world_check(values, world)`
    returns a usage problem that depends on the world size, if any; `min_world` the fewest ranks it runs on. `doc`: the recipe's docstring (its first
    line describes it in --help); `argv`: sys.argv[1:] when None."""
    argv = list(sys.argv[1:] if argv is None else argv)
    values = parse_cli(prog, (doc or prog).splitlines()[0], spec, argv)
    try:
        validate(values)
    except ValueError as exc:
        usage_error(prog, str(exc))
    apply_safe_env(os.environ)
    if is_worker():
        node_checks(prog, values, launch_nodes(os.environ))
        run_rank(values, measure)
        return 0  # not reached: the worker exits through Rank.finish
    world = machine_checks(prog, values, min_world)
    problem = world_check(values, world) if world_check is not None else None
    if problem:
        usage_error(prog, problem)
    return launch_ranks(prog, prog, argv, world, values["run_timeout_s"], values["teardown_timeout_s"])
