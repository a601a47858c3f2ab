"""The split-K workspace of a launch: where the partial sums of a tile's K splits meet.

A split-K kernel (``gemm_wgmma``, ``gemm_skinny``, the convolutions built on ``gemm_wgmma``)
takes two pointer arguments: float partials and int32 counters. Both must be as the kernel
expects before its first launch (counters zero, every partial word ``fill``), and every
launch leaves them so again, so one workspace serves every launch of a plan on one stream.
Workspaces are made on first use and kept, one per device, stream, size, template and fill
(``WORKSPACES``): two streams never share one, and an older template compared side by side,
which may leave it otherwise, has its own.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import numpy as np

NO_WORKSPACE = (np.uint64(0), np.uint64(0))

# (device, stream, partial bytes, counter bytes, template, fill) -> (partials, counters, their pointers)
WORKSPACES: dict[tuple, tuple] = {}


def split_k_workspace(sizes: tuple[int, int], template: str, fill: int) -> Callable:
    """A function of the launch's stream and device (None: CuPy's current ones) giving the
    (partials, counters) pointer arguments for ``sizes`` (bytes of each): null pointers when
    there are no partials; else that stream's workspace, made with its counters zeroed and
    every 32-bit word of its partials ``fill``. A workspace first needed while the stream is
    being captured into a CUDA graph is made outside the capture (``_new_workspace``)."""
    partial_bytes, counter_bytes = sizes
    if not partial_bytes:
        return lambda stream=None, device=None: NO_WORKSPACE

    def pointers(stream=None, device=None):
        import cupy

        if device is None:
            device = cupy.cuda.runtime.getDevice()
        if stream is None:
            stream = cupy.cuda.get_current_stream().ptr
        key = (device, stream, partial_bytes, counter_bytes, template, fill)
        found = WORKSPACES.get(key)
        if found is None:
            found = WORKSPACES[key] = _new_workspace(device, partial_bytes, counter_bytes, fill)
        return found[2], found[3]

    return pointers


def _new_workspace(device: int, partial_bytes: int, counter_bytes: int, fill: int) -> tuple:
    """(partials, counters, their pointers): allocated, the counters zeroed and every partial
    word ``fill``, on a private stream that is synchronised, so they are so before any launch
    on any stream. The thread's capture mode is relaxed meanwhile: while a stream is captured
    into a CUDA graph, an allocation is otherwise refused, and the graph keeps these buffers,
    which live on."""
    import cupy

    with cupy.cuda.Device(device), _capture_relaxed():
        side = cupy.cuda.Stream(non_blocking=True)
        with side:
            counters = cupy.zeros(counter_bytes // 4, dtype=cupy.int32)
            partials = cupy.full(partial_bytes // 4, fill, dtype=cupy.uint32)
        side.synchronize()
    return partials, counters, np.uint64(partials.data.ptr), np.uint64(counters.data.ptr)


@contextlib.contextmanager
def _capture_relaxed():
    """This thread's stream-capture mode set to relaxed, and restored afterwards."""
    from cuda.bindings import runtime

    err, previous = runtime.cudaThreadExchangeStreamCaptureMode(
        runtime.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed)
    if err != runtime.cudaError_t.cudaSuccess:
        raise RuntimeError(f"cudaThreadExchangeStreamCaptureMode: {err}")
    try:
        yield
    finally:
        runtime.cudaThreadExchangeStreamCaptureMode(previous)
