"""The physical floor under a measured time: a record faster than it was not measured.

A kernel timed by CUDA events takes at least ``KGEN_PLAUSIBLE_FLOOR_US`` (a launch and the
events' resolution), and no GPU does a problem's FLOPs faster than ``PEAK_FLOPS`` or moves its
bytes faster than ``PEAK_BYTES_PER_S`` (each several times today's largest: an H200 does about
1e15 dense 16-bit FLOP/s and 4.8e12 B/s). Dispatch passes over a record under the floor, so a
shared file's invented time cannot win.

>>> from kgen.kernels.gemm.simt import GemmSimt
>>> from kgen.kernels.gemm.problem import gemm_problem
>>> spec, p = GemmSimt(), gemm_problem(4096, 4096, 4096)
>>> plausible(1e-6, spec, p), plausible(3.0, spec, p)
(False, True)
>>> round(floor_ms(spec, p), 4)
0.0275
"""

from __future__ import annotations

from kgen.knobs import knobs

PEAK_FLOPS = 5e15           # FLOP/s no GPU reaches
PEAK_BYTES_PER_S = 2e13     # bytes/s no GPU memory moves


def floor_ms(spec, problem) -> float:
    """The least time (ms) any GPU could take for ``problem`` of ``spec`` (its GPUs together,
    for a problem spread over several)."""
    devices = max(1, spec.devices(problem))
    return max(knobs.plausible_floor_us * 1e-3, spec.flops(problem) / (PEAK_FLOPS * devices) * 1e3,
               spec.bytes(problem) / (PEAK_BYTES_PER_S * devices) * 1e3)


def plausible(time_ms: float, spec, problem) -> bool:
    return time_ms >= floor_ms(spec, problem)
