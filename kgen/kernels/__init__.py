"""The built-in kernel families; importing this registers them."""

from kgen.kernels import gemm, gemm_mma, gemm_wgmma  # noqa: F401
