"""Grouped GEMM on mma.sync, the mixture-of-experts case: ``C[rows of g] = act(alpha * A[rows of g]
@ op(B[g]) + beta * C[rows of g])`` for every group g, in one launch.

A holds the rows of every group one after another (T x K, row-major), B one K x N matrix a group
(``(groups, K, N)``, or ``(groups, N, K)`` read transposed: layout ``NT``), C is T x N; group g
owns the rows ``ends[g-1] <= row < ends[g]`` (``ends[-1] = 0``), and ``ends`` (int32, one a group)
stays on the device, as a router writes it. A problem is a tensor-core GEMM problem of all T rows
(``m``) with ``groups``; what the kernel compiles in is the group count and B's group stride,
never T or the split of rows, so one kernel serves every batch of tokens; records and dispatch
decisions are those of the top of T's bucket (``token_bucket``: counts within 1.5x share one),
so a layer whose token count changes every step decides once a bucket. The kernel is
``gemm/mma.cu.j2``'s with each block moved to its group (``templates/gemm/mma_grouped.cu.j2``),
so the space is ``gemm_mma``'s for a group of the average size; the default tile counts every
group's tiles. No bias (a grouped problem has one bias a group, not one a column); relu and gelu
are fused.

>>> from kgen.problem import Target
>>> p = grouped_problem(64, 8192, 1024, 2048, "bfloat16", "NT")
>>> p.key
'gemm_grouped|align_a=8|align_b=8|dtype=bfloat16|epilogue=none|groups=64|k=2048|layout=NT|m=8192|n=1024|out_dtype=bfloat16|precision=native'
>>> GemmGrouped().default_config(p, Target.h200()).name
'gemm_grouped_bf16_nt_128x128x32_w64x64_s4_va8_vb8_g1_k1_mb1_lp1'
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from kgen.arrays import device_pointer
from kgen.errors import InputError, LayoutError, ShapeError
from kgen.fields import Field
from kgen.kernels.gemm import rules
from kgen.kernels.gemm.dtypes import ACTIVATIONS, ITEMSIZE, TC_OUTPUTS
from kgen.kernels.gemm.family import FIELDS as GEMM_FIELDS
from kgen.kernels.gemm.mma_variant import MmaVariant
from kgen.kernels.gemm.mma_geometry import tile_shape
from kgen.kernels.gemm.problem import tc_problem
from kgen.kernels.gemm.tc import (as_float64, epilogue_reference, to_bf16, to_tf32, torch_stream_of_cupy,
                                  torch_view)
from kgen.problem import Problem, Target
from kgen.space import Space
from kgen.spec import Launch

FAMILY = "gemm_grouped"
MAX_GROUPS = 4096           # each block scans the groups' ends, 32 a step
LAYOUTS = ("NN", "NT")      # A is the tokens' rows (row-major); B either way
# the families that run a grouped request, most preferred first (``route``)
ROUTES = ("gemm_grouped_wgmma", FAMILY)


def route(target: Target, problem: Problem) -> tuple[tuple[Any, Problem], ...]:
    """(spec, problem) of every family that can run the grouped ``problem`` on ``target``, most
    preferred first: wgmma (Hopper, 16-bit, TMA-readable operands), then mma.sync (any)."""
    from kgen.kernels.gemm.route import families_that_run

    return families_that_run(target, problem, ROUTES)


def grouped_problem(groups: int, m: int, n: int, k: int, dtype: str = "bfloat16", layout: str = "NN",
                    family: str = FAMILY, **kw) -> Problem:
    """A grouped GEMM problem of ``family``, ``m`` rows in all (checked); ``kw`` as ``tc_problem``
    (out_dtype, epilogue: none, relu or gelu)."""
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or not 1 <= groups <= MAX_GROUPS:
        raise ShapeError(f"groups={groups!r} must be an integer in 1..{MAX_GROUPS}",
                         remedy="split the groups over several calls")
    if layout not in LAYOUTS:
        raise LayoutError(f"grouped GEMM takes layouts {LAYOUTS}, not {layout!r}: A is every group's rows, "
                          "row-major", remedy="pass A as a contiguous (rows, K) array")
    if kw.get("epilogue", "none") not in ACTIVATIONS:
        raise InputError(f"grouped GEMM fuses {ACTIVATIONS}, not {kw['epilogue']!r} (no bias)",
                         remedy="add a bias after the call")
    if min(m, n, k) < 1:
        raise ShapeError(f"sizes must be >= 1 (got m={m}, n={n}, k={k})")
    size = ITEMSIZE.get(dtype, 1)
    ldb = n if layout[1] == "N" else k
    kw.setdefault("align_b", rules.natural_alignment(math.gcd(ldb, k * n), size))   # every group's matrix
    one = tc_problem(family, m, n, k, dtype, layout, **kw)
    return Problem.of(family, **dict(one.params), groups=int(groups))


def rows_per_group(problem: Problem) -> int:
    """The average group's rows (at least one)."""
    return max(1, -(-problem["m"] // problem["groups"]))


def row_tile_bound(problem: Problem, bm: int) -> int:
    """The most row tiles any split of the problem's rows into its groups needs: each group with
    rows rounds its own up, and at most min(groups, rows) groups have rows."""
    m = problem["m"]
    return min(m, (m + min(problem["groups"], m) * (bm - 1)) // bm)


def token_bucket(rows: int) -> int:
    """The largest token count of ``rows``'s bucket: the least 2^j or 3 * 2^(j-1) at least
    ``rows``, so that the counts of a bucket are within 1.5x of each other and the tuned
    powers of two stay buckets' tops.

    >>> [token_bucket(t) for t in (1, 2, 3, 4, 5, 7, 4097, 6144, 6145)]
    [1, 2, 3, 4, 6, 8, 6144, 6144, 8192]
    """
    if rows <= 2:
        return max(rows, 1)
    power = 1 << (rows - 1).bit_length()
    return 3 * power // 4 if 3 * power // 4 >= rows else power


def leading_dims(problem: Problem) -> tuple[int, int, int]:
    """lda, ldb, ldc of dense operands."""
    n, k = problem["n"], problem["k"]
    return k, (n if problem["layout"][1] == "N" else k), n


def split_rows(total: int, groups: int, seed: int) -> np.ndarray:
    """Group ends of ``total`` rows split at random over ``groups`` (a router's uneven counts)."""
    sizes = np.random.default_rng(seed).multinomial(total, np.full(groups, 1.0 / groups))
    return np.cumsum(sizes).astype(np.int32)


def ends_recipe(recipe: list[dict], lds: tuple[int, int, int]) -> list[dict]:
    """A tensor-core GEMM's ``arg_recipe`` with the group ends in the bias slot and the leading
    dimensions (of a, b, c) fixed to ``lds`` (the grouped families' dense operands)."""
    fixed = dict(zip("abc", lds))
    out = []
    for item in recipe:
        if item.get("pointer") == "bias":
            item = {"pointer": "ends"}
        elif "ld" in item:
            item = {"value": fixed[item["ld"]], "type": "int64"}
        out.append(item)
    return out


def ends_args(spec, problem: Problem, config, operands: Mapping[str, Any], lds: tuple[int, int, int]) -> list:
    """The kernel arguments of a grouped family's launch: a, b, c and the ends' pointers, the
    leading dimensions ``lds``, alpha and beta."""
    build = spec.arg_builder(problem, config, lds)
    return list(build(*(device_pointer(operands[x], x) for x in ("a", "b", "c", "ends")),
                      operands.get("alpha", 1.0), operands.get("beta", 0.0)))


def random_values(rng, dtype: str):
    """``values(shape)``: uniform values in [-1, 1) of ``dtype`` (bfloat16 as uint16 bits) from ``rng``."""
    import cupy

    def values(shape):
        x = rng.random(shape, dtype=cupy.float32) * 2 - 1
        return to_bf16(x) if dtype == "bfloat16" else x.astype(dtype)
    return values


def poisoned_output(shape, out_dtype: str):
    """An output of ``shape`` filled with NaN (bfloat16: NaN bits in uint16), so that a value
    the kernel leaves unwritten shows in the check."""
    import cupy

    c = cupy.empty(shape, dtype=cupy.uint16 if out_dtype == "bfloat16" else out_dtype)
    c.fill(0xFFFF if out_dtype == "bfloat16" else cupy.nan)
    return c


def float64_operands(spec, problem: Problem, operands: Mapping[str, Any]):
    """(a, b) in float64 as the tensor cores see them (float32 rounded to tf32 first)."""
    dtype = problem["dtype"]
    a, b = operands["a"], operands["b"]
    if dtype == "float32":
        a, b = to_tf32(a, spec.tf32_rounding), to_tf32(b, spec.tf32_rounding)
    return as_float64(a, dtype), as_float64(b, dtype)


def baseline_views(problem: Problem, operands: Mapping[str, Any]):
    """(torch, a, b, c, [0, *ends]) for a grouped family's baseline (a ``torch.matmul`` a group):
    PyTorch views of the operands and the group bounds read to the host; None without PyTorch,
    for float32 (tf32) or for an output dtype cuBLAS's call would not give."""
    try:
        import torch
    except ImportError:
        return None
    dtype = problem["dtype"]
    if dtype == "float32" or problem["out_dtype"] != dtype:
        return None
    a, b, c = (torch_view(operands[x], dtype) for x in ("a", "b", "c"))
    return torch, a, b, c, [0] + operands["ends"].get().tolist()


class GroupedGemm:
    """What the grouped families (listed before their kernel base) answer alike: the problem
    (``grouped_problem``'s fields), a space for one group of the average size, its operands (the
    ends in the bias slot), reference, baseline, FLOPs and bytes."""

    problem_fields = ((Field("groups", int, "problems in the group (experts)"),)
                      + tuple(Field("m", int, "rows of A and C, every group's together") if f.name == "m" else f
                              for f in GEMM_FIELDS))
    baseline_name = "cuBLAS, a call a group"

    def problem(self, groups: int, m: int, n: int, k: int, dtype: str = "bfloat16", layout: str = "NN",
                **kw) -> Problem:
        return grouped_problem(groups, m, n, k, dtype, layout, family=self.family, **kw)

    def record_problem(self, problem: Problem) -> Problem:
        """The problem of the top of the token count's bucket (``token_bucket``): a layer whose
        count changes every step meets one decision a bucket, not one a count; its kernel takes
        the count as an argument, and the decision's config runs any split of any count."""
        top = token_bucket(problem["m"])
        return problem if top == problem["m"] else problem.replace(m=top)

    def tiles(self, problem: Problem, bm: int, bn: int) -> int:
        return problem["groups"] * -(-rows_per_group(problem) // bm) * -(-problem["n"] // bn)

    def average_group(self, problem: Problem, family: str) -> Problem:
        """One group of the average size, as a plain GEMM problem of ``family``."""
        return tc_problem(family, rows_per_group(problem), problem["n"], problem["k"], problem["dtype"],
                          problem["layout"], problem["out_dtype"], problem["epilogue"], problem["align_a"],
                          problem["align_b"])

    def vendor_supported(self, problem: Problem) -> bool:
        return False          # cuBLAS has no grouped call of device-side row counts

    def grouped_recipe(self, recipe: list[dict], problem: Problem) -> list[dict]:
        """An ``arg_recipe`` with the group ends in the bias slot and the leading dimensions the
        problem fixes."""
        return ends_recipe(recipe, leading_dims(problem))

    def args(self, problem: Problem, config, operands: Mapping[str, Any]) -> list:
        return ends_args(self, problem, config, operands, leading_dims(problem))

    # ---- measurement (GPU) ---------------------------------------------------------------------
    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        import cupy

        rng = cupy.random.default_rng(seed)
        groups, m, n, k = (problem[x] for x in ("groups", "m", "n", "k"))
        out = problem["out_dtype"]
        values = random_values(rng, problem["dtype"])
        b = values((groups, k, n)) if problem["layout"][1] == "N" else values((groups, n, k)).swapaxes(1, 2)
        return {"a": values((m, k)), "b": b, "c": poisoned_output((m, n), out),
                "ends": cupy.asarray(split_rows(m, groups, seed)), "alpha": 1.0, "beta": 0.0}

    def reference(self, problem: Problem, operands: Mapping[str, Any]) -> dict[str, Any]:
        import cupy

        out = problem["out_dtype"]
        a64, b64 = float64_operands(self, problem, operands)
        ref = cupy.zeros((problem["m"], problem["n"]), dtype=cupy.float64)
        begin = 0
        for g, end in enumerate(operands["ends"].get().tolist()):
            ref[begin:end] = a64[begin:end] @ b64[g]
            begin = end
        ref *= operands.get("alpha", 1.0)
        beta = operands.get("beta", 0.0)
        if beta:
            ref += beta * as_float64(operands["c"], out)
        return {"c": epilogue_reference(problem, ref, None)}

    def baseline(self, problem: Problem, operands: Mapping[str, Any]):
        """One ``torch.matmul`` a group (cuBLAS), each into its rows of C, then the activation."""
        views = baseline_views(problem, operands)
        if views is None:
            return None
        torch, a, b, c, bounds = views
        pieces = [(a[s:e], b[g], c[s:e]) for g, (s, e) in enumerate(zip(bounds, bounds[1:])) if e > s]
        act = problem["epilogue"]
        stream = torch_stream_of_cupy()

        def run():
            with torch.cuda.stream(stream):
                for x, w, y in pieces:
                    torch.matmul(x, w, out=y)
                if act == "relu":
                    torch.relu_(c)
                elif act == "gelu":
                    c.copy_(torch.nn.functional.gelu(c))

        return run

    def flops(self, problem: Problem) -> float:
        return 2.0 * problem["m"] * problem["n"] * problem["k"]

    def bytes(self, problem: Problem) -> float:
        groups, m, n, k = (problem[x] for x in ("groups", "m", "n", "k"))
        size, out = ITEMSIZE[problem["dtype"]], TC_OUTPUTS[problem["out_dtype"]][1]
        return float(size * (m * k + groups * k * n) + out * m * n)


class GemmGrouped(GroupedGemm, MmaVariant):
    family = FAMILY
    template = "gemm/mma_grouped.cu.j2"

    # ---- space ---------------------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        """gemm_mma's space for one group of the average size."""
        return super().space(self.average_group(problem, "gemm_mma"), target).renamed("gemm_mma_", "gemm_grouped_")

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config, space) -> dict[str, Any]:
        ctx = super().context(problem, config, space)
        ctx.update(GROUPS=problem["groups"], BATCH_STRIDE_B=problem["k"] * problem["n"])
        return ctx

    def launch(self, problem: Problem, config) -> Launch:
        v = config.as_dict()
        blocks = row_tile_bound(problem, v["BM"]) * -(-problem["n"] // v["BN"])
        warps = (v["BM"] // v["WM"]) * (v["BN"] // v["WN"]) * v["WK"]
        return Launch((blocks, 1, 1), (32 * warps, 1, 1), tile_shape(problem["dtype"], problem["layout"], v)["SMEM"])

    def arg_recipe(self, problem: Problem, config) -> list[dict]:
        return self.grouped_recipe(super().arg_recipe(problem, config), problem)
