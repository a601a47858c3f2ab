"""The local work of a rank: where its arrays live and the one function every distributed
GEMM runs its local products through.

Host ranks hold NumPy arrays and multiply with NumPy (half types widened to float32, so a
partial product keeps float32 until the final result is rounded). GPU ranks hold CuPy arrays
on their device and multiply with ``kgen.gemm(a, b, out_dtype=...)``, so each local product
runs the tuned kernel from the database; nothing above this module changes. The rest of
kgen.dist works on a shard through ``array_module(shard)`` (NumPy's interface, which CuPy
shares), never through NumPy directly.

>>> import numpy as np
>>> c = HostCompute().gemm(np.ones((2, 3), np.float16), np.ones((3, 4), np.float16))
>>> c.dtype.name, float(c[0, 0]), array_module(c) is np
('float32', 3.0, True)
"""

from __future__ import annotations

import numpy as np

from kgen.dist.dtypes import accumulator


def array_module(x):
    """CuPy for a CuPy array, NumPy for anything else."""
    if type(x).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def index(xp, rows, cols):
    """The open mesh selecting ``rows`` x ``cols`` of an array of module ``xp``."""
    return xp.ix_(xp.asarray(rows), xp.asarray(cols))


def finish(acc, alpha: float, beta: float, c, dtype):
    """alpha * acc + beta * c, rounded to ``dtype`` once, at the end (any array module)."""
    scalar = np.dtype(acc.dtype).type
    out = acc if alpha == 1 else acc * scalar(alpha)
    if c is not None and beta != 0:
        out = out + scalar(beta) * c.astype(acc.dtype, copy=False)
    return array_module(out).ascontiguousarray(out.astype(dtype, copy=False))


class HostCompute:
    """NumPy local compute for host-memory ranks."""

    name = "numpy"
    xp = np

    def gemm(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a @ b in the accumulator type of a's dtype (float32 for half types)."""
        acc = accumulator(a.dtype)
        return np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))

    def product(self, a, b, alpha: float, beta: float, c, dtype):
        """alpha * a @ b + beta * c in ``dtype``, where a @ b is the whole sum (no other rank
        adds to it): one rounding at the end."""
        return finish(self.gemm(a, b), alpha, beta, c, dtype)

    def asarray(self, x, dtype=None):
        """``x`` as this compute's array (a copy only where needed)."""
        return np.ascontiguousarray(x, dtype=dtype)

    def to_host(self, x) -> np.ndarray:
        return np.asarray(x)


class DeviceCompute:
    """CuPy arrays on this rank's GPU; local products by ``kgen.gemm`` (the tuned kernels),
    accumulated and returned in float32 for half types, float64 for float64."""

    name = "kgen"

    def __init__(self, device: int):
        import cupy

        self.xp = cupy
        self.device = device

    def gemm(self, a, b):
        import kgen

        acc = accumulator(np.dtype(a.dtype))
        if 0 in a.shape or 0 in b.shape:
            return self.xp.zeros((a.shape[0], b.shape[1]), dtype=acc)
        out_dtype = None if np.dtype(a.dtype) == acc else acc.name
        return kgen.gemm(self.xp.ascontiguousarray(a), self.xp.ascontiguousarray(b), out_dtype=out_dtype)

    def product(self, a, b, alpha: float, beta: float, c, dtype):
        """As HostCompute.product, in one kgen.gemm (alpha, beta and the rounding fused)."""
        import kgen

        if 0 in a.shape or 0 in b.shape or np.dtype(dtype) != np.dtype(a.dtype):
            return finish(self.gemm(a, b), alpha, beta, c, dtype)
        out = self.xp.array(c, dtype=dtype, order="C", copy=True) if c is not None and beta != 0 else None
        a, b = self.xp.ascontiguousarray(a), self.xp.ascontiguousarray(b)
        return kgen.gemm(a, b, out, alpha, beta if out is not None else 0.0)   # out: C, written in place

    def asarray(self, x, dtype=None):
        if np.dtype(dtype if dtype is not None else x.dtype).name == "bfloat16":
            from kgen.errors import DtypeError

            raise DtypeError("GPU ranks hold float32, float64 and float16 shards (CuPy has no bfloat16)",
                             remedy='use float16, or kgen.dist.init("mpi") for bfloat16 host ranks')
        return self.xp.ascontiguousarray(self.xp.asarray(x, dtype=dtype))

    def to_host(self, x) -> np.ndarray:
        return self.xp.asnumpy(x)
