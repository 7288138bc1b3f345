"""Grouped W4A16 for the MoE stand-in's int4 experts: one Triton kernel per matrix over every routed expert.

torch 2.11 has grouped bf16 (`torch._grouped_mm`) and fp8 (`torch._scaled_grouped_mm`) kernels but no grouped
int4 one; the engines' fused-MoE kernels (vLLM's and SGLang's Triton `fused_moe` in its W4A16 variant, Marlin's
MoE) read each routed expert's packed int4 weights once, dequantize them in registers and multiply the
expert's tokens in bf16. This is that kernel, plain: the step's token rows sorted by expert (as the bf16/fp8
grouped paths take them), cut into blocks of BLOCK_M rows of one expert; program (block, n-tile) reads the
expert's whole K for its BLOCK_N columns.

The layout (`pack`): weights of one expert [K, N] quantized symmetric int4 with a bf16 scale per GROUP rows
along K and per column (compressed-tensors W4A16 as Kimi-K2.5 ships it: group 32, symmetric), stored
  packed  uint8 [E, K/2, N]: the low nibble row k of the first half of K, the high nibble row k + K/2
  scales  bf16  [E, K/GROUP, N]
so that a tile's two halves dequantize without interleaving: w = (nibble - 8) x scale.
`grouped_reference` computes the same product with torch ops (any device): the unit tests check the layout
with it on CPU; the recipe's float32 check covers the kernel on the GPU.
"""

from __future__ import annotations

from typing import Any


def pack(q, scale):
    """One expert: q uint8 [N, K] in 0..15 (w ~ (q - 8) x scale), scale float [K/G, N] ->
    (packed uint8 [K/2, N], scales bf16 [K/G, N])."""
    import torch

    qt = q.t()
    half = qt.shape[0] // 2
    packed = (qt[:half] | (qt[half:] << 4)).contiguous()
    return packed, scale.to(torch.bfloat16).contiguous()


def unpack(packed, scales, group: int):
    """The inverse of pack, dequantized: float32 [K, N] (what the kernel multiplies by)."""
    import torch

    lo = (packed & 0xF).float() - 8
    hi = (packed >> 4).float() - 8
    q = torch.cat([lo, hi], 0)
    return q * scales.float().repeat_interleave(group, 0)


def grouped_reference(xs, packed, scales, offs, group: int):
    """Torch version of the kernel: xs [M, K] sorted by expert, offs int32 [E] cumulative row ends."""

    out = xs.new_empty(xs.shape[0], packed.shape[-1])
    start = 0
    for e, end in enumerate(offs.tolist()):
        if end > start:
            w = unpack(packed[e], scales[e], group).to(xs.dtype)
            out[start:end] = xs[start:end] @ w
        start = end
    return out


def block_table(counts: list[int], starts: list[int], block_m: int) -> tuple[list[int], list[int], list[int]]:
    """Per block of at most block_m rows of one expert: (expert slot, first sorted row, rows)."""
    experts, rows0, rows = [], [], []
    for slot, (count, start) in enumerate(zip(counts, starts)):
        for first in range(0, count, block_m):
            experts.append(slot)
            rows0.append(start + first)
            rows.append(min(block_m, count - first))
    return experts, rows0, rows


def block_m_for(counts: list[int]) -> int:
    """Rows per block: 16 (tl.dot's least) while no expert has more, else 32, else 64."""
    most = max(counts, default=0)
    return 16 if most <= 16 else 32 if most <= 32 else 64


_KERNEL: Any = None


def _build():
    import triton
    import triton.language as tl

    configs = [
        triton.Config({"BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bn, w, s in ((64, 4, 4), (128, 4, 3), (64, 4, 6), (32, 4, 4), (128, 8, 4))
    ]

    @triton.autotune(configs=configs, key=["N", "K", "BLOCK_M"])
    @triton.jit
    def w4a16_grouped(
        x_ptr,
        w_ptr,
        s_ptr,
        out_ptr,
        blk_expert,
        blk_row,
        blk_rows,
        N,
        K,
        stride_xm,
        stride_we,
        stride_wk,
        stride_se,
        stride_sk,
        stride_om,
        GROUP: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        # n-tiles vary fastest: the programs of one block of rows run together and share its rows in the L2
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
        e = tl.load(blk_expert + pid_m).to(tl.int64)
        row0 = tl.load(blk_row + pid_m).to(tl.int64)
        nrows = tl.load(blk_rows + pid_m)
        offs_m = tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        m_mask = offs_m < nrows
        half = K // 2
        x_rows = x_ptr + (row0 + offs_m)[:, None] * stride_xm
        w_base = w_ptr + e * stride_we + offs_n[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        # one dot per group of K rows over the nibbles, then the group's scale on the partial product
        offs_g = tl.arange(0, GROUP)
        for k0 in range(0, half, GROUP):
            kk = k0 + offs_g
            b = tl.load(w_base + kk[:, None] * stride_wk)
            s_lo = tl.load(s_ptr + e * stride_se + (k0 // GROUP) * stride_sk + offs_n).to(tl.float32)
            s_hi = tl.load(s_ptr + e * stride_se + ((k0 + half) // GROUP) * stride_sk + offs_n).to(tl.float32)
            a_lo = tl.load(x_rows + kk[None, :], mask=m_mask[:, None], other=0.0)
            a_hi = tl.load(x_rows + (kk + half)[None, :], mask=m_mask[:, None], other=0.0)
            q_lo = ((b & 0xF).to(tl.int8) - 8).to(tl.bfloat16)
            q_hi = ((b >> 4).to(tl.int8) - 8).to(tl.bfloat16)
            acc += tl.dot(a_lo, q_lo) * s_lo[None, :]
            acc += tl.dot(a_hi, q_hi) * s_hi[None, :]
        out = out_ptr + (row0 + offs_m)[:, None] * stride_om + offs_n[None, :]
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None])

    return w4a16_grouped


def grouped(xs, packed, scales, table, block_m: int, group: int, out=None):
    """xs bf16 [M, K] sorted by expert; packed [E, K/2, N]; table: (experts, rows0, rows) int32 tensors on the
    device (block_table's). N must be a multiple of 128 and K/2 of 256 (every tile config divides them)."""
    import torch

    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _build()
    kernel = _KERNEL
    n = packed.shape[-1]
    k = packed.shape[-2] * 2
    if out is None:
        out = torch.empty(xs.shape[0], n, dtype=xs.dtype, device=xs.device)
    experts, rows0, rows = table
    blocks = experts.shape[0]
    if blocks == 0:
        return out

    def grid(meta):
        return (n // meta["BLOCK_N"], blocks)

    kernel[grid](
        xs,
        packed,
        scales,
        out,
        experts,
        rows0,
        rows,
        n,
        k,
        xs.stride(0),
        packed.stride(0),
        packed.stride(1),
        scales.stride(0),
        scales.stride(1),
        out.stride(0),
        GROUP=group,
        BLOCK_M=block_m,
    )
    return out


def fits(k: int, n: int, group: int) -> bool:
    """Whether the kernel's tiles divide this matrix (else the recipe refuses the grouped int4 path)."""
    return n % 128 == 0 and (k // 2) % 256 == 0 and k % (2 * group) == 0
