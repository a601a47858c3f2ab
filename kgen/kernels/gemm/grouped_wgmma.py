"""Grouped GEMM on Hopper, the mixture-of-experts case: ``gemm_wgmma``'s kernel (TMA, wgmma, warp
specialisation, persistent blocks) over every group's tiles in one launch (sm_90a, 16-bit inputs).

``templates/gemm/wgmma.cu.j2`` with ``GROUPS`` in its context: each block first reads the groups'
ends (a device array, never the host) into a shared-memory table of row ends and running unit
counts, then finds each of its work units by a binary search of that table, so the persistent
blocks go on from one group's tiles to the next. A is one 2-D tensor map over all T rows (a
tile's box may reach into the next group's rows, which feed only accumulator rows the epilogue
drops), B a 3-D map with the group as its batch coordinate, C written below the group's row
end: by TMA stores of 16-row bands wholly inside the group (``TMA_STORE``), from registers where
a band crosses the group's end (a TMA store would write the next group's rows). The problem is
``gemm_grouped``'s (layouts NN and NT; no bias; relu, gelu); the space is ``gemm_wgmma``'s for
a group of the average size without split-K, and with the table's shared memory counted; the model's picks rank the tiles by the waves of every group's tiles. No vendor
candidate: cuBLAS has no grouped call that reads device-side row counts.

>>> from kgen.problem import Target
>>> spec = GemmGroupedWgmma()
>>> p = spec.problem(8, 4096, 4096, 4096, "bfloat16", "NT")
>>> spec.supports(p, Target.h200())
True
>>> spec.default_config(p, Target.h200()).name
'gemm_grouped_wgmma_bf16_nt_128x256x64_s4_c2_g1_ts_x2'
"""

from __future__ import annotations

from typing import Any

from kgen import tma
from kgen.kernels.gemm.dtypes import ITEMSIZE
from kgen.kernels.gemm.grouped import GroupedGemm, leading_dims, rows_per_group, row_tile_bound
from kgen.kernels.gemm.tc import modelled_time
from kgen.kernels.gemm.wgmma import row_stride
from kgen.kernels.gemm.wgmma_geometry import smem_bytes
from kgen.kernels.gemm.wgmma_variant import WgmmaVariant
from kgen.problem import Problem, Target
from kgen.space import Constraint, Space
from kgen.spec import Launch

FAMILY = "gemm_grouped_wgmma"
MAX_GROUPS = 1024           # the table: 8 bytes of shared memory a group
TABLE_BYTES = 8             # a group's row end and running unit count


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def table_space(spec: WgmmaVariant, problem: Problem, target: Target) -> Space:
    """The space of a family whose kernel keeps a table of the groups in shared memory
    (``TABLE_BYTES`` a group): ``gemm_wgmma``'s for ``spec``'s average group
    (``spec.average_group``), without split-K, the table counted in shared memory."""
    table = TABLE_BYTES * problem["groups"]
    fits = Constraint("shared memory with the groups' table fits the device",
                      lambda v: smem_bytes(v["BM"], v["BN"], v["STAGES"], v["CONSUMERS"], v["TMA_STORE"], v["XS"])
                      + table <= target.smem_per_block_optin,
                      ("BM", "BN", "STAGES", "CONSUMERS", "TMA_STORE", "XS"))
    return spec.fixed_space(WgmmaVariant.space(spec, spec.average_group(problem, "gemm_wgmma"), target),
                            {"SPLITK": 1}, [fits])


class GemmGroupedWgmma(GroupedGemm, WgmmaVariant):
    family = FAMILY

    def supports(self, problem: Problem, target: Target) -> bool:
        """Hopper, 16-bit inputs, at most MAX_GROUPS groups, operands whose rows TMA can read."""
        return problem["groups"] <= MAX_GROUPS and super().supports(problem, target)

    # ---- space and picks -----------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        return table_space(self, problem, target)

    def tile_time(self, problem: Problem, rows: int, cols: int, tile: tuple[int, int], sms: int) -> float:
        """The waves of every group's tiles, each group of the average size."""
        rows = problem["groups"] * _ceil_div(rows_per_group(problem), tile[0]) * tile[0]
        return modelled_time(rows, cols, tile[0], tile[1], sms)

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config, space) -> dict[str, Any]:
        return {**super().context(problem, config, space), "GROUPS": problem["groups"]}

    def launch(self, problem: Problem, config) -> Launch:
        """As many persistent blocks (clusters) as SMs, or as units any split of the rows can make."""
        cluster = config.get("CLUSTER", 1)
        units = row_tile_bound(problem, config["BM"] * cluster) * _ceil_div(problem["n"], config["BN"])
        return Launch((cluster * max(1, min(units, self.sm_count // cluster)), 1, 1),
                      (128 * (config["CONSUMERS"] + 1), 1, 1),
                      smem_bytes(config["BM"], config["BN"], config["STAGES"], config["CONSUMERS"],
                                 config.get("TMA_STORE", 0), 0))

    def map_plans(self, problem: Problem, config) -> tuple:
        """``gemm_wgmma``'s plans over all T rows of A, and B's with the groups as a third
        dimension."""
        (a, b) = super().map_plans(problem, config)
        name, dims, box, swizzle = b
        return a, (name, (*dims, problem["groups"]), box, swizzle)

    def tensor_maps(self, problem: Problem, config, a, b) -> tuple:
        size, arrays = ITEMSIZE[problem["dtype"]], {"a": a, "b": b}
        between = problem["k"] * problem["n"] * size
        return tuple(tma.encode_tiled(arrays[name].ptr, problem["dtype"], dims,
                                      row_stride(dims, arrays[name].ld) * size, box, swizzle,
                                      between if len(dims) == 3 else 0)
                     for name, dims, box, swizzle in self.map_plans(problem, config))

    def arg_recipe(self, problem: Problem, config) -> list[dict]:
        """``gemm_wgmma``'s recipe with the ends in the bias slot, fixed leading dimensions, and
        B's 3-D map."""
        recipe = self.grouped_recipe(super().arg_recipe(problem, config), problem)
        lds = dict(zip("abc", leading_dims(problem)))
        for item in recipe:
            spec = item.get("map")
            if spec is not None:
                spec["row_stride"] = row_stride(spec["dims"], lds[spec["array"]])
                if len(spec["dims"]) == 3:
                    spec["batch_stride"] = problem["k"] * problem["n"]
        return recipe
