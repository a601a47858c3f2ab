"""K-grouped GEMM on Hopper, a mixture-of-experts layer's weight gradient: ``gemm_wgmma``'s
kernel (TMA, wgmma, warp specialisation, persistent blocks) over every group's tiles in one
launch (sm_90a, 16-bit inputs).

``templates/gemm/wgmma.cu.j2`` batched over the groups with ``KGROUPS`` in its context: the work
units run group-major over each group's M x N tiles, A (T x M) and B (T x N) are one 2-D map
each (read as a batch of one, both MN-major: layout TN), C the groups' G x M x N, a 3-D map with
the group its batch. A unit's k-blocks start at its group's first row; in its group's last
k-block the kernel skips the k steps past the group and zeroes the rows of the next group's in
its last step, so no other group's value reaches the sums. The problem is ``gemm_kgrouped``'s;
the space is ``gemm_wgmma``'s for a group of the average row count without split-K (the groups'
tiles fill the SMs), the table of the groups' row ends (8 bytes a group) counted in shared
memory; the model's picks rank the tiles by the waves of every group's tiles.

>>> from kgen.problem import Target
>>> spec = GemmKGroupedWgmma()
>>> p = spec.problem(64, 2048, 1408, 8192, "bfloat16")
>>> spec.supports(p, Target.h200())
True
>>> spec.default_config(p, Target.h200()).name
'gemm_kgrouped_wgmma_bf16_tn_256x128x64_s4_c2_g1_ts_x2'
"""

from __future__ import annotations

from typing import Any

from kgen import tma
from kgen.errors import DtypeError
from kgen.kernels.gemm.batched_wgmma import matrices_launch, matrices_map, with_matrix_strides
from kgen.kernels.gemm.dtypes import ITEMSIZE
from kgen.kernels.gemm.grouped import ends_recipe
from kgen.kernels.gemm.grouped_wgmma import MAX_GROUPS, table_space
from kgen.kernels.gemm.kgrouped import MAX_GROUPS as ANY_GROUPS
from kgen.kernels.gemm.kgrouped import KGroupedGemm, leading_dims
from kgen.kernels.gemm.tc import modelled_time
from kgen.kernels.gemm.wgmma import row_stride
from kgen.kernels.gemm.wgmma_variant import DTYPES, WgmmaVariant
from kgen.problem import Problem, Target
from kgen.space import Space
from kgen.spec import Launch

FAMILY = "gemm_kgrouped_wgmma"
assert MAX_GROUPS <= ANY_GROUPS      # the groups' table (common/group_table.cuh), as the grouped forward's


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class GemmKGroupedWgmma(KGroupedGemm, WgmmaVariant):
    family = FAMILY

    def request(self, target: Target, **values):
        if values.get("dtype", "bfloat16") not in DTYPES:
            raise DtypeError(f"{self.family} runs {' and '.join(DTYPES)}, not {values['dtype']}",
                             remedy="pass --dtype bfloat16 (or float16); float32 runs as tf32 on gemm_kgrouped")
        return super().request(target, **values)

    def supports(self, problem: Problem, target: Target) -> bool:
        """Hopper, 16-bit inputs, at most MAX_GROUPS groups, rows TMA can read (M and N whole
        multiples of 16 bytes), and a C whose matrices lie 16-byte multiples apart."""
        return (problem["groups"] <= MAX_GROUPS and problem["m"] * problem["n"] * ITEMSIZE[problem["out_dtype"]] % 16 == 0
                and super().supports(problem, target))

    # ---- space and picks -----------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        return table_space(self, problem, target)

    def tile_time(self, problem: Problem, rows: int, cols: int, tile: tuple[int, int], sms: int) -> float:
        """The waves of every group's tiles (each group's M x N in whole tiles)."""
        return modelled_time(problem["groups"] * _ceil_div(problem["m"], tile[0]) * tile[0], cols, tile[0], tile[1],
                             sms)

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config, space) -> dict[str, Any]:
        groups = problem["groups"]
        return {**super().context(problem, config, space), "BATCH": groups, "BATCH_A": 0, "BATCH_B": 0,
                "BATCH_STRIDE_C": problem["m"] * problem["n"], "KGROUPS": groups}

    def launch(self, problem: Problem, config) -> Launch:
        """As many persistent blocks (clusters) as SMs, or as the groups' units."""
        return matrices_launch(config, problem["groups"], problem["m"], problem["n"], self.sm_count)

    def map_plans(self, problem: Problem, config) -> tuple:
        """``gemm_wgmma``'s plans over all T rows of A and B, each a batch of one matrix."""
        return tuple((name, (*dims, 1), box, swizzle) for name, dims, box, swizzle in super().map_plans(problem, config))

    def tensor_maps(self, problem: Problem, config, a, b) -> tuple:
        size, arrays = ITEMSIZE[problem["dtype"]], {"a": a, "b": b}
        return tuple(tma.encode_tiled(arrays[name].ptr, problem["dtype"], dims,
                                      row_stride(dims, arrays[name].ld) * size, box, swizzle, 0)
                     for name, dims, box, swizzle in self.map_plans(problem, config))

    def output_plan(self, problem: Problem, config):
        plan = super().output_plan(problem, config)
        return None if plan is None else ((*plan[0], problem["groups"]), *plan[1:])

    def output_map(self, problem: Problem, config, c_ptr: int, ldc: int) -> tuple:
        """C's 3-D map (the groups' matrices) where the config stores by TMA and C allows it, else
        registers."""
        return matrices_map(self.output_plan(problem, config), problem["out_dtype"], c_ptr, ldc,
                            problem["m"] * problem["n"])

    def arg_recipe(self, problem: Problem, config) -> list[dict]:
        """``gemm_wgmma``'s recipe with the ends in the bias slot, dense leading dimensions and
        the 3-D maps (A and B a batch of one, C the groups' matrices)."""
        return with_matrix_strides(ends_recipe(super().arg_recipe(problem, config), leading_dims(problem)),
                                   leading_dims(problem), (0, 0, problem["m"] * problem["n"]))
