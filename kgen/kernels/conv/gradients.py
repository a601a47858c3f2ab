"""A convolution's gradients as the forward kernels kgen has, where they are such.

For ``y = conv2d(x, w)`` with stride 1 on an axis, the data gradient is a convolution of
``dy`` with the weights flipped along R and S and their K and C swapped, padded by
``dilation * (taps - 1) - padding`` (which must not be negative) at the same dilation: every
input pixel gathers the output pixels its taps reached. A 1x1 convolution with no padding is a
GEMM over the pixels it reads (every ``stride``-th one), so its data gradient is the 1x1
convolution of dy with the transposed weights, written to those pixels (the others are zero),
and its weight gradient one GEMM, ``dW[K, C] = dy[NPQ, K]^T @ x[N, ::sh, ::sw, C]``. Other
cases (larger windows with strides, the weight gradient of larger windows) are not forward
convolutions or GEMMs without materialising something: the caller computes them otherwise.

>>> data_gradient_as_conv((3, 3), (1, 1), (1, 1), (1, 1))
((1, 1), (1, 1))
>>> data_gradient_as_conv((3, 3), (2, 2), (1, 1), (1, 1)) is None     # a strided convolution
True
>>> weight_gradient_is_gemm((1, 1), (2, 2), (0, 0))
True
>>> pointwise((1, 1), (2, 2), (0, 0))
True
"""

from __future__ import annotations

from typing import Sequence


def pointwise(taps: Sequence[int], stride: Sequence[int], padding: Sequence[int]) -> bool:
    """Whether the convolution is a GEMM over the pixels it reads (1x1 window, no padding, any
    stride): its data gradient is a 1x1 convolution scattered to every stride-th pixel."""
    return all(t == 1 for t in taps) and all(p == 0 for p in padding)


def data_gradient_as_conv(taps: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                          dilation: Sequence[int]) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """(padding, dilation) of the convolution of dy with the flipped, transposed weights that
    gives dx; None where there is none (a stride above 1, or more padding than the window
    reaches; a strided ``pointwise`` convolution has its own)."""
    if any(s != 1 for s in stride):
        return None
    pads = tuple(d * (t - 1) - p for t, p, d in zip(taps, padding, dilation))
    if any(p < 0 for p in pads):
        return None
    return (pads[0], pads[1]), (dilation[0], dilation[1])


def weight_gradient_is_gemm(taps: Sequence[int], stride: Sequence[int], padding: Sequence[int]) -> bool:
    """Whether the weight gradient is the one GEMM dy^T x over the pixels read (``pointwise``)."""
    return pointwise(taps, stride, padding)
