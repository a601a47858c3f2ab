"""``kgen.conv2d_weight_gradient``: dW of ``y = conv2d(x, w)`` from x and dy, one kgen kernel
(``conv2d_wgrad_wgmma``: a GEMM over the output pixels whose image operand TMA gathers in
im2col mode), on the caller's arrays and stream.

Layouts as ``kgen.conv2d``'s: CuPy and JAX arrays are x ``(N, H, W, C)``, dy ``(N, P, Q, K)``
and the result ``(K, R, S, C)``; PyTorch tensors keep PyTorch's shapes in channels-last memory
(x ``(N, C, H, W)``, dy ``(N, K, P, Q)``, the result ``(K, C, R, S)``). It runs what the family
supports (Hopper, 16-bit, C a multiple of 64, K of 8); other problems get a typed error naming
the rule (``kgen.torch``'s backward takes its other ways for them).

>>> # dw = kgen.conv2d_weight_gradient(x, dy, (3, 3), stride=1, padding=1)
"""

from __future__ import annotations

import functools

from kgen.errors import DtypeError, InputError, ShapeError
from kgen.kernels.conv.conv2d_wgrad_wgmma import DTYPES, FAMILY, wgrad_problem
from kgen.kernels.conv.problem import geometry, pair
from kgen.kernels.gemm.dtypes import TC_OUTPUTS
from kgen.ops.caller import caller_array, check_no_overlap, output_array, result_array, returned, same_device
from kgen.ops.conv import _channels_last
from kgen.ops.launch import launch_family, pointer

_KRSC_AS_KCRS = (0, 3, 1, 2)      # a KRSC result seen with PyTorch's weight shape


@functools.lru_cache(maxsize=1024)
def supported(problem, device: int) -> bool:
    """Whether the family runs ``problem`` on ``device`` (``kgen.torch`` asks before calling, each
    backward step: remembered)."""
    from kgen.dispatch import default_dispatcher
    from kgen.registry import get_spec

    return get_spec(FAMILY).supports(problem, default_dispatcher().target(device))


def conv2d_weight_gradient(x, dy, kernel_size, stride=1, padding=0, dilation=1, *, out=None,
                           out_dtype: str | None = None, dtype: str | None = None):
    """dW (K, R, S, C; PyTorch: (K, C, R, S) channels-last) of a convolution of ``x`` with a
    ``kernel_size`` window at ``stride``, ``padding`` and ``dilation`` whose output's gradient
    is ``dy``; ``out_dtype="float32"`` for a float32 dW of 16-bit inputs; ``dtype="bfloat16"``
    says CuPy uint16 arrays hold bfloat16."""
    r, s = pair(kernel_size, "kernel_size", 1)
    torch_caller = type(x).__module__.startswith("torch")
    a = caller_array(_channels_last(x, "x") if torch_caller else x, "x", DTYPES, dtype)
    g = caller_array(_channels_last(dy, "dy") if torch_caller else dy, "dy", DTYPES, dtype)
    if len(a.shape) != 4 or len(g.shape) != 4:
        raise ShapeError(f"conv2d_weight_gradient: x has shape {a.shape} and dy {g.shape}; both are 4-D "
                         "(x N, H, W, C; dy N, P, Q, K)")
    if g.kind != a.kind:
        raise InputError(f"conv2d_weight_gradient: x is a {a.kind} array and dy a {g.kind} one",
                         remedy="pass arrays of one library")
    if g.dtype != a.dtype:
        raise DtypeError(f"conv2d_weight_gradient: x holds {a.dtype} and dy {g.dtype}", remedy="cast them to one dtype")
    n, h, wd, c = a.shape
    k = g.shape[3]
    out_dtype = out_dtype or a.dtype
    if out_dtype not in (a.dtype, "float32") or out_dtype not in TC_OUTPUTS:
        raise DtypeError(f"conv2d_weight_gradient: out_dtype={out_dtype!r}; it is the inputs' dtype or float32")
    problem = wgrad_problem(n, h, wd, c, k, r, s, stride=stride, padding=padding, dilation=dilation, dtype=a.dtype,
                            out_dtype=out_dtype)
    p, q = geometry(problem).output
    if tuple(g.shape) != (n, p, q, k):
        raise ShapeError(f"conv2d_weight_gradient: dy has shape {g.shape}; a {r}x{s} window at stride "
                         f"{stride}, padding {padding}, dilation {dilation} on x of shape {a.shape} gives "
                         f"{(n, p, q, k)} (N, P, Q, K)")
    device = same_device([a, g])
    if not supported(problem, device):
        raise InputError(f"conv2d_weight_gradient runs 16-bit inputs on Hopper (sm_90) with C a multiple of "
                         f"64 and K of 8, in a window TMA's im2col mode can walk; got {a.dtype}, C={c}, K={k}, "
                         f"{r}x{s} at stride {stride}, padding {padding}, dilation {dilation}",
                         remedy="use kgen.torch.weight_gradient (which takes other ways) or your framework's")
    shape = (k, r, s, c)
    out_view = out.permute(0, 2, 3, 1) if torch_caller and out is not None else out
    given = output_array(out_view, a, shape, out_dtype)
    check_no_overlap(given, [a, g], "conv2d_weight_gradient")
    target = result_array(given, a, shape, out_dtype)
    launch_family(FAMILY, problem, device, a.kind, {"x": pointer(a), "dy": pointer(g), "dw": pointer(target)})
    if torch_caller:
        return out if out is not None else target.obj.permute(*_KRSC_AS_KCRS)
    return returned(a.kind, target.obj, out_dtype)
