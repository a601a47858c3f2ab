"""The local work of a rank: where its arrays live and the one function every distributed
GEMM runs its local products through.

Host ranks hold NumPy arrays and multiply with NumPy (half types widened to float32, so a
partial product keeps float32 until the final result is rounded). A GPU backend's compute
would hold CuPy arrays and call ``kgen.gemm(a, b, out_dtype=...)`` here, so each local
product runs the tuned kernel from the database; nothing above this module changes.

>>> import numpy as np
>>> c = HostCompute().gemm(np.ones((2, 3), np.float16), np.ones((3, 4), np.float16))
>>> c.dtype.name, float(c[0, 0])
('float32', 3.0)
"""

from __future__ import annotations

import numpy as np

from kgen.dist.dtypes import accumulator


class HostCompute:
    """NumPy local compute for host-memory ranks."""

    name = "numpy"

    def gemm(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a @ b in the accumulator type of a's dtype (float32 for half types)."""
        acc = accumulator(a.dtype)
        return np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))

    def empty(self, shape, dtype) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def zeros(self, shape, dtype) -> np.ndarray:
        return np.zeros(shape, dtype=dtype)
