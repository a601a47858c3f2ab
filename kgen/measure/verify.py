"""Run once on NaN-poisoned outputs and compare with the reference."""

from __future__ import annotations

from typing import Any, Mapping

from kgen.spec import Check


def poison(operands: Mapping[str, Any], outputs) -> None:
    import cupy

    for name in outputs:
        arr = operands[name]
        kind = cupy.dtype(arr.dtype).kind
        if kind == "f":
            arr.fill(cupy.nan)
        elif kind == "u":        # all ones: NaN when the bits are bfloat16
            arr.fill(cupy.iinfo(arr.dtype).max)
        else:
            arr.fill(-1)


def verify(spec, problem, config, kernel, operands: Mapping[str, Any], expected: Mapping[str, Any]) -> Check:
    """Poison the outputs, run, synchronize, check against ``expected``."""
    import cupy

    poison(operands, spec.outputs)
    spec.run(kernel, problem, config, operands)
    cupy.cuda.get_current_stream().synchronize()
    return spec.check(problem, operands, expected)
