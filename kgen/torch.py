"""kgen's operations as PyTorch custom operators: ``torch.ops.kgen.gemm``, ``gemm_grouped``,
``conv2d``, ``softmax``, ``rmsnorm`` and ``permute`` (the weight gradient's layout change), each
with a fake (meta) implementation giving its output's shape, dtype and strides, and a backward.

Importing this module registers them; ``kgen.gemm`` and the others hand a call to them (and
import this module) when ``torch.compile`` traces it or autograd records it (a tensor that
requires grad, grad mode on). Inside ``torch.compile(fullgraph=True)`` a call of ``kgen.gemm``
(``kgen.conv2d``, ``kgen.softmax``, ``kgen.rmsnorm``) on tensors becomes one node of the
graph, with no break; the compiled graph calls kgen's kernel on PyTorch's current
stream, so it can be captured into a CUDA graph (``torch.cuda.graph``, or
``mode="reduce-overhead"``) once a call outside the capture has chosen and loaded the kernel.

Backward: ``gemm`` by two GEMMs through kgen (dA = dC Bᵀ, dB = Aᵀ dC, each scaled by alpha,
through the activation's derivative; dbias = the column sums); ``gemm_grouped`` by its own
grouped GEMM for the rows (dA = dC Bᵀ, group by group in one launch) and by its K-grouped GEMM
for the weights (dB[g] = A_gᵀ dC_g in one launch, ``kgen.gemm_kgrouped``); ``softmax`` and ``rmsnorm`` by
their closed forms in PyTorch ops; ``conv2d``'s data gradient by kgen's convolutions of dy, one
per phase of the stride (``kgen.kernels.conv.gradients``), its weight gradient by a kgen GEMM
where it is one (1x1 windows, no padding), else by kgen's convolution of x's channels with dy's
(batch and channels swapped by ``permute``); by PyTorch's (cuDNN) ``torch.nn.grad`` with
``KGEN_CONV_GRADIENTS=torch``.

>>> # import torch, kgen, kgen.torch
>>> # f = torch.compile(lambda a, b: kgen.gemm(a, b, activation="relu"), fullgraph=True)
>>> # f(a, b).sum().backward()
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from kgen.arrays import array_kind
from kgen.errors import InputError, KgenError
from kgen.kernels.conv.gradients import (covers_every_pixel, data_gradient_phases, weight_gradient_conv,
                                        weight_gradient_is_gemm)
from kgen.kernels.conv.problem import output_size, pair
from kgen.knobs import knobs

Tensor = torch.Tensor
_LIB = "kgen"


def _dtype_name(dtype: Optional[torch.dtype]) -> Optional[str]:
    return None if dtype is None else str(dtype).removeprefix("torch.")


def _as_dtype(name: Optional[str]) -> Optional[torch.dtype]:
    return None if name is None else getattr(torch, name)


# ---- GEMM ----------------------------------------------------------------------------------

@torch.library.custom_op(f"{_LIB}::gemm", mutates_args=())
def _gemm(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, activation: Optional[str] = None,
          precision: Optional[str] = None, out_dtype: Optional[torch.dtype] = None, alpha: float = 1.0) -> Tensor:
    from kgen.ops.gemm import gemm as eager

    a, b, bias = _plain(a, b, bias)
    return eager(a, b, alpha=alpha, bias=bias, activation=activation, precision=precision,
                 out_dtype=_dtype_name(out_dtype))


def _batched_shape(a: Tensor, b: Tensor) -> tuple:
    """(leading batch dims of the result, m, n) as ``kgen.gemm`` makes them."""
    m, n = a.shape[-2], b.shape[-1]
    if a.dim() == 2 and b.dim() == 2:
        return (), m, n
    batch_a = a.shape[0] if a.dim() == 3 else 1
    batch_b = b.shape[0] if b.dim() == 3 else 1
    return (max(batch_a, batch_b),), m, n


@_gemm.register_fake
def _gemm_fake(a, b, bias=None, activation=None, precision=None, out_dtype=None, alpha=1.0):
    torch._check(a.shape[-1] == b.shape[-2], lambda: f"kgen.gemm: inner dimensions differ: {a.shape} @ {b.shape}")
    batch, m, n = _batched_shape(a, b)
    return a.new_empty((*batch, m, n), dtype=out_dtype or a.dtype)


def _gemm_setup(ctx, inputs, output):
    a, b, bias, activation, precision, out_dtype, alpha = inputs
    ctx.options = (activation, precision, alpha, bias is not None)
    ctx.save_for_backward(a, b, bias, output if activation == "relu" else None)


def _gelu_derivative(z: Tensor) -> Tensor:
    """d/dz of z * Phi(z) (gelu, erf form), in float32."""
    z = z.float()
    return 0.5 * (1 + torch.erf(z / math.sqrt(2))) + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _summed_to(grad: Tensor, like: Tensor) -> Tensor:
    """A batched gradient summed over the batch that ``like`` was broadcast across."""
    if grad.dim() > like.dim():
        grad = grad.sum(0)
    elif like.dim() == 3 and like.shape[0] == 1 and grad.shape[0] != 1:
        grad = grad.sum(0, keepdim=True)
    return grad


def _gemm_backward(ctx, grad):
    a, b, bias, output = ctx.saved_tensors
    activation, precision, alpha, has_bias = ctx.options
    g = grad
    if activation == "relu":
        g = g * (output > 0)
    elif activation == "gelu":
        z = _gemm(a, b, bias, None, precision, grad.dtype, alpha)      # the pre-activation, again
        g = (g.float() * _gelu_derivative(z)).to(grad.dtype)
    grad_bias = g.sum(dim=tuple(range(g.dim() - 1))).to(bias.dtype) if has_bias else None
    g = g.to(a.dtype)
    if g.stride(-1) != 1 and g.stride(-2) != 1:
        g = g.contiguous()
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = _summed_to(_gemm(g, b.transpose(-1, -2), None, None, precision, None, alpha), a)
    if ctx.needs_input_grad[1]:
        if a.dim() == 3 and b.dim() == 2:       # every batch read b: one GEMM over all rows
            grad_b = _gemm(a.reshape(-1, a.shape[-1]).t(), g.reshape(-1, g.shape[-1]), None, None, precision, None,
                           alpha)
        else:
            grad_b = _summed_to(_gemm(a.transpose(-1, -2), g, None, None, precision, None, alpha), b)
    return grad_a, grad_b, grad_bias, None, None, None, None


_gemm.register_autograd(_gemm_backward, setup_context=_gemm_setup)


def gemm(a, b, c=None, alpha: float = 1.0, beta: float = 0.0, *, bias=None, activation=None, precision=None,
         dtype=None, out_dtype=None):
    """``kgen.gemm`` as the custom operator (what a ``torch.compile`` trace or autograd records
    of it): the functional form only, a new result."""
    if c is not None or beta != 0.0:
        raise InputError("in PyTorch's graph (torch.compile, or autograd recording), kgen.gemm returns a new "
                         "tensor: c and beta are not taken",
                         remedy="add beta * c to the result yourself, or call kgen.gemm outside them "
                                "(under torch.no_grad(), outside the compiled function)")
    if dtype is not None:
        raise InputError("dtype= names what CuPy uint16 arrays hold; PyTorch tensors carry their dtype",
                         remedy="leave dtype unset")
    return _gemm(a, b, bias, activation, precision, _as_dtype(out_dtype), float(alpha))


# ---- grouped GEMM (mixture of experts) -----------------------------------------------------

@torch.library.custom_op(f"{_LIB}::gemm_grouped", mutates_args=())
def _gemm_grouped(a: Tensor, b: Tensor, ends: Tensor, activation: Optional[str] = None,
                  precision: Optional[str] = None, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    from kgen.ops.gemm_grouped import gemm_grouped as eager

    a, b, ends = _plain(a, b, ends)
    out = a.new_zeros((a.shape[0], b.shape[-1]), dtype=out_dtype or a.dtype)   # rows past ends[-1]: zeros
    return eager(a, b, ends, out, activation=activation, precision=precision, out_dtype=_dtype_name(out_dtype))


@_gemm_grouped.register_fake
def _gemm_grouped_fake(a, b, ends, activation=None, precision=None, out_dtype=None):
    torch._check(a.dim() == 2 and b.dim() == 3 and a.shape[1] == b.shape[1],
                 lambda: f"kgen.gemm_grouped: a (T, K) and b (G, K, N) expected; got {a.shape} and {b.shape}")
    return a.new_empty((a.shape[0], b.shape[2]), dtype=out_dtype or a.dtype)


@torch.library.custom_op(f"{_LIB}::gemm_grouped_weight_gradient", mutates_args=())
def _grouped_weight_gradient(a: Tensor, g: Tensor, ends: Tensor, groups: int, precision: Optional[str] = None) -> Tensor:
    """(G, K, N): a[rows of group i]ᵀ @ g[rows of group i] for each group i (zeros for an empty
    one), by kgen's K-grouped GEMM in one launch (``kgen.gemm_kgrouped``: the ends stay on the
    device, no synchronisation)."""
    from kgen.ops.gemm_kgrouped import gemm_kgrouped

    a, g, ends = _plain(a, g, ends)
    return gemm_kgrouped(a.contiguous(), g.contiguous(), ends, precision=precision)


@_grouped_weight_gradient.register_fake
def _grouped_weight_gradient_fake(a, g, ends, groups, precision=None):
    return a.new_empty((groups, a.shape[1], g.shape[1]))


def _gemm_grouped_setup(ctx, inputs, output):
    a, b, ends, activation, precision, out_dtype = inputs
    ctx.options = (activation, precision)
    ctx.save_for_backward(a, b, ends, output if activation == "relu" else None)


def _gemm_grouped_backward(ctx, grad):
    a, b, ends, output = ctx.saved_tensors
    activation, precision = ctx.options
    g = grad
    if activation == "relu":
        g = g * (output > 0)
    elif activation == "gelu":
        z = _gemm_grouped(a, b, ends, None, precision, grad.dtype)      # the pre-activation, again
        g = (g.float() * _gelu_derivative(z)).to(grad.dtype)
    g = g.to(a.dtype).contiguous()
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:          # each group's rows times its matrix transposed: the same grouping
        grad_a = _gemm_grouped(g, b.transpose(1, 2), ends, None, precision, None)
    if ctx.needs_input_grad[1]:
        grad_b = _grouped_weight_gradient(a, g, ends, b.shape[0], precision).to(b.dtype)
    return grad_a, grad_b, None, None, None, None


_gemm_grouped.register_autograd(_gemm_grouped_backward, setup_context=_gemm_grouped_setup)


def gemm_grouped(a, b, ends, out=None, *, activation=None, precision=None, dtype=None, out_dtype=None):
    """``kgen.gemm_grouped`` as the custom operator (functional form only; ``ends`` a host
    sequence becomes an int32 tensor on a's device). Rows at and past ``ends[-1]`` are zeros."""
    if out is not None or dtype is not None:
        raise InputError("in PyTorch's graph (torch.compile, or autograd recording), kgen.gemm_grouped returns a "
                         "new tensor and reads the tensors' dtype: out and dtype are not taken",
                         remedy="leave out and dtype unset, or call it under torch.no_grad()")
    if not isinstance(ends, torch.Tensor):       # a host sequence: checked as the eager call checks it
        from kgen.ops.gemm_grouped import host_ends

        checked = host_ends(ends, b.shape[0] if b.dim() == 3 else len(ends), a.shape[0])
        if checked is None:                      # another library's device array
            raise InputError(f"ends is a {array_kind(ends)} array and a a PyTorch tensor",
                             remedy="pass ends as an int32 tensor or a list of ints")
        ends = torch.from_numpy(checked).to(a.device)
    return _gemm_grouped(a, b, ends, activation, precision, _as_dtype(out_dtype))


def gemm_kgrouped(a, b, ends, out=None, *, precision=None, dtype=None, out_dtype=None):
    """``kgen.gemm_kgrouped`` as the custom operator (functional form, the inputs' dtype out; the
    operator has no backward of its own: it is the grouped GEMM's weight gradient)."""
    if out is not None or dtype is not None or out_dtype is not None:
        raise InputError("in PyTorch's graph (torch.compile, or autograd recording), kgen.gemm_kgrouped returns a "
                         "new tensor of the inputs' dtype: out, dtype and out_dtype are not taken",
                         remedy="leave them unset, or call it under torch.no_grad()")
    if not isinstance(ends, torch.Tensor):
        from kgen.ops.gemm_grouped import ends_count, host_ends

        checked = host_ends(ends, ends_count(ends), a.shape[0])
        if checked is None:
            raise InputError(f"ends is a {array_kind(ends)} array and a a PyTorch tensor",
                             remedy="pass ends as an int32 tensor or a list of ints")
        ends = torch.from_numpy(checked).to(a.device)
    return _grouped_weight_gradient(a, b, ends, ends.shape[0], precision)


# ---- conv2d --------------------------------------------------------------------------------

def _concrete(value):
    """``value`` (an int, or a list or tuple of them) with torch.compile's symbolic integers made
    plain ints (a traced call whose stride changed between compiles gets SymInts; the kernel's
    geometry needs numbers, so the graph specialises on them)."""
    if isinstance(value, (list, tuple)):
        return type(value)(int(v) if isinstance(v, torch.SymInt) else v for v in value)
    return int(value) if isinstance(value, torch.SymInt) else value


def _pairs(stride, padding, dilation) -> tuple[list[int], list[int], list[int]]:
    """Stride, padding and dilation as (height, width) lists, checked (typed errors)."""
    stride, padding, dilation = _concrete(stride), _concrete(padding), _concrete(dilation)
    return list(pair(stride, "stride", 1)), list(pair(padding, "padding", 0)), list(pair(dilation, "dilation", 1))


def _plain(*tensors):
    """The operator's inputs without their autograd history: its implementation hands them to
    kgen's eager call, which reads them through __cuda_array_interface__ (refused on a
    tensor that requires grad); the operator's own backward gives the gradients."""
    return tuple(t.detach() if t is not None else None for t in tensors)


@torch.library.custom_op(f"{_LIB}::conv2d", mutates_args=())
def _conv2d(x: Tensor, w: Tensor, bias: Optional[Tensor], stride: Sequence[int], padding: Sequence[int],
            dilation: Sequence[int], activation: Optional[str] = None, precision: Optional[str] = None,
            out_dtype: Optional[torch.dtype] = None) -> Tensor:
    from kgen.ops.conv import conv2d as eager

    x, w, bias = _plain(x, w, bias)
    return eager(x, w, bias, tuple(stride), tuple(padding), tuple(dilation), activation,
                 out_dtype=_dtype_name(out_dtype), precision=precision)


@_conv2d.register_fake
def _conv2d_fake(x, w, bias, stride, padding, dilation, activation=None, precision=None, out_dtype=None):
    torch._check(x.dim() == 4 and w.dim() == 4, lambda: "kgen.conv2d: x and w are 4-D")
    torch._check(x.shape[1] == w.shape[1], lambda: f"kgen.conv2d: x has {x.shape[1]} channels, w {w.shape[1]}")
    return _conv_output(x, w, stride, padding, dilation, out_dtype)


def _conv_output(x, w, stride, padding, dilation, dtype=None):
    """An empty channels-last (N, K, P, Q) result of convolving ``x`` with ``w`` (K filters)."""
    p = output_size(x.shape[2], w.shape[2], stride[0], padding[0], dilation[0])
    q = output_size(x.shape[3], w.shape[3], stride[1], padding[1], dilation[1])
    n, k = x.shape[0], w.shape[0]
    return x.new_empty_strided((n, k, p, q), (p * q * k, 1, q * k, k), dtype=dtype or x.dtype)


def _conv2d_setup(ctx, inputs, output):
    x, w, bias, stride, padding, dilation, activation, precision, out_dtype = inputs
    ctx.options = (list(stride), list(padding), list(dilation), activation, precision, bias is not None)
    ctx.save_for_backward(x, w, bias, output if activation == "relu" else None)


def data_gradient(x, w, dy, stride=1, padding=0, dilation=1, precision=None):
    """dx of ``y = conv2d(x, w)`` given ``dy``, channels-last, x's shape: where the window is 1x1
    with no padding, one kgen GEMM over the pixels read (``dx[NPQ, C] = dy[NPQ, K] @ W[K, C]``,
    zeros at the pixels a stride skips); else kgen's convolutions of dy, one per phase of the
    stride (``kgen.kernels.conv.gradients``)."""
    stride, padding, dilation = _pairs(stride, padding, dilation)
    if weight_gradient_is_gemm(w.shape[2:], stride, padding):       # 1x1, no padding: a GEMM both ways
        k, c = w.shape[0], w.shape[1]
        n, _, p, q = dy.shape
        pixels = dy.permute(0, 2, 3, 1).reshape(-1, k)
        out = _gemm(pixels, w.reshape(k, c), None, None, precision, None, 1.0).reshape(n, p, q, c).permute(0, 3, 1, 2)
        if stride == [1, 1]:
            return out.contiguous(memory_format=torch.channels_last)
        grad_x = torch.zeros_like(x, memory_format=torch.channels_last)
        grad_x[:, :, ::stride[0], ::stride[1]] = out
        return grad_x
    phases = data_gradient_phases(w.shape[2:], stride, padding, dilation, x.shape[2:], dy.shape[2:])
    dy = dy.contiguous(memory_format=torch.channels_last)
    flipped = w.flip((2, 3))

    def phase_output(phase):
        taps = flipped[(slice(None), slice(None)) + phase.flipped_slices(w.shape[2:])]
        sub = taps.transpose(0, 1).contiguous(memory_format=torch.channels_last)
        return _conv2d(dy, sub, None, [1, 1], list(phase.padding), list(phase.dilation), None, precision, None)

    first = None
    if len(phases) == 1 and stride == [1, 1]:
        first = phase_output(phases[0])
        (top, left), (rows, cols) = phases[0].crop, phases[0].size
        if (top, left) == (0, 0) and tuple(first.shape[2:]) == (rows, cols):
            return first                                 # stride 1: the one convolution is dx
    fresh = torch.empty_like if covers_every_pixel(phases, stride) else torch.zeros_like
    grad_x = fresh(x, memory_format=torch.channels_last)

    def place(phase, out):
        (top, left), (rows, cols) = phase.crop, phase.size
        grad_x[:, :, phase.offset[0]::stride[0], phase.offset[1]::stride[1]] = out[:, :, top:top + rows,
                                                                                    left:left + cols]

    if first is not None:                                # stride 1, its one phase cropped
        place(phases[0], first)
        return grad_x
    streams = _phase_streams(len(phases), dy)
    if streams is None:
        for phase in phases:
            place(phase, phase_output(phase))
        return grad_x
    caller = torch.cuda.current_stream(dy.device)
    for side in streams:                                 # the side streams start after what the caller queued
        side.wait_stream(caller)
    for i, phase in enumerate(phases):
        with torch.cuda.stream(streams[i % len(streams)]):
            place(phase, phase_output(phase))
    for side in streams:                                 # and the caller goes on once every phase is in place
        caller.wait_stream(side)
    return grad_x


_PHASE_STREAMS: dict[int, list] = {}


def _phase_streams(count: int, dy: Tensor) -> Optional[list]:
    """Side streams of ``dy``'s device for ``count`` phase convolutions to run at once (each fills
    only part of the GPU: a stride-2 3x3 layer's four phases at 14x14 are 100-130 tiles each
    for 132 SMs), at most ``KGEN_CONV_PHASE_STREAMS`` of them, made once per device; None where
    the phases run one after another on the caller's stream: the knob under 2, one phase, a
    traced call (``torch.compile``: the graph orders its nodes itself), or a CUDA graph capture."""
    from torch._subclasses.fake_tensor import is_fake

    wanted = min(count, knobs.conv_phase_streams)
    if (wanted < 2 or not dy.is_cuda or torch.compiler.is_compiling() or is_fake(dy)
            or torch.cuda.is_current_stream_capturing()):
        return None
    device = dy.device.index if dy.device.index is not None else torch.cuda.current_device()
    made = _PHASE_STREAMS.setdefault(device, [])
    while len(made) < wanted:
        made.append(torch.cuda.Stream(device=device))
    return made[:wanted]


def weight_gradient(x, w, dy, stride=1, padding=0, dilation=1, precision=None):
    """dW of ``y = conv2d(x, w)`` given ``dy``: one kgen GEMM over the pixels read where the window
    is 1x1 with no padding (``dW[K, C] = dy^T x``), else kgen's convolution of the C images of x
    (N channels each) with the K filters of dy (``kgen.kernels.conv.gradients``)."""
    stride, padding, dilation = _pairs(stride, padding, dilation)
    k, c = w.shape[0], w.shape[1]
    if _one_wgrad_kernel_runs(x, w, dy, stride, padding, dilation, precision):
        return _conv2d_weight_gradient(x, dy, list(w.shape[2:]), stride, padding, dilation)
    if not weight_gradient_is_gemm(w.shape[2:], stride, padding):
        plan = weight_gradient_conv(w.shape[2:], stride, padding, dilation, x.shape[2:], dy.shape[2:])
        images = _batch_and_channels_swapped(x)                                    # (C, N, H, W)
        filters = _batch_and_channels_swapped(dy)                                  # (K, N, P, Q)
        out = _conv2d(images, filters, None, list(plan.stride), list(plan.padding), list(plan.dilation), None,
                      precision, None)
        return out[:, :, :w.shape[2], :w.shape[3]].transpose(0, 1).contiguous()
    pixels_x = x[:, :, ::stride[0], ::stride[1]].permute(0, 2, 3, 1).reshape(-1, c)
    pixels_g = dy.permute(0, 2, 3, 1).reshape(-1, k)
    return _gemm(pixels_g.t(), pixels_x, None, None, precision, None, 1.0).reshape(k, c, 1, 1)


def _one_wgrad_kernel_runs(x, w, dy, stride, padding, dilation, precision) -> bool:
    """Whether ``conv2d_wgrad_wgmma`` takes this weight gradient: 16-bit channels-last CUDA
    tensors of a problem it supports, other than a 1x1 window at stride 1 with no padding (one
    plain GEMM over dy and x as they lie)."""
    from kgen.kernels.conv.conv2d_wgrad_wgmma import DTYPES, wgrad_problem
    from kgen.ops.conv_wgrad import supported

    dtype = _dtype_name(x.dtype)
    if (precision is not None or dtype not in DTYPES or dy.dtype != x.dtype or not x.is_cuda
            or (tuple(w.shape[2:]) == (1, 1) and stride == [1, 1] and padding == [0, 0])
            or not x.permute(0, 2, 3, 1).is_contiguous() or not dy.permute(0, 2, 3, 1).is_contiguous()):
        return False
    (n, c, h, wd), (k, _, r, s) = (int(v) for v in x.shape), (int(v) for v in w.shape)   # (traced: specialised)
    try:
        problem = wgrad_problem(n, h, wd, c, k, r, s, stride=stride, padding=padding, dilation=dilation, dtype=dtype)
    except KgenError:                    # a problem the other ways check and report
        return False
    return supported(problem, x.device.index or 0)


@torch.library.custom_op(f"{_LIB}::conv2d_weight_gradient", mutates_args=())
def _conv2d_weight_gradient(x: Tensor, dy: Tensor, kernel_size: Sequence[int], stride: Sequence[int],
                            padding: Sequence[int], dilation: Sequence[int]) -> Tensor:
    """dW (K, C, R, S, channels-last) by kgen's weight-gradient kernel (``kgen.conv2d_weight_gradient``)."""
    from kgen.ops.conv_wgrad import conv2d_weight_gradient as eager

    x, dy = _plain(x, dy)
    return eager(x, dy, tuple(kernel_size), tuple(stride), tuple(padding), tuple(dilation))


@_conv2d_weight_gradient.register_fake
def _conv2d_weight_gradient_fake(x, dy, kernel_size, stride, padding, dilation):
    k, c, (r, s) = dy.shape[1], x.shape[1], kernel_size
    return x.new_empty_strided((k, c, r, s), (r * s * c, 1, s * c, c))


def _batch_and_channels_swapped(t):
    """The NCHW-shaped ``t`` with its batch and channel axes swapped, in channels-last memory:
    from channels-last ``t`` one kgen permutation of its NHWC memory (``kgen::permute``, at
    the copy rate; PyTorch's strided copy of the same runs at a sixth of it), else PyTorch's."""
    nhwc = t.permute(0, 2, 3, 1)
    if not nhwc.is_contiguous():
        return t.transpose(0, 1).contiguous(memory_format=torch.channels_last)
    return _permute(nhwc, [3, 1, 2, 0]).permute(0, 3, 1, 2)          # (C, H, W, N) memory, seen as (C, N, H, W)


@torch.library.custom_op(f"{_LIB}::permute", mutates_args=())
def _permute(x: Tensor, axes: Sequence[int]) -> Tensor:
    """``x.permute(*axes).contiguous()`` by kgen's permute family on a GPU tensor of its dtypes,
    else by PyTorch."""
    from kgen.kernels.memory.elements import DTYPES
    from kgen.ops.permute import permute as eager

    if not x.is_cuda or _dtype_name(x.dtype) not in DTYPES:
        return x.permute(*axes).contiguous()
    return eager(x.detach(), tuple(axes))


@_permute.register_fake
def _permute_fake(x, axes):
    return x.new_empty([x.shape[i] for i in axes])


def _through_activation(grad, activation, output, pre_activation, bias, dtype):
    """(dz in ``dtype``, dbias or None) of a convolution's fused tail ``y = act(z + bias)``:
    relu through the saved output, gelu through ``pre_activation()`` (z recomputed)."""
    g = grad
    if activation == "relu":
        g = g * (output > 0)
    elif activation == "gelu":
        g = (g.float() * _gelu_derivative(pre_activation())).to(grad.dtype)
    grad_bias = g.sum(dim=(0, 2, 3)).to(bias.dtype) if bias is not None else None
    return g.to(dtype), grad_bias


def _conv2d_backward(ctx, grad):
    x, w, bias, output = ctx.saved_tensors
    stride, padding, dilation, activation, precision, has_bias = ctx.options
    g, grad_bias = _through_activation(
        grad, activation, output, lambda: _conv2d(x, w, bias, stride, padding, dilation, None, precision, grad.dtype),
        bias if has_bias else None, x.dtype)
    on_kgen = knobs.conv_gradients == "kgen"
    grad_x = grad_w = None
    if ctx.needs_input_grad[0]:
        grad_x = data_gradient(x, w, g, stride, padding, dilation, precision) if on_kgen else \
            torch.nn.grad.conv2d_input(x.shape, w, g, stride, padding, dilation)
    if ctx.needs_input_grad[1]:
        grad_w = weight_gradient(x, w, g, stride, padding, dilation, precision) if on_kgen else \
            torch.nn.grad.conv2d_weight(x, w.shape, g, stride, padding, dilation)
    return grad_x, grad_w, grad_bias, None, None, None, None, None, None


_conv2d.register_autograd(_conv2d_backward, setup_context=_conv2d_setup)


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, activation=None, *, out=None, out_dtype=None,
           precision=None, dtype=None):
    """``kgen.conv2d`` as the custom operator (functional form only)."""
    if out is not None or dtype is not None:
        raise InputError("in PyTorch's graph (torch.compile, or autograd recording), kgen.conv2d returns a new "
                         "tensor and reads the tensors' dtype: out and dtype are not taken",
                         remedy="leave out and dtype unset, or call it under torch.no_grad()")
    return _conv2d(x, w, bias, *_pairs(stride, padding, dilation), activation, precision,
                   _as_dtype(out_dtype))


# ---- depthwise conv2d ----------------------------------------------------------------------

@torch.library.custom_op(f"{_LIB}::conv2d_depthwise", mutates_args=())
def _conv2d_depthwise(x: Tensor, w: Tensor, bias: Optional[Tensor], stride: Sequence[int], padding: Sequence[int],
                      dilation: Sequence[int], activation: Optional[str] = None) -> Tensor:
    from kgen.ops.conv import conv2d as eager

    x, w, bias = _plain(x, w, bias)
    return eager(x, w, bias, tuple(stride), tuple(padding), tuple(dilation), activation, groups=x.shape[1])


@_conv2d_depthwise.register_fake
def _conv2d_depthwise_fake(x, w, bias, stride, padding, dilation, activation=None):
    torch._check(x.dim() == 4 and w.dim() == 4, lambda: "kgen.conv2d: x and w are 4-D")
    torch._check(w.shape[0] == x.shape[1] and w.shape[1] == 1,
                 lambda: f"kgen.conv2d: a depthwise weight of {x.shape[1]} channels is ({x.shape[1]}, 1, R, S)")
    return _conv_output(x, w, stride, padding, dilation)


def _depthwise_setup(ctx, inputs, output):
    x, w, bias, stride, padding, dilation, activation = inputs
    ctx.options = (list(stride), list(padding), list(dilation), activation, bias is not None)
    ctx.save_for_backward(x, w, bias, output if activation == "relu" else None)


def depthwise_data_gradient(x, w, dy, stride=1, padding=0, dilation=1):
    """dx of ``y = conv2d(x, w, groups=C)`` given ``dy``, channels-last: at stride 1, kgen's
    depthwise convolution of dy with the spatially flipped filters (padding d(R-1) - p, the
    same dilation); at a larger stride (or a padding past the window), PyTorch's."""
    stride, padding, dilation = _pairs(stride, padding, dilation)
    window = (w.shape[2], w.shape[3])
    flipped_padding = [d * (r - 1) - p for d, r, p in zip(dilation, window, padding)]
    if stride == [1, 1] and min(flipped_padding) >= 0 and knobs.conv_gradients == "kgen":
        return _conv2d_depthwise(dy.contiguous(memory_format=torch.channels_last), w.flip(2, 3).contiguous(), None,
                                 [1, 1], flipped_padding, dilation, None)
    return torch.nn.grad.conv2d_input(x.shape, w, dy, stride, padding, dilation, groups=x.shape[1])


def _depthwise_backward(ctx, grad):
    x, w, bias, output = ctx.saved_tensors
    stride, padding, dilation, activation, has_bias = ctx.options
    g, grad_bias = _through_activation(grad, activation, output,
                                       lambda: _conv2d_depthwise(x, w, bias, stride, padding, dilation, None),
                                       bias if has_bias else None, x.dtype)
    grad_x = grad_w = None
    if ctx.needs_input_grad[0]:
        grad_x = depthwise_data_gradient(x, w, g, stride, padding, dilation)
    if ctx.needs_input_grad[1]:        # a reduction over every pixel: PyTorch's (cuDNN's)
        grad_w = torch.nn.grad.conv2d_weight(x, w.shape, g, stride, padding, dilation, groups=x.shape[1])
    return grad_x, grad_w, grad_bias, None, None, None, None


_conv2d_depthwise.register_autograd(_depthwise_backward, setup_context=_depthwise_setup)


def conv2d_depthwise(x, w, bias=None, stride=1, padding=0, dilation=1, activation=None, *, out=None,
                     out_dtype=None, precision=None, dtype=None):
    """``kgen.conv2d(..., groups=C)`` as the custom operator (functional form only)."""
    if out is not None or dtype is not None or out_dtype is not None or precision is not None:
        raise InputError("in PyTorch's graph (torch.compile, or autograd recording), a depthwise kgen.conv2d returns "
                         "a new tensor of the input's dtype: out, out_dtype, precision and dtype are not taken",
                         remedy="leave them unset, or call it under torch.no_grad()")
    return _conv2d_depthwise(x, w, bias, *_pairs(stride, padding, dilation), activation)


# ---- softmax and RMSNorm -------------------------------------------------------------------

@torch.library.custom_op(f"{_LIB}::softmax", mutates_args=())
def _softmax(x: Tensor) -> Tensor:
    from kgen.ops.rownorm import softmax as eager

    return eager(x.detach())


@_softmax.register_fake
def _softmax_fake(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_backward(ctx, grad):
    (y,) = ctx.saved_tensors
    y32, g32 = y.float(), grad.float()
    return (y32 * (g32 - (g32 * y32).sum(-1, keepdim=True))).to(y.dtype)


_softmax.register_autograd(_softmax_backward, setup_context=_softmax_setup)


@torch.library.custom_op(f"{_LIB}::rmsnorm", mutates_args=())
def _rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    from kgen.ops.rownorm import rmsnorm as eager

    return eager(*_plain(x, weight), eps)


@_rmsnorm.register_fake
def _rmsnorm_fake(x, weight, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _rmsnorm_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.eps = eps
    ctx.save_for_backward(x, weight)


def _rmsnorm_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    x32, w32, g32 = x.float(), weight.float(), grad.float()
    inv = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + ctx.eps)
    gw = g32 * w32
    grad_x = inv * gw - x32 * inv.pow(3) * (gw * x32).mean(-1, keepdim=True)
    grad_w = (g32 * x32 * inv).reshape(-1, x.shape[-1]).sum(0).reshape(weight.shape)
    return grad_x.to(x.dtype), grad_w.to(weight.dtype), None


_rmsnorm.register_autograd(_rmsnorm_backward, setup_context=_rmsnorm_setup)


def softmax(x, axis=-1, *, out=None, dtype=None):
    """``kgen.softmax`` as the custom operator (over the last axis, a new tensor)."""
    if out is not None or dtype is not None or axis not in (-1, x.dim() - 1):
        raise InputError("in PyTorch's graph (torch.compile, or autograd recording), kgen.softmax runs over the "
                         "last axis into a new tensor", remedy="pass axis=-1 and no out or dtype")
    return _softmax(x)


def rmsnorm(x, weight, eps: float = 1e-6, *, out=None, dtype=None):
    """``kgen.rmsnorm`` as the custom operator (a new tensor)."""
    if out is not None or dtype is not None:
        raise InputError("in PyTorch's graph (torch.compile, or autograd recording), kgen.rmsnorm returns a new "
                         "tensor", remedy="pass no out or dtype")
    return _rmsnorm(x, weight, float(eps))
