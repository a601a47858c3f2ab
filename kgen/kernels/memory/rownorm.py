"""The row-wise normalisations over the last axis of a rows x cols row-major array: ``softmax``
(max-subtracted, online where the row is read twice) and ``rmsnorm`` (``x * rsqrt(mean(x^2) +
eps) * weight``, eps given at the call). float32, float16 and bfloat16, computed in float.

Both are one kernel skeleton (``templates/memory/row_kernel.cuh``) with an Op of their own
(``softmax_op.cuh``, ``rmsnorm_op.cuh``): TPR consecutive threads own a row (a few threads or
a warp for short rows, several rows a block; up to a block of 1024 for long ones), read it
in 16-byte vectors where its alignment lets them, reduce over the row's threads and write.
The knobs:

- ``HOLD``: where the row waits between the reduction's two sides. ``regs``: in registers,
  read once (ITEMS is then the vectors a thread holds, the fewest that cover the row);
  ``smem``: in shared memory, read once; ``reread``: read again, from L2 mostly (ITEMS is then
  the vectors a thread has in flight a step); ``bulk`` (sm_90, one row a block, 16-byte
  vectors): in shared memory, copied there by the bulk-copy unit in ITEMS pieces, each on its
  own mbarrier, no thread holding a load in flight;
- ``TPR``: threads a row; ``BLOCK``: threads a block (``BLOCK / TPR`` rows);
- ``VEC``: elements a vector (up to 16 bytes); ``ITEMS``: vectors a thread, as above;
- ``SPLIT`` (sm_90): blocks a row, a thread-block cluster whose blocks each take a SPLIT-th of
  the row and meet through each other's shared memory (1: a row in one block), so that a few
  long rows (a batch of logits over a vocabulary) fill the device.

Rows and cols are kernel arguments: one binary serves every shape its config is valid for.

>>> rownorm_problem("softmax", 4, 1000, "bfloat16").key
'softmax|cols=1000|dtype=bfloat16|rows=4'
>>> from kgen.problem import Target
>>> spec = Softmax()
>>> spec.default_config(rownorm_problem("softmax", 32768, 8192, "bfloat16"), Target.h200(nvrtc="")).name
'softmax_regs_t256_b256_v8_i4'
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from kgen.errors import ShapeError
from kgen.fields import Field
from kgen.intmath import pow2_at_least
from kgen.kernels.memory.elements import FLOAT32_EPS, VECTOR_BYTES, element, vector_widths
from kgen.kernels.memory.family import (MemoryFamily, decode, dtype_field, element_context, poisoned,
                                        random_array, torch_view)
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import Launch, scalar_operand

HOLDS = ("regs", "smem", "reread", "bulk")
THREADS = tuple(1 << i for i in range(11))            # threads a row: 1 .. 1024
BLOCKS = (32, 64, 128, 256, 512, 1024)
HELD_ITEMS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64)
STREAM_ITEMS = (1, 2, 4, 8)
BULK_BAR_BYTES = 8 * max(STREAM_ITEMS)   # a bulk-copied row's mbarriers (one a piece), before its slot;
                                         # the template's KGEN_BULK_BAR_BYTES
ITEMS = tuple(sorted(set(HELD_ITEMS) | set(STREAM_ITEMS)))
MAX_COLS = (1 << 31) - 1024                           # cols is an int in the kernel
REGISTERS_PER_SM = 65536
HELD_TARGET = 4          # vectors a thread holds in the default (64 bytes in flight a thread)
SPLITS = (1, 2, 4, 8)    # blocks a row (a cluster: 8 is the portable limit)
SPLIT_PART = 1024        # body vectors a block takes at least when the default splits a row
SMEM_THREADS = 512       # threads of a row held in shared memory where rows are many (smem_threads)
BULK_PIECES = 4          # the default's pieces of a bulk-copied row (1 to 8 within 0.5 % on an H100)


def rownorm_problem(family: str, rows: int, cols: int, dtype: str) -> Problem:
    """The checked problem of ``family`` (softmax or rmsnorm) over rows x cols elements of ``dtype``."""
    element(dtype)
    for name, value in (("rows", rows), ("cols", cols)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ShapeError(f"{family}: {name}={value!r} is not an integer", remedy=f"pass {name} as an int")
    if int(rows) < 1 or int(cols) < 1:
        raise ShapeError(f"{family} over {rows} x {cols} elements: both must be >= 1 (empty arrays need no kernel)",
                         remedy="pass a non-empty array")
    if int(cols) > MAX_COLS:
        raise ShapeError(f"{family} over rows of {cols} elements: at most {MAX_COLS} are taken",
                         remedy="split the row, or normalise it in two steps")
    return Problem.of(family, rows=int(rows), cols=int(cols), dtype=dtype)


def edge_slots(vec: int, tpr: int) -> int:
    """Edge elements a thread holds: a row's head and tail hold fewer than ``vec`` each."""
    return 0 if vec == 1 else -(-2 * (vec - 1) // tpr)


def smem_threads(rows: int, target: Target) -> int:
    """Threads of a row held in shared memory where two rows fit an SM's: 512 where the rows
    give every SM two blocks, so that two fit its registers (a 1024-thread block of the 55-63
    registers a thread these take fills them: one an SM, its reduction and its loads never
    overlapping another's); 1024 where rows are fewer (one block an SM either way: all its
    threads). A row read twice keeps 1024: two blocks an SM put twice the rows in flight, and
    the second read finds fewer of them in the L2 (H200, 2048 x 40000 float32: 0.242 ms at 512
    against 0.196 at 1024)."""
    return SMEM_THREADS if rows >= 2 * target.sm_count else 1024


def held_budget(block: int) -> int:
    """Floats a thread may hold in registers at ``block`` threads a block: 40 at 1024 (64
    registers a thread), 72 below (the rest is addresses, the reduction and the output). A
    streamed step holds its vectors raw and as floats: half of it."""
    return min(72, REGISTERS_PER_SM // block * 5 // 8)


def row_bytes(cols: int, dtype: str) -> int:
    """Shared memory of one row held there: its elements, padded to whole 16-byte vectors."""
    size = element(dtype).size
    return -(-cols * size // VECTOR_BYTES) * VECTOR_BYTES


class RowNorm(MemoryFamily):
    """What softmax and RMSNorm share: the problem (rows, cols, dtype), the space, the default,
    the launch. Subclasses give the template's Op, the operands and the reference."""

    op = ""                  # the Op struct the template instantiates
    weighted = False         # a weight vector and eps follow x
    problem_fields = (
        Field("cols", int, "elements a row (the normalised axis)"),
        Field("rows", int, "rows (the product of the leading axes)", 1),
        dtype_field(),
    )

    # ---- the front door ----------------------------------------------------------------------------
    def request(self, target: Target, **values) -> tuple["RowNorm", Problem]:
        return self, rownorm_problem(self.family, values.get("rows", 1), values["cols"],
                                     values.get("dtype", "float32"))

    # ---- what the tuner searches ------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        rows, cols, dtype = problem["rows"], problem["cols"], problem["dtype"]
        smem_limit = target.smem_per_block_optin

        def part(v) -> int:
            """Body vectors of a block's part of the row (the whole row without a split)."""
            return -(-(cols // v["VEC"]) // v["SPLIT"])

        def held_items(v) -> int:
            """The fewest held ITEMS covering a block's part of the row (0: none covers it)."""
            need = -(-part(v) // v["TPR"])
            return next((i for i in HELD_ITEMS if i >= need), 0)

        def in_flight(v) -> int:
            """Vectors a thread holds (regs) or has in flight a step (bulk: ITEMS are pieces, two a step)."""
            return 2 if v["HOLD"] == "bulk" else v["ITEMS"]

        def held(v) -> bool:
            """What a thread holds (regs) or has in flight, raw and as floats, fits its registers."""
            if v["HOLD"] == "regs":
                return v["ITEMS"] * v["VEC"] + edge_slots(v["VEC"], v["TPR"]) <= held_budget(v["BLOCK"])
            return in_flight(v) * v["VEC"] <= held_budget(v["BLOCK"]) // 2

        constraints = [
            Constraint("a vector is no longer than the row", lambda v: v["VEC"] <= cols, ("VEC",)),
            Constraint("every thread of a row has a vector",
                       lambda v: v["TPR"] <= pow2_at_least(-(-cols // v["VEC"] // v["SPLIT"])), ("VEC", "TPR", "SPLIT")),
            Constraint("a row split over a cluster (sm_90), one row a block, every block with a whole vector a thread",
                       lambda v: v["SPLIT"] == 1 or (target.cc >= (9, 0) and v["BLOCK"] == v["TPR"]
                                                     and (cols // v["VEC"]) // v["SPLIT"] >= v["TPR"]),
                       ("VEC", "TPR", "BLOCK", "SPLIT")),
            Constraint("a block holds whole rows", lambda v: v["BLOCK"] % v["TPR"] == 0, ("TPR", "BLOCK")),
            Constraint("a block holds no more rows than there are",
                       lambda v: v["BLOCK"] <= max(32, v["TPR"] * pow2_at_least(rows)), ("TPR", "BLOCK")),
            Constraint("held in registers: ITEMS are the fewest that cover the row",
                       lambda v: v["HOLD"] != "regs" or v["ITEMS"] == held_items(v),
                       ("VEC", "TPR", "HOLD", "ITEMS", "SPLIT")),
            Constraint("streamed: ITEMS vectors in flight, a step no longer than the row",
                       lambda v: v["HOLD"] == "regs" or (v["ITEMS"] in STREAM_ITEMS and
                                                         (v["ITEMS"] == 1 or v["TPR"] * v["ITEMS"] * v["VEC"] <= cols)),
                       ("VEC", "TPR", "HOLD", "ITEMS")),
            Constraint("the values a thread holds fit its registers",
                       held, ("VEC", "TPR", "BLOCK", "HOLD", "ITEMS")),
            Constraint("held in shared memory: the block's rows fit it",
                       lambda v: v["HOLD"] not in ("smem", "bulk") or
                       self._shared_bytes(v, cols, dtype) + self._scratch_bytes(v) <= smem_limit,
                       ("VEC", "TPR", "BLOCK", "HOLD")),
            Constraint("bulk-copied (sm_90): one whole row a block, 16-byte vectors",
                       lambda v: v["HOLD"] != "bulk" or (target.cc >= (9, 0) and v["BLOCK"] == v["TPR"]
                                                         and v["SPLIT"] == 1
                                                         and v["VEC"] * element(dtype).size == VECTOR_BYTES),
                       ("VEC", "TPR", "BLOCK", "HOLD", "SPLIT")),
        ]
        return Space([Param("HOLD", HOLDS), Param("VEC", vector_widths(dtype)), Param("TPR", THREADS),
                      Param("BLOCK", BLOCKS), Param("ITEMS", ITEMS), Param("SPLIT", SPLITS, default=1)],
                     constraints=constraints,
                     derived={"ROWS": lambda v: v["BLOCK"] // v["TPR"], "SCRATCH": self._scratch_slots},
                     namer=lambda v: (f"{self.family}_{v['HOLD']}_t{v['TPR']}_b{v['BLOCK']}_v{v['VEC']}"
                                      f"_i{v['ITEMS']}" + (f"_s{v['SPLIT']}" if v["SPLIT"] > 1 else "")))

    @staticmethod
    def _shared_bytes(values: Mapping[str, Any], cols: int, dtype: str) -> int:
        """Dynamic shared memory: the block's rows where they are held there, and a bulk-copied
        row's barriers."""
        if values["HOLD"] not in ("smem", "bulk"):
            return 0
        rows = values["BLOCK"] // values["TPR"] * row_bytes(cols, dtype)
        return rows + (BULK_BAR_BYTES if values["HOLD"] == "bulk" else 0)

    @staticmethod
    def _scratch_slots(values: Mapping[str, Any]) -> int:
        """Shared slots of the reduction (one a warp where a row has several), then SPLIT + 1
        for a split row's blocks' totals."""
        reduce = values["BLOCK"] // 32 if values["TPR"] > 32 else 0
        split = values.get("SPLIT", 1)
        return max(1, reduce + (split + 1 if split > 1 else 0))

    def _scratch_bytes(self, values: Mapping[str, Any]) -> int:
        """Static shared memory of the reduction: a slot (8 bytes at most) per warp, and a split row's."""
        return 8 * self._scratch_slots(values)

    def default_config(self, problem: Problem, target: Target) -> Config:
        """The model's pick. 16-byte vectors (narrower for rows under four of them). A row that
        fits is held in registers, HELD_TARGET vectors a thread (64 bytes in flight): TPR the
        power of two that gives that, doubled (fewer vectors each) while the problem has too few
        threads to fill the device, 256 threads a block (several rows for short ones). A row
        too long for 1024 threads' registers is held in shared memory where it fits a block's:
        bulk-copied in BULK_PIECES pieces (sm_90, 16-byte vectors), else copied by the threads
        where two blocks of a row fit an SM; 512 threads a row where two fit and rows are many
        (``smem_threads``), else 1024. A longer row is read twice (1024 threads, two vectors
        each in flight). Where half the SMs or more would have no row, a row is split over a
        cluster of blocks (sm_90), doubling while the rows' blocks stay within the SMs and each
        block keeps SPLIT_PART vectors."""
        rows, cols, dtype = problem["rows"], problem["cols"], problem["dtype"]
        space = self.space(problem, target)
        widths = vector_widths(dtype)
        vec = max([w for w in widths if 4 * w <= cols] or [1])
        body = max(1, cols // vec)
        split = 1
        while (target.cc >= (9, 0) and 2 * split <= SPLITS[-1] and rows * 2 * split <= target.sm_count
               and body >= 2 * split * SPLIT_PART):
            split *= 2
        part = -(-body // split)
        tpr = min(1024, pow2_at_least(-(-part // HELD_TARGET)))
        while tpr < 1024 and tpr < part and rows * split * tpr < target.sm_count * 1024:
            tpr *= 2
        block = tpr if split > 1 else max(tpr, min(256, max(32, tpr * pow2_at_least(rows))))
        items = next((i for i in HELD_ITEMS if i * tpr >= part), HELD_ITEMS[-1])
        scratch = self._scratch_bytes({"BLOCK": 1024, "TPR": 1024})
        held = row_bytes(cols, dtype) + scratch        # a block's shared memory, its row held there
        two_fit = 2 * held <= target.smem_per_sm
        smem_tpr = smem_threads(rows, target) if two_fit else 1024
        bulk_tpr = smem_tpr if 2 * (held + BULK_BAR_BYTES) <= target.smem_per_sm else 1024
        candidates = [
            {"HOLD": "regs", "VEC": vec, "TPR": tpr, "BLOCK": block, "ITEMS": items, "SPLIT": split},
            {"HOLD": "reread", "VEC": vec, "TPR": 1024, "BLOCK": 1024, "ITEMS": 2, "SPLIT": split},
            {"HOLD": "bulk", "VEC": vec, "TPR": bulk_tpr, "BLOCK": bulk_tpr, "ITEMS": BULK_PIECES, "SPLIT": 1},
            {"HOLD": "smem" if two_fit else "reread", "VEC": vec, "TPR": smem_tpr if two_fit else 1024,
             "BLOCK": smem_tpr if two_fit else 1024, "ITEMS": 2, "SPLIT": 1},
            {"HOLD": "reread", "VEC": vec, "TPR": 1024, "BLOCK": 1024, "ITEMS": 2, "SPLIT": 1},
            {"HOLD": "reread", "VEC": vec, "TPR": 1024, "BLOCK": 1024, "ITEMS": 1, "SPLIT": 1},
        ]
        if split == 1:
            del candidates[1]              # the streamed split is there for rows too long to hold
        return self.first_valid(space, candidates, problem)

    def model_picks(self, problem: Problem, target: Target, count: int) -> list[Config]:
        """The default, then its neighbours: twice and half its threads a row (held configs with
        the ITEMS that cover the row), half and twice its split where rows are fewer than SMs,
        every other place to hold the row with 512 and 1024 threads, then the space's configs in
        order."""
        space = self.space(problem, target)
        first = self.default_config(problem, target)
        d = first.as_dict()
        body = max(1, problem["cols"] // d["VEC"])
        part = -(-body // d["SPLIT"])
        candidates = []
        for tpr in (d["TPR"] * 2, d["TPR"] // 2, d["TPR"] * 4):
            items = next((i for i in HELD_ITEMS if i * tpr >= part), HELD_ITEMS[-1])
            block = tpr if d["SPLIT"] > 1 else max(tpr, d["BLOCK"])
            candidates.append({**d, "HOLD": "regs", "TPR": tpr, "BLOCK": block, "ITEMS": items})
        few_rows = problem["rows"] < target.sm_count
        for split in (d["SPLIT"] // 2, d["SPLIT"] * 2):     # the neighbouring splits where rows are few
            if split in SPLITS and (d["SPLIT"] > 1 or few_rows):
                share = -(-body // split)
                tpr = min(1024, pow2_at_least(-(-share // HELD_TARGET)))
                items = next((i for i in HELD_ITEMS if i * tpr >= share), HELD_ITEMS[-1])
                candidates.append({**d, "HOLD": "regs", "TPR": tpr, "BLOCK": tpr if split > 1 else d["BLOCK"],
                                   "ITEMS": items, "SPLIT": split})
        for tpr in (512, 1024):
            for items in (2, 4, 1):
                for hold in HOLDS[1:]:
                    candidates.append({**d, "HOLD": hold, "TPR": tpr, "BLOCK": tpr, "ITEMS": items})
        picks = [first]
        for values in candidates:
            if len(picks) >= count:
                break
            if space.is_valid(values) and space.make(values) not in picks:
                picks.append(space.make(values))
        for config in space.configs():
            if len(picks) >= count:
                break
            if config not in picks:
                picks.append(config)
        return picks[:count]

    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        ctx = super().context(problem, config, space)
        ctx.update(element_context("x", problem["dtype"]))
        ctx["op"] = self.op
        ctx["weighted"] = self.weighted
        return ctx

    # ---- how it runs ------------------------------------------------------------------------------
    def launch(self, problem: Problem, config: Config) -> Launch:
        rows_a_block = config["BLOCK"] // config["TPR"]
        blocks = -(-problem["rows"] // rows_a_block) * config["SPLIT"]
        shared = self._shared_bytes(config, problem["cols"], problem["dtype"])
        return Launch((blocks, 1, 1), (config["BLOCK"], 1, 1), shared)

    def sizes(self, problem: Problem) -> list[Any]:
        return [np.int64(problem["rows"]), np.int32(problem["cols"])]

    def bytes(self, problem: Problem) -> float:
        size = element(problem["dtype"]).size
        return float(2 * problem["rows"] * problem["cols"] * size + (problem["cols"] * size if self.weighted else 0))

    # ---- how it is checked ------------------------------------------------------------------------
    def output_tolerance(self, problem: Problem, name: str) -> float:
        """The output's rounding, or a float sum's error over the row where that is larger: about
        sqrt(cols) roundings of float32 (a config with few threads a row sums long runs in order)."""
        return max(element(problem["dtype"]).tolerance, 1e-5, 4 * FLOAT32_EPS * math.sqrt(problem["cols"]))

    def _x(self, problem: Problem, seed: int):
        return random_array((problem["rows"], problem["cols"]), problem["dtype"], seed)

    def _decoded(self, problem: Problem, array):
        return decode(array, problem["dtype"]).reshape(problem["rows"], problem["cols"])


class Softmax(RowNorm):
    family = "softmax"
    template = "memory/softmax.cu.j2"
    op = "KgenSoftmax"

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]):
        return [ops["x"], ops["out"], *self.sizes(problem)]

    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        return {"x": self._x(problem, seed), "out": poisoned((problem["rows"], problem["cols"]), problem["dtype"])}

    def reference(self, problem: Problem, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """exp(x - max) / sum in float64 (a row with NaN or +Inf, or all -Inf, gives NaN)."""
        return {"out": softmax_reference(self._decoded(problem, arrays["x"]))}

    def torch_baseline(self, problem: Problem, operands: Mapping[str, Any]):
        import torch

        x = torch_view(operands["x"], problem["dtype"]).reshape(problem["rows"], problem["cols"])
        return lambda: torch.softmax(x, -1)


class RmsNorm(RowNorm):
    family = "rmsnorm"
    template = "memory/rmsnorm.cu.j2"
    op = "KgenRmsnorm"
    weighted = True

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]):
        return [ops["x"], ops["weight"], ops["out"], *self.sizes(problem), scalar_operand(ops["eps"])]

    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        return {"x": self._x(problem, seed),
                "weight": random_array((problem["cols"],), problem["dtype"], seed + 1, 0.5, 1.5),
                "eps": 1e-6,
                "out": poisoned((problem["rows"], problem["cols"]), problem["dtype"])}

    def reference(self, problem: Problem, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """x * rsqrt(mean(x^2) + eps) * weight in float64."""
        w = decode(arrays["weight"], problem["dtype"])
        return {"out": rmsnorm_reference(self._decoded(problem, arrays["x"]), w, float(arrays["eps"]))}

    def torch_baseline(self, problem: Problem, operands: Mapping[str, Any]):
        import torch

        x = torch_view(operands["x"], problem["dtype"]).reshape(problem["rows"], problem["cols"])
        w = torch_view(operands["weight"], problem["dtype"])
        eps = float(operands["eps"])
        rms_norm = getattr(torch.nn.functional, "rms_norm", None)
        if rms_norm is not None:
            return lambda: rms_norm(x, (problem["cols"],), w, eps)
        return lambda: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def softmax_reference(x):
    """Softmax over the last axis of a float64 CuPy (or NumPy) array, max-subtracted."""
    with np.errstate(invalid="ignore", over="ignore"):       # NaN and Inf follow IEEE, quietly
        e = _array_module(x).exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _array_module(a):
    """CuPy for a CuPy array, else NumPy."""
    module = type(a).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return cupy
    return np


def rmsnorm_reference(x, w, eps: float):
    """RMSNorm over the last axis of float64 arrays: x * rsqrt(mean(x^2) + eps) * w."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return x / (((x * x).mean(axis=-1, keepdims=True) + eps) ** 0.5) * w
