"""K-grouped GEMM on mma.sync, a mixture-of-experts layer's weight gradient: ``C[g] = alpha *
A[rows of g]^T @ B[rows of g] + beta * C[g]`` for every group g, in one launch.

A (T x M) and B (T x N) hold every group's rows one after another, row-major (the layer's
input and its output's gradient, tokens sorted by expert); C is G dense M x N matrices (the
experts' weight gradients). Group g owns the rows ``ends[g-1] <= row < ends[g]`` (``ends[-1] =
0``): ``ends`` is ``gemm_grouped``'s int32 device array, read by the kernel, so the reduction
over each group's rows needs no trip to the host. A group without rows gets ``beta * C[g]``.
A problem is a tensor-core GEMM problem of layout TN (A read transposed) with ``groups`` and
``k`` = T, every group's rows; its records and dispatch decision are those of the top of T's
bucket (``token_bucket``), as for the grouped forward. ``KGroupedGemm`` is what the K-grouped
families answer alike; this module's family, ``gemm_kgrouped``, runs ``gemm/mma.cu.j2``'s kernel with
each block moved to its group (``templates/gemm/mma_kgrouped.cu.j2``), so the space is
``gemm_mma``'s for a group of the average row count, and the default tile counts every group's
tiles. No epilogue (a gradient has none); C in the inputs' dtype or float32. On Hopper, with
16-bit operands TMA can read, ``gemm_kgrouped_wgmma`` runs it (``route``).

>>> from kgen.problem import Target
>>> p = kgrouped_problem(64, 2048, 1408, 8192, "bfloat16")
>>> p.key
'gemm_kgrouped|align_a=8|align_b=8|dtype=bfloat16|epilogue=none|groups=64|k=8192|layout=TN|m=2048|n=1408|out_dtype=bfloat16|precision=native'
>>> GemmKGrouped().default_config(p, Target.h200()).name
'gemm_kgrouped_bf16_tn_128x128x32_w64x64_s4_va8_vb8_g8_k1_mb1_lp1'
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kgen.errors import InputError, ShapeError
from kgen.fields import Field
from kgen.kernels.gemm.dtypes import ITEMSIZE, TC_OUTPUTS
from kgen.kernels.gemm.family import FIELDS as GEMM_FIELDS
from kgen.kernels.gemm.grouped import (baseline_views, ends_args, ends_recipe, float64_operands, poisoned_output,
                                       random_values, split_rows, token_bucket)
from kgen.kernels.gemm.mma_geometry import tile_shape
from kgen.kernels.gemm.mma_variant import MmaVariant
from kgen.kernels.gemm.problem import tc_problem
from kgen.kernels.gemm.tc import as_float64, torch_stream_of_cupy
from kgen.problem import Problem, Target
from kgen.space import Space
from kgen.spec import Launch

FAMILY = "gemm_kgrouped"
MAX_GROUPS = 4096
LAYOUT = "TN"               # A's rows hold M values a token: A^T is read
# the families that run a K-grouped request, most preferred first (``route``)
ROUTES = ("gemm_kgrouped_wgmma", FAMILY)


def kgrouped_problem(groups: int, m: int, n: int, k: int, dtype: str = "bfloat16", out_dtype: str | None = None,
                     align_a: int | None = None, align_b: int | None = None, family: str = FAMILY) -> Problem:
    """The K-grouped problem of ``family``: ``groups`` products of M x N, ``k`` rows of A and B in
    all (checked)."""
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or not 1 <= groups <= MAX_GROUPS:
        raise ShapeError(f"groups={groups!r} must be an integer in 1..{MAX_GROUPS}",
                         remedy="split the groups over several calls")
    if min(m, n, k) < 1:
        raise ShapeError(f"sizes must be >= 1 (got m={m}, n={n}, k={k})")
    one = tc_problem(family, m, n, k, dtype, LAYOUT, out_dtype, "none", align_a, align_b)
    return Problem.of(family, **dict(one.params), groups=int(groups))


def route(target: Target, problem: Problem) -> tuple[tuple[Any, Problem], ...]:
    """(spec, problem) of every family that can run the K-grouped ``problem`` on ``target``, most
    preferred first: wgmma (Hopper, 16-bit, TMA-readable rows), then mma.sync (any)."""
    from kgen.kernels.gemm.route import families_that_run

    return families_that_run(target, problem, ROUTES)


def leading_dims(problem: Problem) -> tuple[int, int, int]:
    """lda, ldb, ldc of dense operands: A's and B's rows, then C's."""
    return problem["m"], problem["n"], problem["n"]


def average_rows(problem: Problem) -> int:
    """The average group's rows (at least one): the K of one group."""
    return max(1, -(-problem["k"] // problem["groups"]))


class KGroupedGemm:
    """What the K-grouped families (listed before their kernel base) answer alike: the problem,
    its record problem (the token count's bucket), tiles, no vendor candidate, the kernel's
    arguments (the ends in the bias slot), operands, reference, baseline, FLOPs and bytes."""

    problem_fields = ((Field("groups", int, "products (experts)"),
                       Field("m", int, "columns of A: rows of each product"),
                       Field("n", int, "columns of B and of each product"),
                       Field("k", int, "rows of A and B, every group's together")) +
                      tuple(f for f in GEMM_FIELDS if f.name in ("dtype", "precision", "out_dtype")))
    baseline_name = "cuBLAS, a call a group"

    def problem(self, groups: int, m: int, n: int, k: int, dtype: str = "bfloat16", out_dtype: str | None = None,
                **kw) -> Problem:
        return kgrouped_problem(groups, m, n, k, dtype, out_dtype, family=self.family, **kw)

    def request(self, target: Target, **values):
        if values.get("dtype", "bfloat16") == "float32" and values.get("precision") != "tf32":
            raise InputError(f"{self.family} runs float32 on the tensor cores as tf32 only when asked",
                             remedy="pass --precision tf32")
        values.pop("precision", None)
        return self, self.problem(**{k: v for k, v in values.items() if v is not None})

    def record_problem(self, problem: Problem) -> Problem:
        """The top of the token count's bucket (``token_bucket``), as for the grouped forward."""
        top = token_bucket(problem["k"])
        return problem if top == problem["k"] else problem.replace(k=top)

    def tiles(self, problem: Problem, bm: int, bn: int) -> int:
        return problem["groups"] * -(-problem["m"] // bm) * -(-problem["n"] // bn)

    def vendor_supported(self, problem: Problem) -> bool:
        return False          # cuBLAS has no call that reads the groups' rows from the device

    def average_group(self, problem: Problem, family: str) -> Problem:
        """One group of the average row count, as a plain TN GEMM problem of ``family``."""
        return tc_problem(family, problem["m"], problem["n"], average_rows(problem), problem["dtype"], LAYOUT,
                          problem["out_dtype"], "none", problem["align_a"], problem["align_b"])

    def args(self, problem: Problem, config, operands: Mapping[str, Any]) -> list:
        return ends_args(self, problem, config, operands, leading_dims(problem))

    # ---- measurement (GPU) ---------------------------------------------------------------------
    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        import cupy

        rng = cupy.random.default_rng(seed)
        groups, m, n, k = (problem[x] for x in ("groups", "m", "n", "k"))
        out = problem["out_dtype"]
        values = random_values(rng, problem["dtype"])
        return {"a": values((k, m)), "b": values((k, n)), "c": poisoned_output((groups, m, n), out),
                "ends": cupy.asarray(split_rows(k, groups, seed)), "alpha": 1.0, "beta": 0.0}

    def reference(self, problem: Problem, operands: Mapping[str, Any]) -> dict[str, Any]:
        import cupy

        a64, b64 = float64_operands(self, problem, operands)
        ref = cupy.zeros((problem["groups"], problem["m"], problem["n"]), dtype=cupy.float64)
        begin = 0
        for g, end in enumerate(operands["ends"].get().tolist()):
            end = min(max(end, begin), problem["k"])
            ref[g] = a64[begin:end].T @ b64[begin:end]
            begin = end
        ref *= operands.get("alpha", 1.0)
        beta = operands.get("beta", 0.0)
        if beta:
            ref += beta * as_float64(operands["c"], problem["out_dtype"])
        return {"c": ref}

    def baseline(self, problem: Problem, operands: Mapping[str, Any]):
        """One ``torch.matmul`` a group (cuBLAS) into its matrix of C; zeros for a group without rows."""
        views = baseline_views(problem, operands)
        if views is None:
            return None
        torch, a, b, c, bounds = views
        pieces = [(a[s:e].T, b[s:e], c[g]) for g, (s, e) in enumerate(zip(bounds, bounds[1:])) if e > s]
        empty = [c[g] for g, (s, e) in enumerate(zip(bounds, bounds[1:])) if e <= s]
        stream = torch_stream_of_cupy()

        def run():
            with torch.cuda.stream(stream):
                for x, y, out in pieces:
                    torch.matmul(x, y, out=out)
                for out in empty:
                    out.zero_()

        return run

    def flops(self, problem: Problem) -> float:
        return 2.0 * problem["m"] * problem["n"] * problem["k"]

    def bytes(self, problem: Problem) -> float:
        groups, m, n, k = (problem[x] for x in ("groups", "m", "n", "k"))
        size, out = ITEMSIZE[problem["dtype"]], TC_OUTPUTS[problem["out_dtype"]][1]
        return float(size * k * (m + n) + out * groups * m * n)


class GemmKGrouped(KGroupedGemm, MmaVariant):
    family = FAMILY
    template = "gemm/mma_kgrouped.cu.j2"

    # ---- space, render and launch --------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        """gemm_mma's space for one group of the average row count."""
        return super().space(self.average_group(problem, "gemm_mma"), target).renamed("gemm_mma_", FAMILY + "_")

    def launch(self, problem: Problem, config) -> Launch:
        v = config.as_dict()
        warps = (v["BM"] // v["WM"]) * (v["BN"] // v["WN"]) * v["WK"]
        return Launch((self.tiles(problem, v["BM"], v["BN"]), 1, 1), (32 * warps, 1, 1),
                      tile_shape(problem["dtype"], LAYOUT, v)["SMEM"])

    def arg_recipe(self, problem: Problem, config) -> list[dict]:
        """The tensor-core recipe with the ends in the bias slot and the dense leading dimensions."""
        return ends_recipe(super().arg_recipe(problem, config), leading_dims(problem))
