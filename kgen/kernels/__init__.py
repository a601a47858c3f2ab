"""The built-in kernel families; importing this registers them."""

from kgen.kernels import gemm, gemm_mma  # noqa: F401
