"""The cast family: float32, float16 and bfloat16 converted to one another, rounded to nearest
even with NaN and Inf kept, optionally scaled first (the mixed-precision storage of
``kgen.dist``). It is the elementwise family's kernel on the expression ``x`` (or
``x * scale``), tuned and stored under its own name.

>>> cast_problem(2, 1024, "float32", "bfloat16", scaled=True).key
'cast|cols=1024|dtype=float32|expr=x * scale|operands=scale:scalar,x:full|out_dtype=bfloat16|rows=2'
"""

from __future__ import annotations

from kgen.fields import Field
from kgen.kernels.memory.elements import DTYPES
from kgen.kernels.memory.elementwise import Elementwise, elementwise_problem
from kgen.kernels.memory.family import dtype_field
from kgen.problem import Problem, Target


def cast_problem(rows: int, cols: int, dtype: str, out_dtype: str, scaled: bool = False) -> Problem:
    expr, kinds = ("x * scale", {"x": "full", "scale": "scalar"}) if scaled else ("x", {"x": "full"})
    return elementwise_problem(expr, kinds, rows, cols, dtype, out_dtype, family="cast")


class Cast(Elementwise):
    family = "cast"
    problem_fields = (
        Field("cols", int, "elements per row (all of them for a vector)"),
        Field("rows", int, "rows", 1),
        dtype_field(help="input element type"),
        Field("out_dtype", str, "output element type", "bfloat16", DTYPES),
        Field("scale", bool, "multiply by a scale given at the call first", False),
    )

    def request(self, target: Target, **values) -> tuple["Cast", Problem]:
        return self, cast_problem(values.get("rows", 1), values["cols"], values.get("dtype", "float32"),
                                  values.get("out_dtype", "bfloat16"), bool(values.get("scale", False)))

    def output_tolerance(self, problem: Problem, name: str) -> float:
        # one rounding of an exact product: half an ulp of the output
        return {"float32": 1e-7, "float16": 1e-3, "bfloat16": 4e-3}[problem["out_dtype"]]
