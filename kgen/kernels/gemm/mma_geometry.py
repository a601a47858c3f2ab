"""The mma.sync family's geometry: the mma atom of each dtype and the padded shared-memory
tiles of a config. The family's space and the cost model both read it."""

from __future__ import annotations

from typing import Mapping

from kgen.kernels.gemm.dtypes import ITEMSIZE

# input dtype -> (MMA_M, MMA_K, accumulators per mma per thread, BK choices)
ATOMS = {
    "float16": (16, 16, 4, (16, 32, 64, 128)),
    "bfloat16": (16, 16, 4, (16, 32, 64, 128)),
    "float32": (16, 8, 4, (8, 16, 32)),
    "float64": (16, 8, 4, (8, 16, 32)),      # the m16n8k8 fp64 shape of sm_90
}


def pad(dtype: str, kmajor: bool) -> int:
    """Elements added to each shared-memory row so fragment reads hit distinct banks."""
    if ITEMSIZE[dtype] == 2:
        return 8
    if dtype == "float32":
        return 4 if kmajor else 8
    return 4


def tile_shape(dtype: str, layout: str, v: Mapping[str, int]) -> dict[str, int]:
    """Padded shared-memory rows and tile sizes (elements) of A and B, and the bytes in all
    (the pipeline's, or the k slices' partial sums where those need more)."""
    a_kmajor, b_kmajor = layout[0] == "N", layout[1] == "T"
    sa_row = (v["BK"] if a_kmajor else v["BM"]) + pad(dtype, a_kmajor)
    sb_row = (v["BK"] if b_kmajor else v["BN"]) + pad(dtype, b_kmajor)
    sa_tile = (v["BM"] if a_kmajor else v["BK"]) * sa_row
    sb_tile = (v["BN"] if b_kmajor else v["BK"]) * sb_row
    acc_size = 8 if dtype == "float64" else 4
    partial = (v.get("WK", 1) - 1) * v["BM"] * v["BN"] * acc_size
    return dict(SA_ROW=sa_row, SB_ROW=sb_row, SA_TILE=sa_tile, SB_TILE=sb_tile,
                SMEM=max(v["STAGES"] * (sa_tile + sb_tile) * ITEMSIZE[dtype], partial))
