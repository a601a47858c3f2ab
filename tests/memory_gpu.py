"""One config of a memory-bound family run on the GPU and checked against its float64
reference, for the families' GPU tests."""

from __future__ import annotations

from kgen.compile import compile_source
from kgen.render import render


def target():
    from kgen.problem import Target

    return Target.detect(0)


def check_config(spec, problem, config, seed: int = 0, operands=None):
    """(Check, operands) of ``config`` on fresh random operands (or ``operands``)."""
    from kgen.measure.launch import CupyKernel
    from kgen.measure.verify import verify

    result = compile_source(render(spec, problem, config, target()))
    assert result.failure is None, result.failure
    kernel = CupyKernel(result.binary.cubin, result.binary.entry, result.binary.path)
    operands = spec.inputs(problem, seed) if operands is None else operands
    return verify(spec, problem, config, kernel, operands, spec.reference(problem, operands)), operands
