"""Profiler traces read into kernel tables: a real torch.profiler trace of a gloo world (CPU), the CUDA shape
(kernels tied to their step by the launch's correlation id), bare arrays, refusals, and bounded memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from app.domain.traces import TraceError, collective_kind, kernel_diff, read_trace
from tests.support.net import free_port
from tests.support.traces import cuda_trace

LAYERS = 3
STEPS = 2


def test_a_real_gloo_trace_gives_two_allreduces_per_layer_per_step(tmp_path):
    """torch.profiler around a 2-rank gloo step of LAYERS layers, each a matmul and two allreduces."""
    script = tmp_path / "profiled.py"
    out = tmp_path / "trace.json"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, torch, torch.distributed as dist
            import torch.multiprocessing as mp
            from torch.profiler import profile, ProfilerActivity, record_function

            def main(rank):
                os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{free_port()}")
                dist.init_process_group("gloo", rank=rank, world_size=2)
                x = torch.ones(4, 64)
                dist.all_reduce(x)  # warm-up, outside every step
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    dist.all_reduce(x)  # profiled, still outside the steps
                    for step in range({STEPS}):
                        with record_function("verify_step"):
                            for layer in range({LAYERS}):
                                y = x @ torch.ones(64, 64)
                                dist.all_reduce(y)
                                dist.all_reduce(y)
                if rank == 0:
                    prof.export_chrome_trace({str(out)!r})
                dist.destroy_process_group()

            if __name__ == "__main__":
                mp.spawn(main, nprocs=2)
            """
        )
    )
    subprocess.run([sys.executable, str(script)], check=True, timeout=240, capture_output=True)
    summary = read_trace(out)
    assert not summary.device and summary.step_name == "verify_step" and summary.steps == STEPS
    assert summary.allreduces_per_step == 2 * LAYERS
    spans = [
        e["dur"]
        for e in json.loads(out.read_text())["traceEvents"]
        if e.get("name") == "gloo:all_reduce" and e.get("cat") == "user_annotation"
    ]
    assert len(spans) == 2 * LAYERS * STEPS + 1  # the one outside the steps is not counted
    table = {r["name"]: r for r in summary.table()}
    assert table["gloo:all_reduce"]["calls"] == 2 * LAYERS * STEPS
    assert table["gloo:all_reduce"]["kind"] == "gloo allreduce"
    assert table["aten::mm"]["calls"] == LAYERS * STEPS and table["aten::mm"]["kind"] == "compute"
    assert summary.allreduce_us == pytest.approx(table["gloo:all_reduce"]["total_us"] / (2 * LAYERS * STEPS))


def test_cuda_kernels_count_in_the_step_that_launched_them(tmp_path):
    kernels = [("sm90_xmma_gemm_bf16", 40.0), ("two_shot_all_reduce_kernel<bf16>", 7.0)] * 61
    summary = read_trace(cuda_trace(tmp_path / "t.json", kernels))
    assert summary.device and summary.steps == 2
    assert summary.allreduces_per_step == 61 and summary.allreduce_us == pytest.approx(7.0)
    table = {r["name"]: r for r in summary.table()}
    assert "ncclDevKernel_AllReduce_Sum_bf16_RING_LL" not in table  # the warm-up, outside the steps
    assert table["two_shot_all_reduce_kernel<bf16>"]["kind"] == "symm-mem two-shot"
    assert table["sm90_xmma_gemm_bf16"]["share"] == pytest.approx(40 / 47, abs=1e-3)


@pytest.mark.parametrize(
    ("kernel", "kind"),
    [
        ("void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 8, 4>(...)", "symm-mem multimem"),
        ("multimem_one_shot_all_reduce_kernel<bf16>", "symm-mem multimem"),
        ("one_shot_all_reduce_kernel<bf16, 2>", "symm-mem one-shot"),
        (
            "void quickreduce::allreduce_prototype_twoshot<quickreduce::AllReduceTwoshot<__half, "
            "quickreduce::CodecFP<__half, 8>, false>, __half>(...)",
            "quick reduce",
        ),
        ("quickreduce::allreduce_prototype_oneshot<bf16>", "quick reduce"),
        ("void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(...)", "custom allreduce"),
        (
            "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<"
            "(flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, false, false>(...)",
            "FlashInfer allreduce",
        ),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "NCCL allreduce"),
        ("multimem_all_gather_kernel<bf16>", None),  # a gather, not an allreduce
        ("sm90_xmma_gemm_bf16bf16_bf16f32", None),
    ],
)
def test_every_custom_allreduce_kernel_is_a_collective(kernel, kind):
    assert collective_kind(kernel) == kind


def test_multimem_and_quick_reduce_kernels_count_in_n_ar(tmp_path):
    """Issue 32 item 17: SGLang's symm-mem path at TP 4-8 on SM 9.0 runs multimem_all_reduce_kernel and vLLM's
    quick reduce allreduce_prototype_*: both counted as compute undercounted N_ar."""
    kernels = [
        ("sm90_xmma_gemm_bf16", 40.0),
        ("void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 8, 4>(...)", 5.0),
        ("rms_norm_kernel", 2.0),
        ("quickreduce::allreduce_prototype_twoshot<bf16>", 9.0),
    ] * 61
    summary = read_trace(cuda_trace(tmp_path / "t.json", kernels))
    assert summary.allreduces_per_step == 122 and summary.allreduce_us == pytest.approx(7.0)
    kinds = {r["name"]: r["kind"] for r in summary.table()}
    assert kinds["quickreduce::allreduce_prototype_twoshot<bf16>"] == "quick reduce"


def test_a_bare_array_trace_and_no_step_labels(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "cross_device_reduce_1stage<bf16,8>", "pid": 0, "ts": 10 * i, "dur": 3}
        for i in range(5)
    ]
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(events))
    summary = read_trace(path)
    assert summary.steps == 1 and summary.step_name is None and summary.allreduces_per_step == 5
    assert collective_kind("cross_device_reduce_1stage<bf16,8>") == "custom allreduce"


@pytest.mark.parametrize("text", ["", "not json", '{"traceEvents": [1, 2', '{"other": 1}'])
def test_what_is_not_a_trace_is_refused_in_words(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match="not a Chrome trace|holds no events"):
        read_trace(path)


def test_the_kernel_diff_says_what_got_faster_appeared_and_vanished(tmp_path):
    before = read_trace(cuda_trace(tmp_path / "a.json", [("gemm", 40.0), ("ncclDevKernel_AllReduce_Sum", 17.0)]))
    after = read_trace(cuda_trace(tmp_path / "b.json", [("gemm", 40.2), ("one_shot_all_reduce", 6.5)]))
    diff = {row["name"]: row for row in kernel_diff(before, after)}
    assert diff["ncclDevKernel_AllReduce_Sum"]["change"] == "vanished"
    assert diff["one_shot_all_reduce"]["change"] == "appeared" and diff["one_shot_all_reduce"]["us_per_step"] == [
        0.0,
        6.5,
    ]
    assert diff["gemm"]["change"] == "same"


def test_a_large_trace_is_read_in_bounded_memory(tmp_path):
    """A ~60 MB trace read in a fresh process: its peak memory grows by a fraction of the file's size (a
    json.load of it would hold several times the file)."""
    path = tmp_path / "big.json"
    with path.open("w") as f:
        f.write('{"traceEvents": [')
        f.write('{"ph": "X", "cat": "user_annotation", "name": "verify_step", "pid": 1, "ts": 0, "dur": 1e12}')
        row = '{"ph": "X", "cat": "kernel", "name": "gemm_%d", "pid": 0, "tid": 7, "ts": %d, "dur": 3.5, "args": {"correlation": %d, "stream": 7, "grid": [1, 2, 3]}}'
        for i in range(500_000):
            f.write("," + row % (i % 50, i, i))
        f.write("]}")
    size_mb = path.stat().st_size / 2**20
    probe = (
        "import resource, sys; from pathlib import Path; from app.domain.traces import read_trace;"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
        "s = read_trace(Path(sys.argv[1]));"
        "print(s.steps, len(s.rows), sum(r.calls for r in s.rows), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(path)], check=True, capture_output=True, text=True, timeout=300
    )
    steps, rows, calls, grew_mb = out.stdout.split()
    assert (int(steps), int(rows), int(calls)) == (1, 50, 500_000)
    assert float(grew_mb) < size_mb / 2, f"peak memory grew {grew_mb} MB reading a {size_mb:.0f} MB trace"
