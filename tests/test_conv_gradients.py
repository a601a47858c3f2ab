"""kgen.kernels.conv.gradients with NumPy in float64 (no GPU, no PyTorch): the data gradient
assembled from its phases' stride-1 convolutions equals the adjoint of the convolution,
scattered tap by tap, for strides, paddings (more than the window reaches too), dilations and
odd sizes; the weight gradient of a 1x1 convolution is the one GEMM over the pixels read, and of
any window the forward convolution with batch and channels swapped."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kgen.kernels.conv.gradients import (covers_every_pixel, data_gradient_phases, weight_gradient_conv,
                                        weight_gradient_is_gemm)
from kgen.kernels.conv.problem import output_size


def conv(x, w, stride, padding, dilation):
    """Correlation of x (N, C, H, W) with w (K, C, R, S), as PyTorch's conv2d."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    p = output_size(h, r, stride[0], padding[0], dilation[0])
    q = output_size(wd, s, stride[1], padding[1], dilation[1])
    padded = np.zeros((n, c, h + 2 * padding[0], wd + 2 * padding[1]))
    padded[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + wd] = x
    y = np.zeros((n, k, p, q))
    for i, j in itertools.product(range(r), range(s)):
        rows = padded[:, :, i * dilation[0]:i * dilation[0] + stride[0] * (p - 1) + 1:stride[0],
                      j * dilation[1]:j * dilation[1] + stride[1] * (q - 1) + 1:stride[1]]
        y += np.einsum("nchw,kc->nkhw", rows, w[:, :, i, j])
    return y


def adjoint(dy, w, x_shape, stride, padding, dilation):
    """dx by the definition: each output pixel's gradient sent back along each tap."""
    n, c, h, wd = x_shape
    _, _, r, s = w.shape
    p, q = dy.shape[2:]
    dx = np.zeros((n, c, h + 2 * padding[0], wd + 2 * padding[1]))
    for i, j in itertools.product(range(r), range(s)):
        dx[:, :, i * dilation[0]:i * dilation[0] + stride[0] * (p - 1) + 1:stride[0],
           j * dilation[1]:j * dilation[1] + stride[1] * (q - 1) + 1:stride[1]] += np.einsum("nkhw,kc->nchw", dy,
                                                                                          w[:, :, i, j])
    return dx[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + wd]


def from_phases(dy, w, x_shape, stride, padding, dilation):
    h, wd = x_shape[2:]
    phases = data_gradient_phases(w.shape[2:], stride, padding, dilation, (h, wd), dy.shape[2:])
    dx = np.full(x_shape, np.nan) if covers_every_pixel(phases, stride) else np.zeros(x_shape)
    for ph in phases:
        sub = w[:, :, list(ph.taps[0]), :][:, :, :, list(ph.taps[1])]
        rows, cols = ph.flipped_slices(w.shape[2:])          # what kgen.torch takes, with no index array
        assert np.array_equal(w[:, :, ::-1, ::-1][:, :, rows, cols], sub)
        sub = sub.transpose(1, 0, 2, 3)
        out = conv(dy, sub, (1, 1), ph.padding, ph.dilation)
        (top, left), (rows, cols) = ph.crop, ph.size
        assert out.shape[2] >= top + rows and out.shape[3] >= left + cols
        dx[:, :, ph.offset[0]::stride[0], ph.offset[1]::stride[1]] = out[:, :, top:top + rows, left:left + cols]
    return dx


CASES = [  # (H, W), window, stride, padding, dilation
    ((8, 8), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((9, 7), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((8, 8), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((11, 10), (7, 7), (2, 2), (3, 3), (1, 1)),
    ((7, 9), (1, 1), (2, 3), (0, 0), (1, 1)),
    ((10, 10), (3, 2), (1, 2), (2, 0), (2, 1)),
    ((12, 11), (3, 3), (2, 3), (2, 1), (2, 3)),
    ((6, 6), (3, 3), (1, 1), (3, 3), (1, 1)),         # padding past the window: cropped
    ((5, 13), (2, 4), (3, 2), (1, 2), (1, 1)),
    ((4, 4), (1, 1), (3, 3), (1, 1), (1, 1)),         # padded 1x1: phases no tap reaches stay zero
]


@pytest.mark.parametrize("size, window, stride, padding, dilation", CASES)
def test_phases_give_the_data_gradient(size, window, stride, padding, dilation):
    rng = np.random.default_rng(sum(size) + sum(window))
    x_shape = (2, 3, *size)
    w = rng.standard_normal((4, 3, *window))
    p, q = (output_size(size[0], window[0], stride[0], padding[0], dilation[0]),
            output_size(size[1], window[1], stride[1], padding[1], dilation[1]))
    dy = rng.standard_normal((2, 4, p, q))
    want = adjoint(dy, w, x_shape, stride, padding, dilation)
    x = rng.standard_normal(x_shape)           # the adjoint is right: <conv(x), dy> == <x, dx>
    assert np.isclose(np.vdot(conv(x, w, stride, padding, dilation), dy), np.vdot(x, want))
    np.testing.assert_allclose(from_phases(dy, w, x_shape, stride, padding, dilation), want, rtol=1e-12, atol=1e-12)


def test_stride_one_is_one_convolution():
    (phase,) = data_gradient_phases((3, 5), (1, 1), (1, 2), (2, 1), (10, 10), (8, 10))
    assert phase.taps == ((2, 1, 0), (4, 3, 2, 1, 0)) and phase.padding == (3, 2) and phase.crop == (0, 0)


def test_weight_gradient_of_a_pointwise_convolution_is_one_gemm():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 9, 8))
    dy = rng.standard_normal((2, 6, 5, 3))                   # stride (2, 3)
    assert weight_gradient_is_gemm((1, 1), (2, 3), (0, 0)) and not weight_gradient_is_gemm((1, 1), (1, 1), (1, 0))
    pixels_x = x[:, :, ::2, ::3].transpose(0, 2, 3, 1).reshape(-1, 5)
    pixels_g = dy.transpose(0, 2, 3, 1).reshape(-1, 6)
    gemm = pixels_g.T @ pixels_x
    eps = np.zeros((6, 5, 1, 1))                            # d<conv(x, w), dy>/dw[2, 3]: conv is linear in w
    eps[2, 3] = 1.0
    assert np.isclose(np.vdot(conv(x, eps, (2, 3), (0, 0), (1, 1)), dy), gemm[2, 3])


def weight_gradient(x, dy, window, stride, padding, dilation):
    """dW by the definition: each tap's sum over the pixels it read times dy."""
    n, c, h, wd = x.shape
    p, q = dy.shape[2:]
    padded = np.zeros((n, c, h + 2 * padding[0], wd + 2 * padding[1]))
    padded[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + wd] = x
    dw = np.zeros((dy.shape[1], c, *window))
    for i, j in itertools.product(range(window[0]), range(window[1])):
        rows = padded[:, :, i * dilation[0]:i * dilation[0] + stride[0] * (p - 1) + 1:stride[0],
                      j * dilation[1]:j * dilation[1] + stride[1] * (q - 1) + 1:stride[1]]
        dw[:, :, i, j] = np.einsum("nchw,nkhw->kc", rows, dy)
    return dw


@pytest.mark.parametrize("size, window, stride, padding, dilation", CASES)
def test_the_swapped_convolution_gives_the_weight_gradient(size, window, stride, padding, dilation):
    rng = np.random.default_rng(sum(size) * 3 + sum(window))
    x = rng.standard_normal((3, 2, *size))
    p, q = (output_size(size[0], window[0], stride[0], padding[0], dilation[0]),
            output_size(size[1], window[1], stride[1], padding[1], dilation[1]))
    dy = rng.standard_normal((3, 4, p, q))
    want = weight_gradient(x, dy, window, stride, padding, dilation)
    w = rng.standard_normal(want.shape)               # the definition is right: d<conv(x, w), dy>/dw
    eps = 1e-3
    bumped = w.copy()
    bumped[1, 0, window[0] - 1, 0] += eps
    slope = (np.vdot(conv(x, bumped, stride, padding, dilation), dy) - np.vdot(conv(x, w, stride, padding, dilation),
                                                                                dy)) / eps
    assert np.isclose(slope, want[1, 0, window[0] - 1, 0])
    plan = weight_gradient_conv(window, stride, padding, dilation, size, (p, q))
    out = conv(x.transpose(1, 0, 2, 3), dy.transpose(1, 0, 2, 3), plan.stride, plan.padding, plan.dilation)
    assert out.shape == (2, 4, *plan.size) and plan.size[0] >= window[0] and plan.size[1] >= window[1]
    np.testing.assert_allclose(out[:, :, :window[0], :window[1]].transpose(1, 0, 2, 3), want, rtol=1e-12, atol=1e-12)


def test_a_window_that_cannot_give_the_output_is_refused():
    with pytest.raises(ValueError, match="does not come from"):
        weight_gradient_conv((3, 3), (1, 1), (0, 0), (1, 1), (8, 8), (7, 7))
