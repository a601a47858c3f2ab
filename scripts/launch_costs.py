"""Host time of each piece of a kernel call through CuPy, on the GPU machine.

    python scripts/launch_costs.py [--out FILE]

Times, per call (best of 30 bursts of 200 calls, each burst synchronised at its end): a
RawKernel launch with a GEMM's 11 arguments as NumPy scalars, the same launch through the
driver's cuLaunchKernel with an argument buffer built once, the pieces a call adds around
a launch (``__cuda_array_interface__``, attribute reads, the current stream, a memset, a
fill), so the call path's overhead can be put where it is spent. Prints JSON rows.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

SOURCE = r"""
extern "C" __global__ void k(const float* a, const float* b, float* c, int m, int n, int k_,
                             long long lda, long long ldb, long long ldc, float alpha, float beta) {
    if (threadIdx.x == 0 && blockIdx.x == 0 && m < 0) c[0] = a[0] * b[0] * alpha + beta + n + k_ + lda + ldb + ldc;
}
"""


def per_call_us(fn, calls: int = 200, bursts: int = 30) -> float:
    import cupy

    for _ in range(20):
        fn()
    cupy.cuda.Device().synchronize()
    best = float("inf")
    for _ in range(bursts):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        cupy.cuda.Device().synchronize()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def profile_text(fn, calls: int, top: int, sort: str) -> str:
    """cProfile's table of the ``top`` functions, by ``sort`` ("tottime", "cumulative"), over
    ``calls`` calls of ``fn``: where a call's host time goes."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats(sort).print_stats(top)
    return text.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    import cupy

    fn = cupy.RawKernel(SOURCE, "k")
    a = cupy.ones((64, 64), cupy.float32)
    b, c = a.copy(), a.copy()
    values = (np.uint64(a.data.ptr), np.uint64(b.data.ptr), np.uint64(c.data.ptr), np.int32(64), np.int32(64),
              np.int32(64), np.int64(64), np.int64(64), np.int64(64), np.float32(1), np.float32(0))
    fn((1,), (32,), values)
    buf = np.zeros(len(values), np.uint64)
    for i, v in enumerate(values):
        buf[i:i + 1].view(np.uint8)[:v.nbytes] = np.frombuffer(v.tobytes(), np.uint8)
    params = np.array([buf.ctypes.data + 8 * i for i in range(len(values))], np.uintp)
    f32 = buf.view(np.float32)
    launch = cupy.cuda.driver.launchKernel
    ptr = fn.kernel.ptr if hasattr(fn, "kernel") else fn._kernel.ptr    # the CUfunction

    def packed():
        buf[0] = a.data.ptr
        f32[18] = 1.0
        launch(ptr, 1, 1, 1, 32, 1, 1, 0, cupy.cuda.get_current_stream().ptr, params.ctypes.data, 0)

    rows = {
        "rawkernel_11_numpy_scalars": lambda: fn((1,), (32,), values),
        "rawkernel_arrays_and_scalars": lambda: fn((1,), (32,), (a, b, c, *values[3:])),
        "cuLaunchKernel_prebuilt_params": packed,
        "cuLaunchKernel_only": lambda: launch(ptr, 1, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0),
        "cuda_array_interface": lambda: a.__cuda_array_interface__,
        "attributes_shape_strides_ptr": lambda: (a.shape, a.strides, a.data.ptr, a.dtype),
        "current_stream_ptr": lambda: cupy.cuda.get_current_stream().ptr,
        "numpy_scalars_5": lambda: (np.uint64(1), np.uint64(2), np.uint64(3), np.float32(1), np.float32(0)),
        "memsetAsync": lambda: cupy.cuda.runtime.memsetAsync(c.data.ptr, 0, c.nbytes,
                                                              cupy.cuda.get_current_stream().ptr),
        "fill_0": lambda: c.fill(0),
        "empty_64x64": lambda: cupy.empty((64, 64), cupy.float32),
    }
    out = []
    for name, call in rows.items():
        out.append({"piece": name, "us_per_call": round(per_call_us(call), 3)})
        print(json.dumps(out[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
