"""The elementwise family: ``out = f(operands)`` for a user expression over up to four array
operands and any scalars, each array the output's shape, a row vector (one value per column)
or a column vector (one value per row); half inputs are computed in float. ``cast`` is the
one-operand case whose output dtype differs (``kgen.kernels.memory.cast``).

A problem names the canonical expression, each operand's kind, the output as rows x cols,
and the dtypes. Its knobs: elements per vector load (up to 16 bytes), vectors per thread per
step, threads per block, and a cap on the blocks (0: one block per tile; else a grid that
strides over the rest).

>>> p = elementwise_problem("a*x + y", {"a": "scalar", "x": "full", "y": "row"}, 4, 1000, "bfloat16")
>>> p.key
'elementwise|cols=1000|dtype=bfloat16|expr=a * x + y|operands=a:scalar,x:full,y:row|out_dtype=bfloat16|rows=4'
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kgen.errors import InputError, KgenError, ShapeError
from kgen.fields import Field
from kgen.kernels.memory.elements import DTYPES, element, vector_widths
from kgen.kernels.memory.expr import parse
from kgen.kernels.memory.family import (MemoryFamily, dtype_field, element_context, poisoned, random_array,
                                        torch_view, decode)
from kgen.problem import Problem, Target
from kgen.space import Config, Param, Space
from kgen.spec import Launch, scalar_operand

KINDS = ("full", "row", "col", "scalar")
MAX_ARRAYS = 4
BLOCKS = (128, 256, 512, 1024)
ITEMS = (1, 2, 4)
MAXBLOCKS = (0, 528, 1056, 2112)


def parse_operands(text: str) -> dict[str, str]:
    """``"a:scalar,x:full"`` -> {"a": "scalar", "x": "full"} (checked)."""
    kinds = {}
    for part in str(text).split(","):
        name, _, kind = part.strip().partition(":")
        if kind not in KINDS:
            raise InputError(f"operand {part!r}: the kind is one of {', '.join(KINDS)}",
                             remedy='write each operand as name:kind, e.g. "a:scalar,x:full,y:row"')
        kinds[name] = kind
    return kinds


def operands_text(kinds: Mapping[str, str]) -> str:
    return ",".join(f"{name}:{kinds[name]}" for name in sorted(kinds))


def elementwise_problem(expr: str, kinds: Mapping[str, str], rows: int, cols: int, dtype: str,
                        out_dtype: str | None = None, family: str = "elementwise") -> Problem:
    """The checked problem of ``expr`` over operands of the given kinds, into rows x cols
    elements of ``out_dtype`` (default ``dtype``)."""
    e = parse(expr)
    kinds = dict(kinds)
    missing = [n for n in e.names if n not in kinds]
    extra = [n for n in kinds if n not in e.names]
    if missing or extra:
        raise InputError(f"the expression {e.text!r} reads {', '.join(e.names)}; "
                         + (f"no operand given for {', '.join(missing)}" if missing
                            else f"{', '.join(extra)} given but not read"),
                         remedy="pass exactly the operands the expression names")
    for name, kind in kinds.items():
        if kind not in KINDS:
            raise InputError(f"operand {name} has kind {kind!r}", remedy=f"use one of {', '.join(KINDS)}")
    if sum(kind != "scalar" for kind in kinds.values()) > MAX_ARRAYS:
        raise InputError(f"the expression reads {sum(k != 'scalar' for k in kinds.values())} arrays; "
                         f"at most {MAX_ARRAYS} are taken", remedy="split it into two calls")
    if "full" not in kinds.values() and "row" not in kinds.values() and "col" not in kinds.values():
        raise InputError("the expression reads no array", remedy="pass at least one array operand")
    if rows < 1 or cols < 1:
        raise ShapeError(f"the output is {rows} x {cols}; both must be >= 1 (empty arrays need no kernel)")
    element(dtype)
    element(out_dtype or dtype)
    return Problem.of(family, expr=e.text, operands=operands_text(kinds), rows=int(rows), cols=int(cols),
                      dtype=dtype, out_dtype=out_dtype or dtype)


class Elementwise(MemoryFamily):
    family = "elementwise"
    template = "memory/elementwise.cu.j2"
    problem_fields = (
        Field("expr", str, "the expression, e.g. 'a * x + y' (names: operands; + - * / ** and functions)"),
        Field("operands", str, "each operand's kind: name:full|row|col|scalar, comma-separated "
                               "(default: every name full)", None),
        Field("cols", int, "elements per row of the output (all of them for a vector)"),
        Field("rows", int, "rows of the output", 1),
        dtype_field(),
        Field("out_dtype", str, "output element type (default: dtype)", None, DTYPES),
    )

    # ---- the front door ----------------------------------------------------------------------------
    def request(self, target: Target, **values) -> tuple["Elementwise", Problem]:
        expr = parse(values["expr"])
        kinds = parse_operands(values["operands"]) if values.get("operands") else {n: "full" for n in expr.names}
        return self, elementwise_problem(expr.text, kinds, values.get("rows", 1), values["cols"],
                                         values.get("dtype", "float32"), values.get("out_dtype"), self.family)

    text_fields = ("expr", "operands")

    def text_field_error(self, problem: Problem) -> str | None:
        """A problem from a file holds the canonical expression over exactly its operands."""
        try:
            want = elementwise_problem(problem["expr"], parse_operands(problem["operands"]), problem["rows"],
                                       problem["cols"], problem["dtype"], problem["out_dtype"], self.family)
        except (KgenError, KeyError, TypeError) as exc:
            return str(exc)
        return None if want == problem else f"not the canonical form {want.key}"

    def kinds(self, problem: Problem) -> dict[str, str]:
        return parse_operands(problem["operands"])

    def output_dtype(self, problem: Problem, name: str) -> str:
        return problem["out_dtype"]

    # ---- what the tuner searches ------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        widths = vector_widths(problem["dtype"], problem["out_dtype"])
        return Space([Param("VEC", widths), Param("ITEMS", ITEMS), Param("BLOCK", BLOCKS),
                      Param("MAXBLOCKS", MAXBLOCKS)],
                     namer=lambda v: f"{self.family}_v{v['VEC']}_i{v['ITEMS']}_b{v['BLOCK']}_g{v['MAXBLOCKS']}")

    def default_config(self, problem: Problem, target: Target) -> Config:
        """16-byte vectors, two per thread, 256 threads, one block per tile: at the copy rate
        from a few MB up (the model a tune refines)."""
        space = self.space(problem, target)
        return self.first_valid(space, [{"VEC": max(space.params[0].choices), "ITEMS": 2, "BLOCK": 256,
                                         "MAXBLOCKS": 0}], problem)

    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        e = parse(problem["expr"])                   # checked again: a key from a file renders only if valid
        kinds = self.kinds(problem)
        if sorted(kinds) != list(e.names):
            raise InputError(f"{problem.key}: the operands do not match the expression's names {e.names}")
        ctx = super().context(problem, config, space)
        ctx.update(element_context("in", problem["dtype"]))
        ctx.update(element_context("out", problem["out_dtype"]))
        ctx["arrays"] = [{"name": n, "kind": kinds[n]} for n in e.names if kinds[n] != "scalar"]
        ctx["scalars"] = [n for n in e.names if kinds[n] == "scalar"]
        ctx["broadcasts"] = any(kinds[n] in ("row", "col") for n in e.names)
        ctx["expression"] = e.cuda()
        return ctx

    # ---- how it runs ------------------------------------------------------------------------------
    def launch(self, problem: Problem, config: Config) -> Launch:
        n = problem["rows"] * problem["cols"]
        per_block = config["BLOCK"] * config["VEC"] * config["ITEMS"]
        blocks = -(-n // per_block)
        if config["MAXBLOCKS"]:
            blocks = min(blocks, config["MAXBLOCKS"])
        return Launch((max(blocks, 1), 1, 1), (config["BLOCK"], 1, 1))

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]):
        kinds = self.kinds(problem)
        names = sorted(kinds)
        arrays = [ops[n] for n in names if kinds[n] != "scalar"]
        scalars = [scalar_operand(ops[n]) for n in names if kinds[n] == "scalar"]
        return [*arrays, *scalars, ops["out"], np.int64(problem["rows"] * problem["cols"]),
                np.int64(problem["cols"])]

    def bytes(self, problem: Problem) -> float:
        rows, cols = problem["rows"], problem["cols"]
        size = {"full": rows * cols, "row": cols, "col": rows, "scalar": 0}
        read = sum(size[k] for k in self.kinds(problem).values()) * element(problem["dtype"]).size
        return float(read + rows * cols * element(problem["out_dtype"]).size)

    # ---- how it is checked ------------------------------------------------------------------------
    def _shape(self, problem: Problem, kind: str) -> tuple[int, ...]:
        rows, cols = problem["rows"], problem["cols"]
        return {"full": (rows, cols), "row": (cols,), "col": (rows, 1)}[kind]

    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        ops: dict[str, Any] = {}
        for i, (name, kind) in enumerate(sorted(self.kinds(problem).items())):
            if kind == "scalar":
                ops[name] = float(np.random.default_rng(seed + i).uniform(0.5, 1.5))
            else:
                ops[name] = random_array(self._shape(problem, kind), problem["dtype"], seed + i, 0.1, 1.0)
        ops["out"] = poisoned((problem["rows"], problem["cols"]), problem["out_dtype"])
        return ops

    def reference(self, problem: Problem, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """The expression evaluated in float64 by CuPy on the decoded inputs."""
        import cupy

        env = {n: (arrays[n] if k == "scalar" else decode(arrays[n], problem["dtype"]))
               for n, k in self.kinds(problem).items()}
        values = evaluate(parse(problem["expr"]).tree, env, cupy)
        return {"out": cupy.broadcast_to(values, (problem["rows"], problem["cols"])).astype(cupy.float64)}

    def output_tolerance(self, problem: Problem, name: str) -> float:
        # float32 arithmetic of a few terms, then the output's rounding
        return max(element(problem["out_dtype"]).tolerance, 1e-5)

    def torch_baseline(self, problem: Problem, operands: Mapping[str, Any]):
        import torch

        kinds = self.kinds(problem)
        env = {n: (operands[n] if k == "scalar" else torch_view(operands[n], problem["dtype"]))
               for n, k in kinds.items()}
        tree = parse(problem["expr"]).tree
        out_dtype = getattr(torch, problem["out_dtype"])

        def run():
            return evaluate(tree, env, torch).to(out_dtype)
        return run


def evaluate(tree, env: Mapping[str, Any], xp) -> Any:
    """The expression evaluated with the array library ``xp`` (CuPy, NumPy or PyTorch) on ``env``."""
    import ast

    def walk(node):
        if isinstance(node, ast.BinOp):
            a, b = walk(node.left), walk(node.right)
            return {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                    ast.Div: lambda: a / b, ast.Pow: lambda: a ** b}[type(node.op)]()
        if isinstance(node, ast.UnaryOp):
            v = walk(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Name):
            return env[node.id]
        if isinstance(node, ast.Constant):
            return float(node.value)
        args = [walk(a) for a in node.args]
        return _FUNCTIONS[node.func.id](xp, *args)
    return walk(tree)


def _erf(xp, x):
    if xp.__name__ == "cupy":
        import cupyx.scipy.special as special

        return special.erf(x)
    if xp.__name__ == "numpy":
        import math

        return np.vectorize(math.erf)(x)
    return xp.special.erf(x)


def _as_array(xp, x):
    return x if hasattr(x, "shape") else xp.asarray(x) if xp.__name__ != "torch" else xp.tensor(x)


_FUNCTIONS = {
    "exp": lambda xp, x: xp.exp(_as_array(xp, x)), "log": lambda xp, x: xp.log(_as_array(xp, x)),
    "sqrt": lambda xp, x: xp.sqrt(_as_array(xp, x)), "rsqrt": lambda xp, x: 1.0 / xp.sqrt(_as_array(xp, x)),
    "abs": lambda xp, x: xp.abs(_as_array(xp, x)), "tanh": lambda xp, x: xp.tanh(_as_array(xp, x)),
    "sin": lambda xp, x: xp.sin(_as_array(xp, x)), "cos": lambda xp, x: xp.cos(_as_array(xp, x)),
    "erf": lambda xp, x: _erf(xp, _as_array(xp, x)),
    "sigmoid": lambda xp, x: 1.0 / (1.0 + xp.exp(-_as_array(xp, x))),
    "relu": lambda xp, x: xp.maximum(_as_array(xp, x), 0.0 * _as_array(xp, x)),
    "gelu": lambda xp, x: 0.5 * x * (1.0 + _erf(xp, _as_array(xp, x) * 0.7071067811865476)),
    "silu": lambda xp, x: x / (1.0 + xp.exp(-_as_array(xp, x))),
    "maximum": lambda xp, a, b: xp.maximum(_as_array(xp, a), _as_array(xp, b)),
    "minimum": lambda xp, a, b: xp.minimum(_as_array(xp, a), _as_array(xp, b)),
    "pow": lambda xp, a, b: _as_array(xp, a) ** b,
}
