"""Timing on the GPU: CUDA events, warm-up, L2 flushed before each run, median kept.

>>> # on a GPU: times = time_runs(lambda: kernel(...), Timing(runs=25), flush=l2_flusher(60 << 20))
"""

from __future__ import annotations

from typing import Callable

from kgen.measurement import Timing


def l2_flusher(l2_bytes: int) -> Callable[[], None]:
    """A function that overwrites a buffer twice the L2 size, evicting earlier data."""
    import cupy

    buf = cupy.empty(max(2 * l2_bytes, 1 << 20), dtype=cupy.uint8)

    def flush() -> None:
        buf.fill(1)

    return flush


def time_runs(run: Callable[[], None], timing: Timing, flush: Callable[[], None] | None,
              min_total_ms: float = 0.0) -> list[float]:
    """Milliseconds of each timed run of ``run`` (after ``timing.warmup`` untimed ones)."""
    import cupy

    stream = cupy.cuda.get_current_stream()
    for _ in range(timing.warmup):
        run()
    stream.synchronize()
    times: list[float] = []
    while True:
        pairs = []
        for _ in range(timing.runs):
            if flush is not None:
                flush()
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            run()
            end.record(stream)
            pairs.append((start, end))
        end.synchronize()
        times.extend(cupy.cuda.get_elapsed_time(s, e) for s, e in pairs)
        if sum(times) >= min_total_ms or len(times) >= 50 * timing.runs:
            return times
