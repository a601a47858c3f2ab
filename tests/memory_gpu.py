"""One config of a memory-bound family run on the GPU and checked against its float64
reference, for the families' GPU tests."""

from __future__ import annotations

from kgen.compile import compile_source
from kgen.render import render


def target():
    from kgen.problem import Target

    return Target.detect(0)


def check_sampled(spec, problem, count: int, seed: int) -> None:
    """The default config and ``count`` sampled ones of a problem the family runs, each correct
    on fresh operands (NaN-poisoned outputs)."""
    assert spec.supports(problem, target())
    space = spec.space(problem, target())
    for i, config in enumerate([spec.default_config(problem, target())] + space.sample(count, seed=seed)):
        check, _ = check_config(spec, problem, config, seed=i)
        assert check.ok, f"{config.name} on {problem.key}: {check.detail}"


def check_config(spec, problem, config, seed: int = 0, operands=None):
    """(Check, operands) of ``config`` on fresh random operands (or ``operands``)."""
    from kgen.measure.launch import CupyKernel
    from kgen.measure.verify import verify

    result = compile_source(render(spec, problem, config, target()))
    assert result.failure is None, result.failure
    kernel = CupyKernel(result.binary.cubin, result.binary.entry, result.binary.path)
    operands = spec.inputs(problem, seed) if operands is None else operands
    return verify(spec, problem, config, kernel, operands, spec.reference(problem, operands)), operands
