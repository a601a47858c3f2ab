"""The permute family: any axis permutation of a row-major array (a 2-D transpose, NCHW <-> NHWC
...), its elements moved as their bits.

A problem is the canonical permutation (``kgen.kernels.memory.permutation``: size-1 dimensions
dropped, dimensions that stay adjacent merged), written with four dimensions ``d0..d3`` (leading
ones of size 1 that stay in place) and the axes as text, and the dtype. The canonical form
decides the kernel:

- ``copy``: one dimension (an identity), a vectorised copy;
- ``rows``: the innermost dimension stays innermost, whole rows move (vectorised along them);
- ``tile``: the innermost dimension changes; a block moves a ``TA x TB`` tile of the output's
  innermost dimension ``a`` by the input's ``b`` through shared memory (rows an odd number of
  banks apart), loading ``VIN`` elements along ``b`` and storing ``VOUT`` along ``a``, the
  other dimensions a batch folded into the one grid dimension. 16-bit elements may be paired
  along ``a`` into 32-bit words (``PAIR=2``), so that shared memory moves words.

>>> permute_problem((64, 256, 56, 56), (0, 2, 3, 1), "bfloat16").key
'permute|d0=1|d1=64|d2=256|d3=3136|dtype=bfloat16|perm=0_1_3_2'
>>> from kgen.problem import Target
>>> spec = Permute()
>>> spec.default_config(permute_problem((16384, 16384), (1, 0), "float32"), Target.h200()).name
'permute_tile_64x64_t256_vi4_vo4_p1'
>>> spec.default_config(permute_problem((64, 256, 56, 56), (0, 2, 3, 1), "bfloat16"), Target.h200()).name
'permute_tile_128x64_t256_vi8_vo8_p2'
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from kgen.errors import InputError, ShapeError
from kgen.fields import Field
from kgen.kernels.memory.elements import element, vector_widths
from kgen.kernels.memory.family import MemoryFamily, decode, dtype_field, poisoned, random_array, torch_view
from kgen.kernels.memory.permutation import MAX_RANK, Plan, canonical, check_axes, padded, plan
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import Launch

SIDES = (4, 8, 16, 32, 64, 128, 256)        # tile sides (elements)
TILE_THREADS = (64, 128, 256, 512)
ROW_THREADS = (128, 256, 512, 1024)
ITEMS = (1, 2, 4, 8)
TILE_BYTES_PER_THREAD = 128                 # a tile's elements a thread holds, at most (registers)
TILE_WORDS = 4096                           # the default tile's shared-memory words (16 KB)
MAX_BLOCKS = 2**31 - 1
SHAPE_FIELDS = tuple(f"d{i}" for i in range(MAX_RANK))


def axes_text(axes) -> str:
    return "_".join(str(a) for a in axes)


def parse_axes(text) -> tuple[int, ...]:
    """``"0_2_1"`` (a key) or ``"0,2,1"`` / ``"0 2 1"`` (a user) -> (0, 2, 1)."""
    try:
        return tuple(int(p) for p in re.split(r"[,_\s]+", str(text).strip()) if p)
    except ValueError:
        raise InputError(f"axes {text!r} are not integers", remedy='write them as "0,2,3,1"') from None


def parse_shape(text) -> tuple[int, ...]:
    """``"64,256,56,56"`` (or ``64x256x56x56``, ``"64 256 56 56"``) -> (64, 256, 56, 56)."""
    try:
        shape = tuple(int(p) for p in re.split(r"[,x\s]+", str(text).strip()) if p)
    except ValueError:
        raise InputError(f"shape {text!r} is not a list of integers", remedy='write it as "64,256,56,56"') from None
    if any(s < 0 for s in shape):
        raise ShapeError(f"shape {shape} has a negative size", remedy="give sizes >= 1")
    return shape


def permute_problem(shape, axes, dtype: str) -> Problem:
    """The problem of permuting an array of ``shape`` and ``dtype`` by ``axes``, canonical."""
    shape = tuple(int(s) for s in shape)
    if any(s < 1 for s in shape):
        raise ShapeError(f"shape {shape}: every size must be >= 1 (an empty array needs no kernel)")
    element(dtype)
    dims, perm = padded(*canonical(shape, axes))
    return Problem.of("permute", **{f"d{i}": s for i, s in enumerate(dims)}, perm=axes_text(perm), dtype=dtype)


def problem_plan(problem: Problem) -> Plan:
    """The Plan of a problem, checked to be written as ``permute_problem`` writes it (a key from a
    file is used only if it is)."""
    try:
        shape = tuple(problem[f] for f in SHAPE_FIELDS)
        axes = parse_axes(problem["perm"])
        dtype = problem["dtype"]
    except KeyError as exc:
        raise InputError(f"{problem.key} lacks {exc}", remedy="make permute problems with permute_problem") from None
    if not all(type(s) is int and s >= 1 for s in shape):
        raise ShapeError(f"{problem.key}: the sizes must be integers >= 1")
    check_axes(axes, len(shape))
    if permute_problem(shape, axes, dtype) != problem:
        raise InputError(f"{problem.key} is not a canonical permute problem",
                         remedy="make permute problems with permute_problem (it merges and drops dimensions)")
    return plan(shape, axes)


def _fit(size: int) -> int:
    """The smallest tile side covering ``size`` (the largest side for larger sizes)."""
    return next((s for s in SIDES if s >= size), SIDES[-1])


def _largest_dividing(widths, size: int, multiple_of: int = 1) -> int:
    return max(w for w in widths if size % w == 0 and w % multiple_of == 0)


class Permute(MemoryFamily):
    family = "permute"
    template = "memory/permute.cu.j2"
    shape_params = SHAPE_FIELDS
    problem_fields = (
        Field("shape", str, "the input's shape, e.g. 64,256,56,56"),
        Field("perm", str, "the input axis of each output axis, e.g. 0,2,3,1 (default: reversed, a transpose)",
              None),
        dtype_field(),
    )

    # ---- the front door ----------------------------------------------------------------------------
    def request(self, target: Target, **values) -> tuple["Permute", Problem]:
        shape = parse_shape(values["shape"])
        perm = values.get("perm")
        axes = parse_axes(perm) if perm else tuple(reversed(range(len(shape))))
        return self, permute_problem(shape, axes, values.get("dtype", "float32"))

    def problem_from_operands(self, operands: Mapping[str, Any]) -> tuple[Problem, int]:
        raise InputError("a permute problem names its axes, which the arrays do not give",
                         remedy="call kgen.permute(x, axes), or kgen.run('permute', permute_problem(...), operands)")

    # ---- what the tuner searches ------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        p = problem_plan(problem)
        dtype = problem["dtype"]
        widths = vector_widths(dtype)
        if p.mode != "tile":
            return self._row_space(p, widths)
        size = element(dtype).size
        sa, sb = p.shape[p.a], p.shape[p.b]
        batch = p.size // (sa * sb)

        def smem(v) -> int:
            return _shared_bytes(v["TA"], v["TB"], v["PAIR"], size)

        def items(v) -> tuple[int, int]:
            return (v["TA"] // v["PAIR"]) * (v["TB"] // v["VIN"]), v["TB"] * (v["TA"] // v["VOUT"])

        def blocks(v) -> int:
            return -(-sa // v["TA"]) * -(-sb // v["TB"]) * batch

        return Space(
            [Param("PAIR", (1, 2) if size == 2 else (1,)), Param("TA", SIDES), Param("TB", SIDES),
             Param("VIN", widths), Param("VOUT", widths), Param("THREADS", TILE_THREADS)],
            constraints=[
                Constraint("pairs of 16-bit elements need dimension a even", lambda v: v["PAIR"] == 1 or sa % 2 == 0,
                           ("PAIR",)),
                Constraint("tile side a no larger than dimension a needs", lambda v: v["TA"] <= _fit(sa), ("TA",)),
                Constraint("tile side b no larger than dimension b needs", lambda v: v["TB"] <= _fit(sb), ("TB",)),
                Constraint("load vectors divide dimension b and the tile",
                           lambda v: sb % v["VIN"] == 0 and v["TB"] % v["VIN"] == 0, ("TB", "VIN")),
                Constraint("store vectors divide dimension a and the tile, in whole pairs",
                           lambda v: sa % v["VOUT"] == 0 and v["TA"] % v["VOUT"] == 0 and v["VOUT"] % v["PAIR"] == 0,
                           ("PAIR", "TA", "VOUT")),
                Constraint("shared memory fits a block", lambda v: smem(v) <= target.smem_per_block,
                           ("PAIR", "TA", "TB")),
                Constraint("every thread has work (or the block is two warps)",
                           lambda v: v["THREADS"] == TILE_THREADS[0] or v["THREADS"] <= min(items(v)),
                           ("PAIR", "TA", "TB", "VIN", "VOUT", "THREADS")),
                Constraint("a thread holds at most 128 bytes of the tile",
                           lambda v: v["TA"] * v["TB"] * size <= v["THREADS"] * TILE_BYTES_PER_THREAD,
                           ("TA", "TB", "THREADS")),
                Constraint("the grid fits gridDim.x", lambda v: blocks(v) <= MAX_BLOCKS, ("TA", "TB")),
            ],
            namer=lambda v: (f"{self.family}_tile_{v['TA']}x{v['TB']}_t{v['THREADS']}_vi{v['VIN']}_vo{v['VOUT']}"
                             f"_p{v['PAIR']}"))

    def _row_space(self, p: Plan, widths) -> Space:
        mode, row, n = p.mode, p.row, p.size
        return Space(
            [Param("VEC", widths), Param("ITEMS", ITEMS), Param("THREADS", ROW_THREADS)],
            constraints=[
                Constraint("vectors divide the rows", lambda v: mode == "copy" or row % v["VEC"] == 0, ("VEC",)),
                Constraint("the grid fits gridDim.x",
                           lambda v: -(-n // (v["VEC"] * v["ITEMS"] * v["THREADS"])) <= MAX_BLOCKS,
                           ("VEC", "ITEMS", "THREADS")),
            ],
            namer=lambda v: f"{self.family}_{mode}_v{v['VEC']}_i{v['ITEMS']}_t{v['THREADS']}")

    def default_config(self, problem: Problem, target: Target) -> Config:
        """Tiles: 16-bit elements paired when dimension a is even; the widest vectors (up to 16
        bytes) dividing each side; a tile of about 4096 words (16 KB of shared memory, 8 blocks
        an SM), 64 columns along b, a side narrower where its dimension is small and the other
        grown to keep the words; one thread per 16 words, so that each has four 16-byte loads
        in flight. Shared accesses of these tiles meet in no bank. Rows and copies: the widest
        vector dividing the rows, 32 bytes a thread, 256 threads."""
        return self.first_valid(self.space(problem, target), self._candidates(problem), problem)

    def model_picks(self, problem: Problem, target: Target, count: int) -> list[Config]:
        """The default, then the same rule with other threads, a quarter and twice the tile."""
        space = self.space(problem, target)
        picks: list[Config] = []
        for values in self._candidates(problem):
            if len(picks) >= count:
                break
            if space.is_valid(values) and space.make(values) not in picks:
                picks.append(space.make(values))
        return picks or [self.default_config(problem, target)][:count]

    def _candidates(self, problem: Problem):
        """Parameter values in the order the default's rule prefers them (some invalid)."""
        p = problem_plan(problem)
        widths = vector_widths(problem["dtype"])
        size = element(problem["dtype"]).size
        if p.mode != "tile":
            vec = max(widths) if p.mode == "copy" else _largest_dividing(widths, p.row)
            items = min(max(ITEMS[0], 32 // (vec * size)), ITEMS[-1])
            for threads in (256, 512, 128):
                yield {"VEC": vec, "ITEMS": items, "THREADS": threads}
            return
        sa, sb = p.shape[p.a], p.shape[p.b]
        pair = 2 if size == 2 and sa % 2 == 0 else 1
        vin = _largest_dividing(widths, sb)
        vout = _largest_dividing(widths, sa, pair)
        for vi, vo in ((vin, vout), (1, pair)):
            for words in (TILE_WORDS, TILE_WORDS // 4, TILE_WORDS * 2):
                tb = min(64, _fit(sb))
                ta = min(max(words // tb * pair, SIDES[0]), _fit(sa), SIDES[-1])
                tb = min(max(tb, words * pair // ta), _fit(sb), SIDES[-1])
                threads = min(max(ta * tb // pair // 16, TILE_THREADS[0]), TILE_THREADS[-1])
                for t in (threads, threads // 2, threads * 2, TILE_THREADS[0]):
                    yield {"PAIR": pair, "TA": ta, "TB": tb, "VIN": min(vi, tb), "VOUT": min(vo, ta), "THREADS": t}

    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        p = problem_plan(problem)
        ctx = super().context(problem, config, space)
        size = element(problem["dtype"]).size
        ctx.update(shape=p.shape, axes=p.axes, mode=p.mode, size=p.size,
                   elem_t={2: "unsigned short", 4: "unsigned int"}[size],
                   index_t="unsigned int" if p.size < 2**31 else "unsigned long long")
        if p.mode == "tile":
            pair, ta, tb, threads = config["PAIR"], config["TA"], config["TB"], config["THREADS"]
            word = size * pair
            load_items = (ta // pair) * (tb // config["VIN"])
            store_items = tb * (ta // config["VOUT"])
            ctx.update(a=p.a, b=p.b, size_a=p.shape[p.a], size_b=p.shape[p.b],
                       in_stride_a=p.dims[p.a].in_stride, out_stride_b=p.dims[p.b].out_stride,
                       batch=p.batch, word_t={2: "unsigned short", 4: "unsigned int"}[word], pad=4 // word,
                       load_guard=load_items % threads != 0, store_guard=store_items % threads != 0)
        else:
            ctx.update(row=p.row, outer=p.outer)
        return ctx

    # ---- how it runs ------------------------------------------------------------------------------
    def launch(self, problem: Problem, config: Config) -> Launch:
        p = problem_plan(problem)
        if p.mode == "tile":
            sa, sb = p.shape[p.a], p.shape[p.b]
            blocks = -(-sa // config["TA"]) * -(-sb // config["TB"]) * (p.size // (sa * sb))
        else:
            blocks = -(-p.size // (config["VEC"] * config["ITEMS"] * config["THREADS"]))
        return Launch((blocks, 1, 1), (config["THREADS"], 1, 1))

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]):
        return [ops["x"], ops["out"]]

    def bytes(self, problem: Problem) -> float:
        return 2.0 * problem_plan(problem).size * element(problem["dtype"]).size

    # ---- how it is checked ------------------------------------------------------------------------
    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        p = problem_plan(problem)
        return {"x": random_array(p.shape, problem["dtype"], seed), "out": poisoned(p.out_shape, problem["dtype"])}

    def reference(self, problem: Problem, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """The input's values, decoded to float64, permuted by CuPy."""
        import cupy

        p = problem_plan(problem)
        return {"out": cupy.ascontiguousarray(decode(arrays["x"], problem["dtype"]).transpose(p.axes))}

    def output_tolerance(self, problem: Problem, name: str) -> float:
        return 0.0          # bits are moved, never rounded

    def torch_baseline(self, problem: Problem, operands: Mapping[str, Any]):
        p = problem_plan(problem)
        x = torch_view(operands["x"], problem["dtype"]).reshape(p.shape)

        def run():
            return x.permute(*p.axes).contiguous()
        return run


def _shared_bytes(ta: int, tb: int, pair: int, size: int) -> int:
    """The tile's shared memory: ``ta / pair`` rows of ``tb`` words and a 4-byte pad."""
    word = size * pair
    return (ta // pair) * (tb * word + 4)
