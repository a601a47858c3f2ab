"""``kgen.run``: any registered family's best known kernel, called by the family's name with
its operands (the family builds the problem from them), or with a problem given outright.

>>> # kgen.run("vadd", x=x, y=y, out=out)                      # the family reads n from x
>>> # kgen.run(spec, Problem.of("vadd", n=1 << 24), {"x": x, "y": y, "out": out})
"""

from __future__ import annotations

from typing import Any, Mapping

from kgen.dispatch import default_dispatcher
from kgen.errors import InputError
from kgen.problem import Problem
from kgen.registry import get_spec
from kgen.spec import KernelSpec


def run(family: str | KernelSpec, problem: Problem | None = None, operands: Mapping[str, Any] | None = None, *,
        device: int | None = None, **named: Any) -> None:
    """Launch the family's best known kernel for the problem on the operands, on the current
    stream, without synchronising. Operands come as ``operands`` or as keywords; without
    ``problem`` the family builds it from them (``KernelSpec.problem_from_operands``)."""
    spec = get_spec(family) if isinstance(family, str) else family
    if operands is not None and named:
        raise InputError("operands given twice: as a mapping and as keywords", remedy="give one of the two")
    ops = dict(operands if operands is not None else named)
    if problem is None:
        problem, found = spec.problem_from_operands(ops)
        device = found if device is None else device
    elif problem.family != spec.family:
        raise InputError(f"the problem is of family {problem.family!r}, the kernel of {spec.family!r}",
                         remedy=f"pass a {spec.family} problem")
    default_dispatcher().call(spec, problem, ops, 0 if device is None else device)
