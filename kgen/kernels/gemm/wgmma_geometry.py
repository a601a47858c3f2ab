"""The wgmma family's geometry: its dtypes, tile and ring sizes, shared-memory footprint and
the operand paths a problem allows. The family's space and the cost model both read it."""

from __future__ import annotations

from kgen.kernels.gemm.dtypes import ITEMSIZE
from kgen.problem import Problem

DTYPES = ("float16", "bfloat16", "float32")   # float32: tf32 tensor cores
# split-K choices: counts that are no power of two too, so that a few tiles can fill the SMs
# (9 tiles x 12 parts = 108 units of 132 SMs, where 16 parts would run two waves)
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
STAGE_CHOICES = (2, 3, 4, 5, 6, 8, 10, 12)   # deep rings keep a skinny problem's B streaming
SWIZZLE = 128                 # bytes: every tile row spans one 128-byte swizzle span
BK = SWIZZLE // 2             # k per stage for 16-bit inputs (64); tf32 takes 32 (``block_k``)
DEFAULT_SM_COUNT = 132        # H200 / H100 SXM; space() takes the target's
MAX_ACC_FLOATS = 168          # accumulator floats per consumer thread (setmaxnreg 232)
RS_FRAGMENT_REGS = 16         # RS: four k8 steps of 4 fragment registers per m64 slab
BARRIER_BYTES = 16            # a full and an empty mbarrier per stage (+ 2 ping-pong ones)
ALIGN_SLACK = 1024            # the kernel rounds its shared base up to 1024 bytes
STORE_ROWS = 16               # TMA stores: a consumer warp's band of an m64 slab
STORE_BUFFER = STORE_ROWS * SWIZZLE   # 2 KiB: 16 rows x 128 bytes of output columns
STORE_BUFFERS_PER_WARP = 2    # one filled while the other drains


def smem_bytes(bm: int, bn: int, stages: int, consumers: int = 2, tma_store: int = 0, staged: int = 0) -> int:
    """Dynamic shared memory of a config: the A and B rings (rows of 128 bytes), the staging
    buffers of a transposed B (``staged`` k-blocks of BN rows of 128 bytes), the TMA store
    buffers (two per consumer warp), barriers, alignment slack."""
    store = consumers * 4 * STORE_BUFFERS_PER_WARP * STORE_BUFFER * (tma_store != 0)   # numpy columns too
    return ((stages * (bm + bn) + staged * bn) * SWIZZLE + store + (stages + staged) * BARRIER_BYTES + 16
            + ALIGN_SLACK)


def block_k(dtype: str) -> int:
    """k per stage: one 128-byte row of each operand tile."""
    return SWIZZLE // ITEMSIZE[dtype]


def copied_transposed(dtype: str, layout: str) -> tuple[bool, bool]:
    """Whether A and B are MN-major tf32 operands, which the producer transposes: copied in by
    cp.async (A; B where XS is 0) or staged by TMA and transposed in shared memory (B, XS > 0)."""
    tf32 = dtype == "float32"
    return tf32 and layout[0] == "T", tf32 and layout[1] == "N"


def staging_choices(problem: Problem) -> tuple[int, ...]:
    """XS, the staging buffers of a transposed B: 2 or 3 where TMA can read B (16-byte rows),
    else 0 (cp.async)."""
    transposed_b = copied_transposed(problem["dtype"], problem["layout"])[1]
    return (0, 2, 3) if transposed_b and problem["align_b"] >= 16 // ITEMSIZE["float32"] else (0,)


def register_choices(problem: Problem) -> tuple[int, ...]:
    """RS, an M-major tf32 A read into registers as wgmma's first operand (TT), or a tf32 NN
    problem computed swapped as such a TT one (C^T = B^T A^T, B^T from registers): offered where
    TMA can read both operands as they lie (16-byte rows)."""
    tma_align = 16 // ITEMSIZE["float32"]
    return (0, 1) if (problem["dtype"] == "float32" and problem["layout"] in ("NN", "TT")
                      and problem["align_a"] >= tma_align and problem["align_b"] >= tma_align) else (0,)
