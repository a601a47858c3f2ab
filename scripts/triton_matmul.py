"""An autotuned Triton matmul: the "triton" baseline of scripts/bench_gemm.py.

C = A @ B for float16 / bfloat16 PyTorch tensors of any strides, float32 accumulation,
output in the inputs' dtype; Triton's autotuner picks among the configs below on the
first call of each (M, N, K).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_CONFIGS = [
    triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_stages=s, num_warps=w)
    for bm, bn, bk, s, w in [
        (128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 64, 4, 8),
        (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 64, 5, 4), (128, 128, 32, 4, 4),
        (64, 256, 32, 4, 4), (32, 64, 64, 5, 2), (16, 64, 128, 4, 4), (16, 128, 128, 4, 4),
        (64, 32, 128, 4, 4), (16, 32, 256, 3, 4),
    ]
]


@triton.autotune(configs=_CONFIGS, key=["M", "N", "K"])
@triton.jit
def _matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP * tiles_n
    first = (pid // per_group) * GROUP
    rows = min(tiles_m - first, GROUP)
    tm = first + (pid % per_group) % rows
    tn = (pid % per_group) // rows
    offs_m = tm * BM + tl.arange(0, BM)
    offs_n = tn * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    pa = a + offs_m[:, None] * sam + offs_k[None, :] * sak
    pb = b + offs_k[:, None] * sbk + offs_n[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BK)):
        left = K - k0 * BK
        x = tl.load(pa, mask=(offs_m[:, None] < M) & (offs_k[None, :] < left), other=0.0)
        y = tl.load(pb, mask=(offs_k[:, None] < left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
        pa += BK * sak
        pb += BK * sbk
    pc = c + offs_m[:, None] * scm + offs_n[None, :] * scn
    tl.store(pc, acc.to(c.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]

    def grid(meta):
        return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

    _matmul[grid](a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                  out.stride(0), out.stride(1))
    return out
