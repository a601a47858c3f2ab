"""``kgen.conv2d``: a 2-D convolution (cross-correlation, as PyTorch's) of channels-last images
on the tensor cores (16-bit inputs, and float32 as tf32 by opt-in) or, for float32, exactly on
the CUDA cores (``conv2d_simt``), with the bias and activation fused, on the caller's arrays and stream;
with ``groups`` = the channels, a depthwise convolution (one R x S filter a channel, the family
``conv2d_depthwise``, bound by memory: float32 exact on the CUDA cores).

Layouts: CuPy and JAX arrays are x ``(N, H, W, C)``, w ``(K, R, S, C)``, the result
``(N, P, Q, K)``, all dense. PyTorch tensors keep PyTorch's shapes, x ``(N, C, H, W)`` and w
``(K, C, R, S)`` in channels-last memory (``t.to(memory_format=torch.channels_last)``), and
the result is such a tensor. Tensors in NCHW memory are refused with a typed error rather than
transposed behind the caller's back (a transposition costs as much as a small convolution:
``kgen.permute`` does it, and its cost is the caller's to see). A depthwise weight is ``(C, R, S,
1)`` (PyTorch ``(C, 1, R, S)``). Groups other than 1 and C are refused with a typed error.

>>> # y = kgen.conv2d(x, w, bias, stride=2, padding=1, activation="relu")
"""

from __future__ import annotations

from typing import Any

from kgen.errors import DtypeError, InputError, LayoutError, ShapeError
from kgen.kernels.conv.depthwise import FAMILY as DEPTHWISE, depthwise_problem
from kgen.kernels.conv.problem import DTYPES, conv2d_problem, family_for, geometry, vector_bytes
from kgen.kernels.gemm.dtypes import checked_output, epilogue_name
from kgen.ops.caller import (caller_array, check_no_overlap, custom_op, output_array, result_array, returned,
                             same_device, torch_graph_call)
from kgen.ops.launch import first_ranked, launch_family, pointer, raced_route

_TO_CHANNELS_LAST = (0, 2, 3, 1)      # a PyTorch NCHW-shaped tensor's dims in NHWC order
_FROM_CHANNELS_LAST = (0, 3, 1, 2)


def _channels_last(t, name: str):
    """A PyTorch tensor of NCHW shape as its NHWC view, which must be dense (channels-last memory)."""
    if t.dim() != 4:
        raise ShapeError(f"conv2d: {name} has {t.dim()} dimensions; it takes 4 (PyTorch order "
                         f"{'N, C, H, W' if name == 'x' else 'K, C, R, S'})")
    view = t.permute(*_TO_CHANNELS_LAST)
    if not view.is_contiguous():
        raise LayoutError(f"conv2d: {name} is not in channels-last memory (strides {tuple(t.stride())})",
                          remedy=f"pass {name}.to(memory_format=torch.channels_last) (a copy; keep tensors "
                                 "channels-last to avoid it), or kgen.permute an NCHW array to NHWC")
    return view


def routed(problem, device: int):
    """(spec, problem, choice) of the family to run a conv2d problem on ``device``: of those that
    can (``kgen.kernels.conv.family.route``), the one the dispatcher ranks first (measured
    times, then the cost model's predictions), the preferred one of equals."""
    return first_ranked(_route(), problem, device, "conv2d")


def _route():
    from kgen.kernels.conv.family import route

    return route


def _groups(groups) -> int:
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise InputError(f"conv2d: groups={groups!r} must be an integer >= 1",
                         remedy="pass groups=1, or groups=C for a depthwise convolution")
    return groups


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, activation: str | None = None, *, groups: int = 1,
           out=None, out_dtype: str | None = None, precision: str | None = None, dtype: str | None = None):
    """``act(conv2d(x, w) + bias)``, groups = 1 or C (depthwise). ``activation``: None, "relu" or
    "gelu" (erf form); ``bias``: one value per output channel, in the output's dtype;
    ``out_dtype``: float32 output of half inputs; float32 inputs are computed exactly on the
    CUDA cores unless ``precision="tf32"`` lets them run on the tensor cores as tf32 (groups =
    1; depthwise float32 is always exact); ``dtype="bfloat16"``
    says CuPy uint16 arrays hold bfloat16. Inside ``torch.compile``, or where autograd records
    it, the call is the custom operator ``torch.ops.kgen.conv2d`` (``conv2d_depthwise`` for
    groups = C; ``kgen.torch``), with a backward."""
    groups = _groups(groups)
    if torch_graph_call(x, w, bias):
        if groups != 1:
            if x.dim() != 4 or groups != x.shape[1]:
                raise ShapeError(f"conv2d: groups={groups} runs only as a depthwise convolution: groups = C = K",
                                 remedy="pass groups=1, or groups equal to x's channels")
            return custom_op("conv2d_depthwise")(x, w, bias, stride, padding, dilation, activation, out=out,
                                                 out_dtype=out_dtype, precision=precision, dtype=dtype)
        return custom_op("conv2d")(x, w, bias, stride, padding, dilation, activation, out=out, out_dtype=out_dtype,
                                   precision=precision, dtype=dtype)
    torch_caller = type(x).__module__.startswith("torch")
    xs = _channels_last(x, "x") if torch_caller else x
    ws = _channels_last(w, "w") if torch_caller and type(w).__module__.startswith("torch") else w
    a = caller_array(xs, "x", DTYPES, dtype)
    b = caller_array(ws, "w", DTYPES, dtype)
    if len(a.shape) != 4 or len(b.shape) != 4:
        raise ShapeError(f"conv2d: x has shape {a.shape} and w {b.shape}; both are 4-D (x N, H, W, C; w K, R, S, C)")
    if b.kind != a.kind:
        raise InputError(f"conv2d: x is a {a.kind} array and w a {b.kind} one", remedy="pass arrays of one library")
    if b.dtype != a.dtype:
        raise DtypeError(f"conv2d: x holds {a.dtype} and w {b.dtype}", remedy="cast them to one dtype")
    n, h, wd, c = a.shape
    k, r, s, wc = b.shape
    if groups != 1:
        if groups != c or k != c or wc != 1:
            raise ShapeError(f"conv2d: groups={groups} runs only as a depthwise convolution: groups = C = K, one "
                             f"input channel a filter; got x of {c} channels and w of shape {b.shape} (KRSC)",
                             remedy="pass groups=C and a weight of shape (C, R, S, 1) (PyTorch: (C, 1, R, S))")
        if precision is not None:
            raise InputError(f"precision={precision!r} does not apply to a depthwise convolution (float32 is exact)",
                             remedy="leave precision out")
    else:
        family = family_for(a.dtype, precision)
    if groups == 1 and wc != c:
        raise ShapeError(f"conv2d: x has {c} channels and w {wc} (groups=1)",
                         remedy="pass a weight of shape (K, R, S, C) (PyTorch: (K, C, R, S))")
    epilogue = epilogue_name(bias is not None, activation)
    out_dtype = checked_output(a.dtype, out_dtype, epilogue)
    arrays = [a, b]
    if bias is not None:
        bb = caller_array(bias, "bias", (out_dtype,), "bfloat16" if out_dtype == "bfloat16" else None)
        if bb.shape != (k,):
            raise ShapeError(f"conv2d: bias has shape {bb.shape}; it holds one value per output channel, ({k},)")
        arrays.append(bb)
    if groups != 1:
        problem = depthwise_problem(n, h, wd, c, r, s, stride=stride, padding=padding, dilation=dilation,
                                    dtype=a.dtype, out_dtype=out_dtype, epilogue=epilogue)
    else:
        problem = conv2d_problem(n, h, wd, c, k, r, s, stride=stride, padding=padding, dilation=dilation,
                                 dtype=a.dtype, out_dtype=out_dtype, epilogue=epilogue, family=family)
    if groups == 1:
        widest = vector_bytes(problem)
        for name, array in (("x", a), ("w", b)):
            if array.ptr % widest[name]:
                raise LayoutError(f"conv2d: {name} starts at an address not a multiple of {widest[name]} bytes, "
                                  f"which its {c}-channel rows allow the kernels to load at once",
                                  remedy=f"pass a copy of {name} (a fresh array is aligned)")
    p, q = geometry(problem).output
    result_shape = (n, p, q, k)
    out_view = _channels_last(out, "out") if torch_caller and out is not None else out
    given = output_array(out_view, a, result_shape, out_dtype)
    check_no_overlap(given, arrays, "conv2d")
    device = same_device(arrays + ([given] if given else []))
    target = result_array(given, a, result_shape, out_dtype)
    operands: dict[str, Any] = {"x": pointer(a), "w": pointer(b), "y": pointer(target)}
    if bias is not None:
        operands["bias"] = pointer(arrays[2])
    if groups != 1:
        launch_family(DEPTHWISE, problem, device, a.kind, operands)
    else:
        spec, chosen, _ = raced_route(routed, _route(), problem, device, a.kind, operands, "y", target)
        launch_family(spec.family, chosen, device, a.kind, operands)
    if torch_caller:
        return out if out is not None else target.obj.permute(*_FROM_CHANNELS_LAST)
    return returned(a.kind, target.obj, out_dtype)
