"""What a GPU worker is asked to do: one config of one problem, compiled."""

from __future__ import annotations

from dataclasses import dataclass

from kgen.measurement import Timing
from kgen.problem import Problem
from kgen.space import Config


@dataclass(frozen=True)
class MeasureTask:
    spec: object            # a KernelSpec (pickled to the worker)
    problem: Problem
    config: Config
    cubin: bytes
    entry: str
    resources: dict
    timing: Timing
    seed: int = 0
    compile_s: float = 0.0
    planted_fault: str = ""   # tests only: "hang" | "crash" | "wrong" | "overrun" makes the worker misbehave
    baseline: bool = False    # time the spec's library baseline (e.g. cuBLAS) instead of the config

    @classmethod
    def of(cls, spec, problem: Problem, config: Config, compiled=None, *, timing: Timing, seed: int = 0) -> "MeasureTask":
        """The task measuring ``config`` with its compile result ``compiled`` (a
        kgen.compile.CompileResult; None, or one without a binary, for a runner that needs none)."""
        binary = compiled.binary if compiled is not None else None
        return cls(spec=spec, problem=problem, config=config, cubin=binary.cubin if binary else b"",
                   entry=config.name, resources=dict(binary.resources) if binary else {}, timing=timing,
                   seed=seed, compile_s=compiled.seconds if compiled is not None else 0.0)
