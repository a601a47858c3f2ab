"""Copies of the next chunk overlapped with kgen kernels on the current one, on two CUDA streams.

A large array in pinned host memory is processed in chunks: each chunk is copied to the GPU
(``cudaMemcpyAsync`` from pinned memory, which returns at once),
an elementwise expression runs on it (``kgen.elementwise``, on the current stream), and the
result is copied back. Serially, the copy engine and the SMs take turns; with two streams,
chunk i+1 moves while chunk i computes. The script checks both results against NumPy and
prints both times and the speed-up.

    python examples/stream_overlap.py            # 1 GiB in 16 chunks
    python examples/stream_overlap.py --mib 256 --chunks 8
"""

from __future__ import annotations

import argparse
import time

import numpy as np

EXPR = "tanh(x) * exp(-x * x) + sqrt(abs(x) + 1)"     # enough arithmetic for the copies to hide behind


def process(host_in, host_out, chunks: int, streams) -> float:
    """Seconds to move every chunk in, compute, and move it out, the chunks spread over ``streams``."""
    import cupy

    import kgen

    runtime = cupy.cuda.runtime
    n = host_in.size // chunks
    nbytes = n * host_in.itemsize
    buffers = [(cupy.empty(n, np.float32), cupy.empty(n, np.float32)) for _ in streams]
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for i in range(chunks):
        stream = streams[i % len(streams)]
        x, y = buffers[i % len(streams)]
        src, dst = host_in.ctypes.data + i * nbytes, host_out.ctypes.data + i * nbytes
        with stream:                      # kgen launches on the current stream: this one
            runtime.memcpyAsync(x.data.ptr, src, nbytes, runtime.memcpyHostToDevice, stream.ptr)
            kgen.elementwise(EXPR, x=x, out=y)
            runtime.memcpyAsync(dst, y.data.ptr, nbytes, runtime.memcpyDeviceToHost, stream.ptr)
    for stream in streams:
        stream.synchronize()
    return time.perf_counter() - start


def main() -> None:
    import cupy
    import cupyx

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="size of the array in MiB")
    parser.add_argument("--chunks", type=int, default=16)
    args = parser.parse_args()
    n = args.mib * (1 << 20) // 4 // args.chunks * args.chunks
    host_in = cupyx.empty_pinned(n, np.float32)
    host_in[:] = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    serial_out, overlap_out = cupyx.empty_pinned(n, np.float32), cupyx.empty_pinned(n, np.float32)

    one = [cupy.cuda.Stream(non_blocking=True)]
    two = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    process(host_in, serial_out, args.chunks, one)          # warm-up: the kernel is chosen and loaded
    serial = min(process(host_in, serial_out, args.chunks, one) for _ in range(3))
    overlapped = min(process(host_in, overlap_out, args.chunks, two) for _ in range(3))

    sample = slice(0, min(n, 1 << 20))
    x = host_in[sample].astype(np.float64)
    want = np.tanh(x) * np.exp(-x * x) + np.sqrt(np.abs(x) + 1)
    for name, out in (("serial", serial_out), ("overlapped", overlap_out)):
        err = float(np.max(np.abs(out[sample] - want)))
        assert err < 1e-5, f"{name} result is off by {err}"
    gb = 2 * n * 4 / 1e9
    print(f"{args.mib} MiB in {args.chunks} chunks, in and out: serial {serial * 1e3:.1f} ms ({gb / serial:.1f} GB/s), "
          f"two streams {overlapped * 1e3:.1f} ms ({gb / overlapped:.1f} GB/s): speed-up {serial / overlapped:.2f}x")


if __name__ == "__main__":
    main()
