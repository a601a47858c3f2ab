"""Timing on the GPU: CUDA events, warm-up, L2 flushed and the GPU held before each run, median kept.

>>> # on a GPU: times = time_runs(lambda: kernel(...), Timing(runs=25), flush=l2_flusher(60 << 20))
"""

from __future__ import annotations

from typing import Callable

from kgen.knobs import knobs
from kgen.measurement import Timing


_READ_SWEEP = r"""
extern "C" __global__ void kgen_l2_read_sweep(const uint4* __restrict__ buf, unsigned long long n,
                                              unsigned int* __restrict__ sink)
{
    unsigned int folded = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const uint4 v = buf[i];
        folded ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (folded == 0x9e3779b9u) sink[blockIdx.x] = folded;   // never, on a zeroed buffer: keeps the loads
}
"""
SWEEP_BLOCKS, SWEEP_THREADS = 1024, 512


def l2_label() -> str:
    """How the L2 is left before a timed run, as the settings say (stored with each time)."""
    if not knobs.l2_flush:
        return "warm"
    return "flushed" if knobs.l2_flush_style == "write" else "flushed-clean"


def l2_flusher(l2_bytes: int, style: str | None = None) -> Callable[[], None]:
    """A function that evicts earlier data from the L2 by a sweep of a buffer twice its size.

    ``write`` fills the buffer, which leaves the L2 full of dirty lines: the timed kernel
    then writes them back to memory as its own data evicts them, which adds up to an L2's
    worth of writes to a memory-bound kernel's time. ``read`` reads the buffer, so the L2 is
    left holding clean lines that are dropped for free, as the weights of a decode step
    would find it after other kernels' reads. Default: ``KGEN_L2_FLUSH_STYLE``."""
    import cupy

    style = knobs.l2_flush_style if style is None else style
    buf = cupy.zeros(max(2 * l2_bytes, 1 << 20) // 16 * 16, dtype=cupy.uint8)
    if style == "write":
        def flush() -> None:
            buf.fill(1)
        return flush
    if style != "read":
        raise ValueError(f"l2 flush style {style!r}: expected read or write")
    return read_sweep(buf)


def read_sweep(buf) -> Callable[[], None]:
    """A launcher that reads all of ``buf`` (a CuPy uint8 array, a multiple of 16 bytes) once,
    16 bytes per load, writing nothing: the clean flush, and the floor of a memory-bound run."""
    import cupy

    sweep = cupy.RawKernel(_READ_SWEEP, "kgen_l2_read_sweep")
    sink = cupy.zeros(SWEEP_BLOCKS, dtype=cupy.uint32)
    args = (buf, cupy.uint64(buf.size // 16), sink)
    return lambda: sweep((SWEEP_BLOCKS,), (SWEEP_THREADS,), args)


_HOLD = r"""
extern "C" __global__ void kgen_hold(volatile unsigned int* flag, unsigned int ticket,
                                     unsigned long long timeout_ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        if ((int)(flag[0] - ticket) >= 0) return;         // released (flag[0] only grows)
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < timeout_ns);
    flag[1] = 1u;                                          // gave up: the host was too slow
}
"""
HOLD_TIMEOUT_NS = 20_000_000    # a queued run the host has not released after 20 ms goes anyway


class GpuHold:
    """Keeps the stream waiting (a one-thread kernel polling a flag in mapped host memory)
    until the host has queued the run to be timed, so that the run starts as soon as the
    start event fires, whatever the host spent on launching it. Without it, a flush shorter
    than the host's launch path leaves the GPU idle between the start event and the kernel,
    and that idle time is timed. ``hold()`` before the start event, ``release()`` after the
    end event; ``timed_out`` tells whether a hold gave up waiting (its run was timed with
    the host's cost in it)."""

    def __init__(self):
        import ctypes

        import cupy

        self._ptr = cupy.cuda.runtime.hostAlloc(8, 2)     # cudaHostAllocMapped; UVA: the same address on the GPU
        self._flag = (ctypes.c_uint32 * 2).from_address(self._ptr)
        self._flag[0] = self._flag[1] = 0
        self._kernel = cupy.RawKernel(_HOLD, "kgen_hold")
        self._ticket = 0

    def hold(self) -> None:
        import cupy

        self._ticket = (self._ticket + 1) & 0xFFFFFFFF
        self._kernel((1,), (1,), (cupy.uint64(self._ptr), cupy.uint32(self._ticket), cupy.uint64(HOLD_TIMEOUT_NS)))

    def release(self) -> None:
        self._flag[0] = self._ticket

    @property
    def timed_out(self) -> bool:
        return bool(self._flag[1])

    def reset(self) -> None:
        self._flag[1] = 0


_GPU_HOLDS: dict[int, GpuHold] = {}


def _gpu_hold() -> GpuHold:
    """This device's hold, made on first use and kept for the process's life."""
    import cupy

    device = cupy.cuda.Device().id
    if device not in _GPU_HOLDS:
        _GPU_HOLDS[device] = GpuHold()
    return _GPU_HOLDS[device]


def time_runs(run: Callable[[], None], timing: Timing, flush: Callable[[], None] | None,
              min_total_ms: float = 0.0, hold: bool | None = None) -> list[float]:
    """Milliseconds of each timed run of ``run`` (after ``timing.warmup`` untimed ones), each
    after ``flush`` and, where ``hold`` (default ``KGEN_BENCH_HOLD``), started by the GPU only
    once the host has queued it (``GpuHold``)."""
    import cupy

    stream = cupy.cuda.get_current_stream()
    held = _gpu_hold() if (knobs.bench_hold if hold is None else hold) else None
    for _ in range(timing.warmup):
        run()
    stream.synchronize()
    times: list[float] = []
    while True:
        pairs = []
        if held is not None:
            held.reset()
        for _ in range(timing.runs):
            if flush is not None:
                flush()
            if held is not None:
                held.hold()
            try:
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                run()
                end.record(stream)
            finally:            # a run that raised must not leave the GPU waiting out the hold
                if held is not None:
                    held.release()
            pairs.append((start, end))
        end.synchronize()
        if held is not None and held.timed_out:     # the host stalled (or ``run`` waited on the GPU):
            held = None                              # time this batch again, and the rest, without holds
            continue
        times.extend(cupy.cuda.get_elapsed_time(s, e) for s, e in pairs)
        if sum(times) >= min_total_ms or len(times) >= 50 * timing.runs:
            return times
