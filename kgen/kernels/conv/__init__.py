"""Convolution families: conv2d forward as an implicit GEMM on the tensor cores (``conv2d``)."""
