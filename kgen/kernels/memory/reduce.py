"""The reduce family: sum, mean, max, min or argmax over the last axis of a rows x cols
row-major array (every element at once: rows 1, cols n), float32, float16 or bfloat16 read
and accumulated in float32.

Outputs: one value per row, of the input's dtype for sum, mean, max and min (as PyTorch
returns them; the float32 sum is rounded once, at the end), int64 for argmax (the first index
of the largest value; a NaN counts as the largest, as in PyTorch and NumPy). max, min and
argmax compare exactly, so every config gives the same result; a sum's rounding depends on
its config's order of additions, which is fixed (the same bits every run) for every strategy
but ``split_atomic``. ``deterministic=1`` problems, which rule that one out, are reproducible
run to run for the config dispatch chooses; another config (a tune's best) may round otherwise.

How rows map to the GPU is the ``STRATEGY`` knob:

- ``warp``: ``LANES`` lanes of a warp per row (1 to 32; a warp takes 32 / LANES rows),
  reduced with shuffles: short rows;
- ``block``: a block per row, warps reduced through shared memory;
- ``split``: few long rows, each cut into ``SPLIT`` chunks, a block each, in one launch: each
  block writes its partial to a workspace and takes a ticket from its row's counter; the
  block with the last ticket reduces the partials in a fixed order, writes the row's result
  and sets the counter back to zero. The same inputs give the same bits every run.
- ``split_atomic``: the same, but each block folds its partial into the row's accumulator
  with an atomic (a float atomicAdd for sums; order-preserving integer atomicMax for max, min
  and argmax) and the last block reads it out and clears it. A sum's bits then depend on
  the order the blocks finish: ``deterministic=1`` problems rule it out for sum and mean.

The other knobs: ``VEC`` elements per vector load (up to 16 bytes; the elements of a row or
chunk before its first VEC-aligned address, and after its last whole vector, are read one
by one), ``ITEMS`` vectors per thread in flight per step, ``BLOCK`` threads a block.

The workspace is one operand of ``WORKSPACE_BYTES``: the rows' ticket counters and atomic
accumulators (its first ``STATE_BYTES``), which must start zeroed and which every launch
leaves zeroed again, then the partials, which a launch writes before it reads them. Launches
that may run at the same time need one each (``kgen.reduce`` keeps one per device and stream).

>>> reduce_problem("argmax", 7, 4097, "bfloat16").key
'reduce|cols=4097|deterministic=0|dtype=bfloat16|op=argmax|rows=7'
>>> reduce_problem("max", 1, 10, "float32", deterministic=True)["deterministic"]   # max is exact anyway
0
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kgen.errors import InputError, ShapeError
from kgen.fields import Field
from kgen.kernels.memory.elements import element, vector_widths
from kgen.kernels.memory.family import MemoryFamily, decode, dtype_field, element_context, poisoned, random_array, \
    torch_view
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import Launch

OPS = ("sum", "mean", "max", "min", "argmax")
SUMS = ("sum", "mean")                  # the ops whose bits depend on the order of additions
STRATEGIES = ("warp", "block", "split", "split_atomic")
SPLITTING = ("split", "split_atomic")
BLOCKS = (64, 128, 256, 512, 1024)
ITEMS = (1, 2, 4, 8)
LANES = (1, 2, 4, 8, 16, 32)
SPLITS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)

LANE_MAX_COLS = 128                     # fewer than 32 lanes a row only for rows of <= this x LANES
SPLIT_ROWS_PER_SM = 4                   # a row split over blocks only when rows <= this x SMs
SLOTS = 4096                            # partials the workspace holds: rows x SPLIT <= SLOTS
COUNTERS = SLOTS // 2                   # rows a split config may have (SPLIT >= 2)
STATE_BYTES = COUNTERS * 4 + COUNTERS * 8    # counters, accumulators: zero between launches
WORKSPACE_BYTES = STATE_BYTES + SLOTS * 4 + SLOTS * 8
ARGMAX_ATOMIC_COLS = (1 << 32) - 1      # an index packed in the low 32 bits of a 64-bit atomic
_SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def reduce_problem(op: str, rows: int, cols: int, dtype: str, deterministic: bool = False) -> Problem:
    """The checked problem of ``op`` over each of ``rows`` rows of ``cols`` elements of ``dtype``.
    ``deterministic`` is kept (as 1) only for sum and mean, the ops it changes."""
    if op not in OPS:
        raise InputError(f"reduce op {op!r} is not one kgen has", remedy=f"use one of {', '.join(OPS)}")
    element(dtype)
    for name, value in (("rows", rows), ("cols", cols)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ShapeError(f"{name} is {value!r}; it must be an integer", remedy=f"pass {name} as an int")
    if rows < 1 or cols < 1:
        raise ShapeError(f"the input is {rows} x {cols}; both must be >= 1 (an empty reduction needs no kernel)",
                         remedy="kgen.reduce answers empty arrays itself; pass rows and cols of 1 or more")
    return Problem.of("reduce", op=op, rows=int(rows), cols=int(cols), dtype=dtype,
                      deterministic=int(bool(deterministic) and op in SUMS))


def output_dtype_of(op: str, dtype: str) -> str:
    """The dtype of a reduction's result: int64 for argmax, the input's otherwise."""
    return "int64" if op == "argmax" else dtype


def _group(values: Mapping[str, Any]) -> int:
    """Threads that reduce one segment of a row together."""
    return values["LANES"] if values["STRATEGY"] == "warp" else values["BLOCK"]


class Reduce(MemoryFamily):
    family = "reduce"
    template = "memory/reduce.cu.j2"
    problem_fields = (
        Field("op", str, "what each row reduces to", "sum", OPS),
        Field("cols", int, "elements per row (all of them to reduce a whole array)"),
        Field("rows", int, "rows, each reduced to one value", 1),
        dtype_field(help="input element type (the output's too, but int64 for argmax)"),
        Field("deterministic", bool, "the same bits on every run (no float atomics in sums)", False),
    )

    # ---- the front door ----------------------------------------------------------------------------
    def request(self, target: Target, **values) -> tuple["Reduce", Problem]:
        return self, reduce_problem(values.get("op", "sum"), values.get("rows", 1), values["cols"],
                                    values.get("dtype", "float32"), bool(values.get("deterministic", False)))

    def output_dtype(self, problem: Problem, name: str) -> str:
        return output_dtype_of(problem["op"], problem["dtype"])

    # ---- what the tuner searches ------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        op, rows, cols = problem["op"], problem["rows"], problem["cols"]
        split_rows = SPLIT_ROWS_PER_SM * target.sm_count
        short = _SHORT[problem["dtype"]]

        def namer(v):
            lanes = f"_l{v['LANES']}" if v["STRATEGY"] == "warp" else ""
            tail = f"_s{v['SPLIT']}" if v["STRATEGY"] in SPLITTING else ""
            return f"reduce_{op}_{short}_{v['STRATEGY']}{lanes}_b{v['BLOCK']}_v{v['VEC']}_i{v['ITEMS']}{tail}"

        def segment(v) -> int:
            return -(-cols // v["SPLIT"])

        constraints = [
            Constraint("SPLIT > 1 exactly for the split strategies",
                       lambda v: (v["SPLIT"] > 1) == (v["STRATEGY"] in SPLITTING), ("STRATEGY", "SPLIT")),
            Constraint(f"a row is split only when rows <= {SPLIT_ROWS_PER_SM} x SMs",
                       lambda v: v["STRATEGY"] not in SPLITTING or rows <= split_rows, ("STRATEGY",)),
            Constraint(f"rows x SPLIT <= {SLOTS} (the workspace's partials)",
                       lambda v: v["SPLIT"] == 1 or rows * v["SPLIT"] <= SLOTS, ("SPLIT",)),
            Constraint("split: each block has at least one full step",
                       lambda v: v["STRATEGY"] not in SPLITTING
                       or cols >= v["SPLIT"] * v["BLOCK"] * v["VEC"] * v["ITEMS"],
                       ("STRATEGY", "BLOCK", "VEC", "ITEMS", "SPLIT")),
            Constraint("no float atomics in a deterministic sum",
                       lambda v: v["STRATEGY"] != "split_atomic" or not problem["deterministic"], ("STRATEGY",)),
            Constraint("split_atomic argmax: indices below 2^32 - 1",
                       lambda v: v["STRATEGY"] != "split_atomic" or op != "argmax" or cols < ARGMAX_ATOMIC_COLS,
                       ("STRATEGY",)),
            Constraint("LANES is 32 but for the warp strategy",
                       lambda v: v["STRATEGY"] == "warp" or v["LANES"] == 32, ("STRATEGY", "LANES")),
            Constraint(f"fewer than 32 lanes a row only for rows of <= {LANE_MAX_COLS} x LANES elements",
                       lambda v: v["STRATEGY"] != "warp" or v["LANES"] == 32 or cols <= LANE_MAX_COLS * v["LANES"],
                       ("STRATEGY", "LANES")),
            Constraint("warp and block: at least half the threads of a row read a vector",
                       lambda v: v["STRATEGY"] not in ("warp", "block") or _group(v) * v["VEC"] < 2 * cols,
                       ("STRATEGY", "LANES", "BLOCK", "VEC")),
            Constraint("a vector fits in a row", lambda v: v["VEC"] <= cols, ("VEC",)),
            Constraint("ITEMS > 1 only where a step of the group fits its segment",
                       lambda v: v["ITEMS"] == 1 or _group(v) * v["VEC"] * v["ITEMS"] <= segment(v),
                       ("STRATEGY", "LANES", "BLOCK", "VEC", "ITEMS", "SPLIT")),
        ]
        return Space([Param("STRATEGY", STRATEGIES), Param("LANES", LANES), Param("BLOCK", BLOCKS),
                      Param("VEC", vector_widths(problem["dtype"])), Param("ITEMS", ITEMS),
                      Param("SPLIT", SPLITS)], constraints=constraints, namer=namer)

    def default_config(self, problem: Problem, target: Target) -> Config:
        """The model's pick (``_model_values``), else the first valid of a few safe ones."""
        space = self.space(problem, target)
        return self.first_valid(space, self._candidates(problem, target), problem)

    def model_picks(self, problem: Problem, target: Target, count: int) -> list[Config]:
        """The default, then it with other ITEMS, then its other neighbours, for a search to try first."""
        space = self.space(problem, target)
        first = self.default_config(problem, target)
        picks = [first]
        for values in ({**first.as_dict(), "ITEMS": i} for i in ITEMS):
            if len(picks) < count and space.is_valid(values) and space.make(values) not in picks:
                picks.append(space.make(values))
        for config in space.neighbours(first.as_dict()):
            if len(picks) < count and config not in picks:
                picks.append(config)
        return picks[:count]

    def _candidates(self, problem: Problem, target: Target) -> list[dict[str, Any]]:
        pick = _model_values(problem, target)
        widest = max(vector_widths(problem["dtype"]))
        return [pick, {**pick, "ITEMS": 1},
                {"STRATEGY": "warp", "LANES": 32, "BLOCK": 256, "VEC": widest, "ITEMS": 1, "SPLIT": 1},
                {"STRATEGY": "warp", "LANES": 32, "BLOCK": 256, "VEC": 1, "ITEMS": 1, "SPLIT": 1}]

    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        ctx = super().context(problem, config, space)
        ctx.update(element_context("in", problem["dtype"]))
        out = self.output_dtype(problem, "out")
        ctx.update(element_context("out", out) if out != "int64"
                   else {"out_t": "long long", "out_load": "", "out_store": ""})
        ctx["group"] = _group(config.as_dict())
        ctx.update(counters=COUNTERS, slots=SLOTS)
        for name in ("rows", "cols", "deterministic"):      # sizes are arguments: one kernel serves every size
            ctx.pop(name, None)
        return ctx

    # ---- how it runs ------------------------------------------------------------------------------
    def launch(self, problem: Problem, config: Config) -> Launch:
        rows, block, strategy = problem["rows"], config["BLOCK"], config["STRATEGY"]
        if strategy in SPLITTING:
            return Launch((config["SPLIT"], rows, 1), (block, 1, 1))
        per_block = block // config["LANES"] if strategy == "warp" else 1
        return Launch((max(1, min(-(-rows // per_block), 2**31 - 1)), 1, 1), (block, 1, 1))

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]):
        return [ops["x"], ops["out"], ops["workspace"], np.int64(problem["rows"]), np.int64(problem["cols"])]

    def bytes(self, problem: Problem) -> float:
        out = self.output_dtype(problem, "out")
        out_size = 8 if out == "int64" else element(out).size
        return float(problem["rows"] * problem["cols"] * element(problem["dtype"]).size + problem["rows"] * out_size)

    # ---- how it is checked ------------------------------------------------------------------------
    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        """Sums of positive values (their relative error means something); values of both signs,
        with ties in the half types, for the comparisons."""
        import cupy

        rows, cols = problem["rows"], problem["cols"]
        low, high = -1.0, 1.0
        if problem["op"] in SUMS:
            # float16 sums stay below its largest value (65504)
            high = min(1.0, 16384.0 / cols) if problem["dtype"] == "float16" else 1.0
            low = 0.1 * high
        out = self.output_dtype(problem, "out")
        return {"x": random_array((rows, cols), problem["dtype"], seed, low, high),
                "out": cupy.full((rows,), -1, dtype=cupy.int64) if out == "int64" else poisoned((rows,), out),
                "workspace": cupy.zeros(WORKSPACE_BYTES, dtype=cupy.uint8)}

    def reference(self, problem: Problem, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """The reduction of the decoded inputs in float64 (CuPy), NaN first as NumPy has it."""
        import cupy

        return {"out": reference_reduce(cupy, decode(arrays["x"], problem["dtype"]), problem["op"])}

    def output_tolerance(self, problem: Problem, name: str) -> float:
        # comparisons are exact; a float32 sum of positive values stays within a few ulps of
        # the sums it adds, then is rounded once to the output
        if problem["op"] not in SUMS:
            return 0.0
        return max(element(problem["dtype"]).tolerance, 1e-5)

    def torch_baseline(self, problem: Problem, operands: Mapping[str, Any]):
        import torch

        x = torch_view(operands["x"], problem["dtype"])
        fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin,
              "argmax": torch.argmax}[problem["op"]]
        return lambda: fn(x, dim=-1)


def reference_reduce(xp, x, op: str):
    """``op`` over the last axis of the float64 array ``x`` with the array library ``xp``
    (NumPy or CuPy): a row's NaN makes its max, min and sum NaN, and its argmax the first NaN's index."""
    if op == "sum":
        return x.sum(axis=-1)
    if op == "mean":
        return x.mean(axis=-1)
    nan = xp.isnan(x)
    has_nan = nan.any(axis=-1)
    if op == "argmax":
        clean = xp.where(nan, -xp.inf, x)
        return xp.where(has_nan, xp.argmax(nan, axis=-1), xp.argmax(clean, axis=-1)).astype(xp.int64)
    fn = xp.max if op == "max" else xp.min
    return xp.where(has_nan, xp.nan, fn(xp.where(nan, 0.0, x), axis=-1))


def _pow2_floor(x: float) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def _pow2_ceil(x: float) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def _model_values(problem: Problem, target: Target) -> dict[str, Any]:
    """The untuned pick: 16-byte vectors where the rows allow, and a mapping that keeps the
    GPU's memory system full.

    - rows of <= 512 bytes: a few lanes per row, each reading one vector (a row's vectors
      are aligned when its length is a multiple of them; otherwise narrower ones);
    - rows of <= 8 KB, enough of them for 16 warps per SM: a warp per row;
    - enough rows for two blocks per SM: a block per row, as large as fills the SMs' threads
      (128 to 1024) without leaving threads idle;
    - fewer rows of >= 64 KB: each split over blocks (the deterministic ticket form), as
      many as the GPU runs at once (blocks of 256 threads), each with at least one full step;
    - anything else (a few short rows: latency, not bandwidth): a warp per row, or a block
      for longer rows.
    """
    rows, cols, dtype = problem["rows"], problem["cols"], problem["dtype"]
    size = element(dtype).size
    widths = vector_widths(dtype)
    widest = max(widths)
    sms = target.sm_count
    row_bytes = cols * size
    resident_threads = sms * 2048

    def fitting_vec(limit: int) -> int:
        return max(w for w in widths if w <= max(1, limit))

    def warp(lanes: int, vec: int, block: int = 256) -> dict[str, Any]:
        items = max(1, min(4, _pow2_floor(cols / (lanes * vec))))
        return {"STRATEGY": "warp", "LANES": lanes, "BLOCK": block, "VEC": vec, "ITEMS": items, "SPLIT": 1}

    if row_bytes <= 512:
        vec = max(w for w in widths if w <= cols and cols % w == 0)
        return warp(min(32, _pow2_ceil(cols / vec)), vec)
    if row_bytes <= 8192 and rows >= 16 * sms:
        return warp(32, fitting_vec(cols // 32))
    if rows >= 2 * sms:
        return _block_values(rows, cols, fitting_vec(cols), resident_threads)
    if row_bytes >= 64 * 1024:
        block, vec = 256, widest
        target_blocks = resident_threads // block
        for items in (4, 2, 1):
            split = _pow2_floor(min(target_blocks / rows, SLOTS / rows, cols / (block * vec * items), SPLITS[-1]))
            if split * rows >= target_blocks // 2 or items == 1:
                break
        if split >= 2:
            return {"STRATEGY": "split", "LANES": 32, "BLOCK": block, "VEC": vec, "ITEMS": items, "SPLIT": split}
    if row_bytes <= 8192:
        return warp(32, fitting_vec(cols // 32), 128)
    return _block_values(rows, cols, widest, resident_threads)


def _block_values(rows: int, cols: int, vec: int, resident_threads: int) -> dict[str, Any]:
    block = min(1024, max(128, _pow2_ceil(resident_threads / rows)))
    while block > 64 and block * vec >= 2 * cols:
        block //= 2
    items = max(1, min(4, _pow2_floor(cols / (block * vec))))
    return {"STRATEGY": "block", "LANES": 32, "BLOCK": block, "VEC": vec, "ITEMS": items, "SPLIT": 1}
