"""Batched GEMM on mma.sync: ``C[b] = act(alpha * op(A[b]) @ op(B[b]) + beta * C[b] + bias)`` for
b < batch, every matrix dense, in one launch (one batch per grid row).

A problem is a tensor-core GEMM problem of one batch (``tc_problem``'s fields) with ``batch``
and ``broadcast`` (``none``; ``a`` or ``b``: one matrix of that operand serves every batch).
The kernel is ``gemm/mma.cu.j2``'s with A, B and C moved to the block's batch
(``templates/gemm/mma_batched.cu.j2``), so the space is ``gemm_mma``'s; the default tile is
chosen as ``gemm_mma``'s, counting the tiles of every batch. cuBLAS's batched GEMM (through
``torch.matmul`` on the 3-D operands) is the vendor candidate, as for 2-D GEMM: a tune times it,
dispatch takes it where it is faster and for untuned problems (``KGEN_VENDOR=0``: never).

>>> from kgen.problem import Target
>>> p = batched_problem(64, 512, 512, 64, "bfloat16", "NN")
>>> p.key
'gemm_batched|align_a=8|align_b=8|batch=64|broadcast=none|dtype=bfloat16|epilogue=none|k=64|layout=NN|m=512|n=512|out_dtype=bfloat16|precision=native'
>>> GemmBatched().default_config(p, Target.h200()).name
'gemm_batched_bf16_nn_128x128x32_w64x64_s3_va8_vb8_g1_k1_mb1_lp1'
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kgen.arrays import device_pointer
from kgen.errors import InputError, ShapeError
from kgen.fields import Field
from kgen.kernels.gemm.dtypes import ITEMSIZE, TC_OUTPUTS, epilogue_parts
from kgen.kernels.gemm.family import FIELDS as GEMM_FIELDS
from kgen.kernels.gemm.mma_variant import MmaVariant
from kgen.kernels.gemm.mma_geometry import tile_shape
from kgen.kernels.gemm.problem import tc_problem
from kgen.kernels.gemm.tc import to_bf16
from kgen.problem import Problem, Target
from kgen.space import Space
from kgen.spec import Launch

FAMILY = "gemm_batched"
BROADCASTS = ("none", "a", "b")
MAX_BATCH = 65535            # the grid's second dimension
# the families that run a batched request, most preferred first (``route``)
ROUTES = ("gemm_batched_wgmma", FAMILY)


def batched_problem(batch: int, m: int, n: int, k: int, dtype: str = "bfloat16", layout: str = "NN",
                    broadcast: str = "none", family: str = FAMILY, **kw) -> Problem:
    """A batched GEMM problem of ``family`` (checked); ``kw`` as ``tc_problem`` (out_dtype,
    epilogue)."""
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or not 1 <= batch <= MAX_BATCH:
        raise ShapeError(f"batch={batch!r} must be an integer in 1..{MAX_BATCH}",
                         remedy="split a larger batch into calls")
    if broadcast not in BROADCASTS:
        raise InputError(f"broadcast={broadcast!r} is not one of {BROADCASTS}")
    if min(m, n, k) < 1:
        raise ShapeError(f"sizes must be >= 1 (got m={m}, n={n}, k={k})")
    one = tc_problem(family, m, n, k, dtype, layout, **kw)
    return Problem.of(family, **dict(one.params), batch=int(batch), broadcast=broadcast)


def route(target: Target, problem: Problem) -> tuple[tuple[Any, Problem], ...]:
    """(spec, problem) of every family that can run the batched ``problem`` on ``target``, most
    preferred first: wgmma (Hopper, 16-bit, TMA-readable operands), then mma.sync (any)."""
    from kgen.kernels.gemm.route import families_that_run

    return families_that_run(target, problem, ROUTES)


def batch_strides(problem: Problem) -> tuple[int, int, int]:
    """Elements between consecutive batches of A, B and C (0 for a broadcast operand)."""
    m, n, k, broadcast = problem["m"], problem["n"], problem["k"], problem["broadcast"]
    return (0 if broadcast == "a" else m * k), (0 if broadcast == "b" else k * n), m * n


def leading_dims(problem: Problem) -> tuple[int, int, int]:
    """lda, ldb, ldc of dense matrices in the problem's layout."""
    m, n, k, layout = problem["m"], problem["n"], problem["k"], problem["layout"]
    return (k if layout[0] == "N" else m), (n if layout[1] == "N" else k), n


class BatchedGemm:
    """What the batched families (listed before their kernel base) answer alike: the problem
    (``batched_problem``'s fields), its operands, FLOPs and bytes, the arguments of a dense
    batch (the leading dimensions fixed by the shape)."""

    problem_fields = (Field("batch", int, "matrices in the batch"),) + GEMM_FIELDS + (
        Field("broadcast", str, "an operand of one matrix for every batch", "none", BROADCASTS),)

    def problem(self, batch: int, m: int, n: int, k: int, dtype: str = "bfloat16", layout: str = "NN",
                **kw) -> Problem:
        return batched_problem(batch, m, n, k, dtype, layout, family=self.family, **kw)

    def tiles(self, problem: Problem, bm: int, bn: int) -> int:
        return problem["batch"] * -(-problem["m"] // bm) * -(-problem["n"] // bn)

    def args(self, problem: Problem, config, operands: Mapping[str, Any]) -> list:
        build = self.arg_builder(problem, config, leading_dims(problem))
        bias = operands.get("bias")
        return list(build(*(device_pointer(operands[x], x) for x in ("a", "b", "c")),
                          device_pointer(bias, "bias") if bias is not None else 0,
                          operands.get("alpha", 1.0), operands.get("beta", 0.0)))

    def dense_recipe(self, recipe: list[dict], problem: Problem) -> list[dict]:
        """An ``arg_recipe`` with the leading dimensions the problem fixes (a dense batch)."""
        lds = dict(zip("abc", leading_dims(problem)))
        return [{"value": max(lds[item["ld"]], 1), "type": "int64"} if "ld" in item else item for item in recipe]

    # ---- measurement (GPU) ---------------------------------------------------------------------
    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        import cupy

        rng = cupy.random.default_rng(seed)
        batch, m, n, k, dtype, layout = (problem[x] for x in ("batch", "m", "n", "k", "dtype", "layout"))
        out, broadcast = problem["out_dtype"], problem["broadcast"]

        def values(shape, dt):
            x = rng.random(shape, dtype=cupy.float32) * 2 - 1
            return to_bf16(x) if dt == "bfloat16" else x.astype(dt)

        def operand(name, rows, cols, transposed):
            shape = (cols, rows) if transposed else (rows, cols)
            x = values(shape if broadcast == name else (batch, *shape), dtype)
            return x.swapaxes(-1, -2) if transposed else x

        c = cupy.empty((batch, m, n), dtype=cupy.uint16 if out == "bfloat16" else out)
        c.fill(0xFFFF if out == "bfloat16" else cupy.nan)
        has_bias, _ = epilogue_parts(problem)
        return {"a": operand("a", m, k, layout[0] == "T"), "b": operand("b", k, n, layout[1] == "T"), "c": c,
                "bias": values((n,), out) if has_bias else None, "alpha": 1.0, "beta": 0.0}

    def flops(self, problem: Problem) -> float:
        return 2.0 * problem["batch"] * problem["m"] * problem["n"] * problem["k"]

    def bytes(self, problem: Problem) -> float:
        batch, m, n, k = (problem[x] for x in ("batch", "m", "n", "k"))
        size, out = ITEMSIZE[problem["dtype"]], TC_OUTPUTS[problem["out_dtype"]][1]
        a = m * k * (1 if problem["broadcast"] == "a" else batch)
        b = k * n * (1 if problem["broadcast"] == "b" else batch)
        return float(size * (a + b) + out * batch * m * n)


class GemmBatched(BatchedGemm, MmaVariant):
    family = FAMILY
    template = "gemm/mma_batched.cu.j2"

    # ---- space ---------------------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        return super().space(problem, target).renamed("gemm_mma_", "gemm_batched_")

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config, space) -> dict[str, Any]:
        ctx = super().context(problem, config, space)
        ctx.update(zip(("BATCH_STRIDE_A", "BATCH_STRIDE_B", "BATCH_STRIDE_C"), batch_strides(problem)))
        return ctx

    def launch(self, problem: Problem, config) -> Launch:
        v = config.as_dict()
        tiles = -(-problem["m"] // v["BM"]) * -(-problem["n"] // v["BN"])
        warps = (v["BM"] // v["WM"]) * (v["BN"] // v["WN"]) * v["WK"]
        return Launch((tiles, problem["batch"], 1), (32 * warps, 1, 1),
                      tile_shape(problem["dtype"], problem["layout"], v)["SMEM"])

    def arg_recipe(self, problem: Problem, config) -> list[dict]:
        """GEMM's arguments, with the leading dimensions the problem fixes (a dense batch)."""
        return self.dense_recipe(super().arg_recipe(problem, config), problem)
