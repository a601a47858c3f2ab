"""A convolution's gradients as the forward kernels kgen has, where they are such.

The data gradient of ``y = conv2d(x, w)`` is forward convolutions of ``dy``. Along one axis
(stride S, padding P, dilation D), the input rows ``h = S*i + a`` of one phase ``a`` in
0..S-1 receive from the window taps ``r`` with ``D*r = a + P (mod S)``, each from output row
``i + (a + P - D*r) / S``; those offsets are evenly spaced, so the phase is a correlation of
dy with the window cut to those taps (in reverse order: the flip), at dilation
``D / gcd(S, D)``, K and C swapped, padded and cropped to the phase's rows. At stride 1 that is
one convolution, padded by ``D*(R-1) - P``; at stride S the S*S phases are convolutions whose
results go to every S-th pixel (a phase no tap reaches is zero).

A 1x1 convolution with no padding is a GEMM over the pixels it reads (every stride-th one), so
its weight gradient is one GEMM, ``dW[K, C] = dy[NPQ, K]^T @ x[N, ::sh, ::sw, C]``. The weight
gradient of any window is a forward convolution with the roles of batch and channels swapped:
``dW[k, c, r, s] = sum over n, p, q of x[n, c, S*p + D*r - P, ...] * dy[n, k, p, q]`` is the
convolution of the C images ``x[:, c]`` (N channels each) with the K filters ``dy[:, k]`` (N
channels, a P x Q window), whose window taps lie S apart (dilation S) and whose output pixels
step D (stride D), padded by P: ``weight_gradient_conv`` gives that convolution, whose output
(at least R x S) is cut to the window.

>>> data_gradient_phases((3, 3), (1, 1), (1, 1), (1, 1), (8, 8), (8, 8))[0]
Phase(offset=(0, 0), taps=((2, 1, 0), (2, 1, 0)), padding=(1, 1), dilation=(1, 1), crop=(0, 0), size=(8, 8))
>>> [p.taps for p in data_gradient_phases((3, 3), (2, 2), (1, 1), (1, 1), (8, 8), (4, 4))]
[((1,), (1,)), ((1,), (2, 0)), ((2, 0), (1,)), ((2, 0), (2, 0))]
>>> data_gradient_phases((3, 3), (2, 2), (1, 1), (1, 1), (8, 8), (4, 4))[3].flipped_slices((3, 3))
(slice(0, 3, 2), slice(0, 3, 2))
>>> weight_gradient_is_gemm((1, 1), (2, 2), (0, 0))
True
>>> weight_gradient_conv((3, 3), (2, 2), (1, 1), (1, 1), (56, 56), (28, 28))
SwappedConv(stride=(1, 1), padding=(1, 1), dilation=(2, 2), size=(4, 4))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Phase:
    """The pixels ``dx[:, offset[0]::stride_h, offset[1]::stride_w]`` of a data gradient: the
    convolution of dy (stride 1) with the window taps ``taps`` (rows, then columns, in this
    order) of the weights, K and C swapped, at ``padding`` and ``dilation``, its output cropped
    from ``crop`` to ``size``."""

    offset: tuple[int, int]
    taps: tuple[tuple[int, ...], tuple[int, ...]]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    crop: tuple[int, int]
    size: tuple[int, int]

    def flipped_slices(self, window: Sequence[int]) -> tuple[slice, slice]:
        """The taps as basic slices of the window flipped along both axes (``w.flip((2, 3))[:, :,
        rows, cols]`` is ``w[:, :, taps[0]][:, :, :, taps[1]]``): a phase's taps are evenly spaced
        and descending, so no index array is needed (on a GPU tensor, indexing with a list copies
        the list from the host and waits for the device)."""
        return tuple(_flipped_slice(taps, size) for taps, size in zip(self.taps, window))


def _flipped_slice(taps: tuple[int, ...], window: int) -> slice:
    step = taps[0] - taps[1] if len(taps) > 1 else 1
    if any(a - b != step for a, b in zip(taps, taps[1:])) or step < 1:
        raise ValueError(f"taps {taps} are not evenly spaced and descending")
    return slice(window - 1 - taps[0], window - taps[-1], step)


def _axis_phase(a: int, window: int, stride: int, pad: int, dilation: int, in_size: int, out_size: int):
    """(taps, padding, dilation, crop, size) of phase ``a`` along one axis; None where no tap
    reaches it or it holds no pixel."""
    size = -(-(in_size - a) // stride)                 # rows S*i + a below in_size
    taps = [r for r in range(window) if (a + pad - dilation * r) % stride == 0]
    if size <= 0 or not taps:
        return None
    taps.reverse()                                     # by output row offset, ascending
    step = dilation // math.gcd(stride, dilation)      # the offsets' spacing
    first = (a + pad - dilation * taps[0]) // stride   # the smallest output row offset
    span = step * (len(taps) - 1)
    padding = max(0, -first, size + first + span - out_size)
    return tuple(taps), padding, step, first + padding, size


def data_gradient_phases(window: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                         dilation: Sequence[int], in_size: Sequence[int], out_size: Sequence[int]) -> list[Phase]:
    """The phases of the data gradient that some tap reaches (the others are zero), each a
    stride-1 convolution of dy; ``in_size`` is x's (H, W), ``out_size`` y's (P, Q)."""
    rows = [(a, _axis_phase(a, window[0], stride[0], padding[0], dilation[0], in_size[0], out_size[0]))
            for a in range(stride[0])]
    cols = [(b, _axis_phase(b, window[1], stride[1], padding[1], dilation[1], in_size[1], out_size[1]))
            for b in range(stride[1])]
    return [Phase((a, b), (row[0], col[0]), (row[1], col[1]), (row[2], col[2]), (row[3], col[3]), (row[4], col[4]))
            for a, row in rows if row is not None for b, col in cols if col is not None]


def covers_every_pixel(phases: Sequence[Phase], stride: Sequence[int]) -> bool:
    """Whether the phases write every pixel of dx (else the rest must be zeroed first)."""
    return len(phases) == stride[0] * stride[1]


def weight_gradient_is_gemm(taps: Sequence[int], stride: Sequence[int], padding: Sequence[int]) -> bool:
    """Whether the weight gradient is the one GEMM dy^T x over the pixels read (1x1, no padding)."""
    return all(t == 1 for t in taps) and all(p == 0 for p in padding)


@dataclass(frozen=True)
class SwappedConv:
    """The forward convolution giving a weight gradient: images x transposed to (C, N, H, W),
    filters dy transposed to (K, N, P, Q), at this ``stride``, ``padding`` and ``dilation``;
    its output (C, K, ``size``) holds dW (transposed) in its first R x S pixels."""

    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    size: tuple[int, int]


def weight_gradient_conv(window: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                         dilation: Sequence[int], in_size: Sequence[int], out_size: Sequence[int]) -> SwappedConv:
    """The forward convolution of the weight gradient of ``y = conv2d(x, w)`` (see the module's
    text); ``in_size`` is x's (H, W), ``out_size`` y's (P, Q)."""
    size = tuple((h + 2 * p - s * (q - 1) - 1) // d + 1
                 for h, p, s, q, d in zip(in_size, padding, stride, out_size, dilation))
    if any(got < want for got, want in zip(size, window)):
        raise ValueError(f"a {tuple(out_size)} output does not come from a {tuple(window)} window on "
                         f"{tuple(in_size)} pixels at stride {tuple(stride)}, padding {tuple(padding)}")
    return SwappedConv(tuple(dilation), tuple(padding), tuple(stride), size)
