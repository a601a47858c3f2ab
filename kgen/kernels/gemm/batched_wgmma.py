"""Batched GEMM on Hopper: ``gemm_wgmma``'s kernel (TMA, wgmma, warp specialisation, persistent
blocks) over every batch's tiles in one launch (sm_90a, 16-bit inputs).

``templates/gemm/wgmma.cu.j2`` with ``BATCH`` in its context: the work units run batch-major
over the batch's tiles, so a persistent block goes on from one batch's tiles to the next one's,
and the operands and the output are 3-D tensor maps (inner, outer, batch) read at the unit's
batch, each matrix's edges clipping the boxes as a 2-D map's do (no row of the next matrix is
read in as a row of this one, whatever M, N, K). A broadcast operand (one matrix for every
batch) is a map of one matrix, read at batch 0. A dense batch's matrices lie rows x leading
dimension apart, so rows TMA can read (``align_a``/``align_b``) make a batch stride it can
step. The problem is ``gemm_batched``'s; the space is ``gemm_wgmma``'s without split-K (the
batch fills the SMs) for bfloat16 and float16 (tf32 batches stay on ``gemm_batched``'s
mma.sync, whose operands need no TMA); the model's picks rank the tiles by the waves of every
batch's tiles. cuBLAS's batched call is the vendor
candidate, as for ``gemm_batched``.

>>> from kgen.problem import Target
>>> spec = GemmBatchedWgmma()
>>> p = spec.problem(64, 512, 512, 64, "bfloat16", "NT")
>>> spec.supports(p, Target.h200())
True
>>> spec.default_config(p, Target.h200()).name
'gemm_batched_wgmma_bf16_nt_128x256x64_s4_c2_g1_ts_x2'
>>> spec.launch(p, spec.default_config(p, Target.h200())).grid
(132, 1, 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kgen import tma
from kgen.kernels.gemm.batched import BatchedGemm, batch_strides, leading_dims
from kgen.kernels.gemm.dtypes import ITEMSIZE
from kgen.kernels.gemm.tc import modelled_time
from kgen.kernels.gemm.wgmma import _EMPTY_MAP, row_stride
from kgen.kernels.gemm.wgmma_geometry import smem_bytes
from kgen.kernels.gemm.wgmma_variant import WgmmaVariant
from kgen.problem import Problem, Target
from kgen.space import Space
from kgen.spec import Launch

FAMILY = "gemm_batched_wgmma"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class GemmBatchedWgmma(BatchedGemm, WgmmaVariant):
    family = FAMILY

    # ---- space and picks -----------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        return self.fixed_space(super().space(problem, target), {"SPLITK": 1})

    def tile_time(self, problem: Problem, rows: int, cols: int, tile: tuple[int, int], sms: int) -> float:
        """The waves of every batch's tiles (each batch's rows padded to whole tiles)."""
        return modelled_time(problem["batch"] * _ceil_div(rows, tile[0]) * tile[0], cols, tile[0], tile[1], sms)

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config, space) -> dict[str, Any]:
        ctx = super().context(problem, config, space)
        broadcast = problem["broadcast"]
        ctx.update(BATCH=problem["batch"], BATCH_A=int(broadcast != "a"), BATCH_B=int(broadcast != "b"),
                   BATCH_STRIDE_C=batch_strides(problem)[2])
        return ctx

    def launch(self, problem: Problem, config) -> Launch:
        return matrices_launch(config, problem["batch"], problem["m"], problem["n"], self.sm_count)

    def map_plans(self, problem: Problem, config) -> tuple:
        """``gemm_wgmma``'s plans with a batch: dims (inner, outer, matrices), one matrix where
        the operand is broadcast (its batch stride 0)."""
        between = dict(zip("ab", batch_strides(problem)))
        return tuple((name, (*dims, problem["batch"] if between[name] else 1), box, swizzle)
                     for name, dims, box, swizzle in super().map_plans(problem, config))

    def tensor_maps(self, problem: Problem, config, a, b) -> tuple:
        size, arrays = ITEMSIZE[problem["dtype"]], {"a": a, "b": b}
        between = dict(zip("ab", batch_strides(problem)))
        return tuple(tma.encode_tiled(arrays[name].ptr, problem["dtype"], dims,
                                      row_stride(dims, arrays[name].ld) * size, box, swizzle, between[name] * size)
                     for name, dims, box, swizzle in self.map_plans(problem, config))

    def output_plan(self, problem: Problem, config):
        plan = super().output_plan(problem, config)
        return None if plan is None else ((*plan[0], problem["batch"]), *plan[1:])

    def output_map(self, problem: Problem, config, c_ptr: int, ldc: int) -> tuple:
        """C's 3-D map where the config stores by TMA and C allows it, else registers."""
        return matrices_map(self.output_plan(problem, config), problem["out_dtype"], c_ptr, ldc,
                            batch_strides(problem)[2])

    def arg_recipe(self, problem: Problem, config) -> list[dict]:
        """``gemm_wgmma``'s recipe for a dense batch: fixed leading dimensions and 3-D maps."""
        return with_matrix_strides(self.dense_recipe(super().arg_recipe(problem, config), problem),
                                   leading_dims(problem), batch_strides(problem))


def matrices_launch(config, matrices: int, m: int, n: int, sms: int) -> Launch:
    """The launch of the wgmma kernel over ``matrices`` outputs of m x n: as many persistent
    blocks (whole clusters) as SMs, or as the work units (each matrix's tiles of a cluster)."""
    cluster = config.get("CLUSTER", 1)
    units = matrices * _ceil_div(_ceil_div(m, config["BM"]), cluster) * _ceil_div(n, config["BN"])
    return Launch((cluster * max(1, min(units, sms // cluster)), 1, 1), (128 * (config["CONSUMERS"] + 1), 1, 1),
                  smem_bytes(config["BM"], config["BN"], config["STAGES"], config["CONSUMERS"],
                             config.get("TMA_STORE", 0), 0))


def matrices_map(plan, out: str, c_ptr: int, ldc: int, between: int) -> tuple:
    """(TmaDesc, c_by_tma) of an output of several matrices ``between`` elements apart: its 3-D
    map of ``plan`` (dims, box, swizzle) where TMA can describe it, else an empty map and 0 (the
    kernel stores from registers); the same where the config stores from registers (no plan)."""
    if plan is None:
        return _EMPTY_MAP, np.int32(0)
    dims, box, swizzle = plan
    size = ITEMSIZE[out]
    try:
        return tma.encode_tiled(c_ptr, out, dims, row_stride(dims, ldc) * size, box, swizzle, between * size), \
            np.int32(1)
    except tma.TmaError:
        return _EMPTY_MAP, np.int32(0)


def with_matrix_strides(recipe: list[dict], lds: tuple[int, int, int], between: tuple[int, int, int]) -> list[dict]:
    """An ``arg_recipe`` whose tensor maps get the row strides of the leading dimensions ``lds``
    and the elements ``between`` matrices, each of a, b and c."""
    lds_of, between_of = dict(zip("abc", lds)), dict(zip("abc", between))
    for item in recipe:
        spec = item.get("map")
        if spec is not None:
            spec["row_stride"] = row_stride(spec["dims"], lds_of[spec["array"]])
            spec["batch_stride"] = between_of[spec["array"]]
    return recipe

