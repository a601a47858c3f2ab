"""Conv2d problems, built and read in one place.

Activations are NHWC (channels last), weights KRSC, the output NPQK; stride, padding and
dilation per spatial axis. The convolution is the GEMM ``y[M, K] = im2col(x)[M, R*S*C] @
w[K, R*S*C]^T`` with ``M = N*P*Q`` (``gemm_view``), whose A is gathered from the image by the
kernel's copies and never written out.

>>> p = conv2d_problem(2, 56, 56, 64, 128, 3, 3, stride=2, padding=1, dtype="bfloat16")
>>> p.key
'conv2d|c=64|dh=1|dtype=bfloat16|dw=1|epilogue=none|h=56|k=128|n=2|out_dtype=bfloat16|ph=1|pw=1|r=3|s=3|sh=2|sw=2|w=56'
>>> geometry(p).output, geometry(p).gemm
((28, 28), (1568, 128, 576))
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

from kgen.errors import DtypeError, InputError, ShapeError
from kgen.kernels.gemm.dtypes import ITEMSIZE, checked_output
from kgen.kernels.gemm.problem import tc_problem
from kgen.problem import Problem

FAMILY = "conv2d"
EXACT_FLOAT32 = "conv2d_simt"                    # float32 computed in float32, on the CUDA cores
DTYPES = ("bfloat16", "float16", "float32")      # float32 exact, or as tf32 by opt-in (precision="tf32")
SIZES = ("n", "h", "w", "c", "k", "r", "s")
PAIRS = ("sh", "sw", "ph", "pw", "dh", "dw")
MAX_ELEMENTS = 2**31 - 1                        # image, weight and output element offsets are 32-bit


@dataclass(frozen=True)
class Geometry:
    """Every size of a conv2d problem, the derived ones included."""

    n: int
    h: int
    w: int
    c: int
    k: int
    r: int
    s: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int

    @property
    def output(self) -> tuple[int, int]:
        """(P, Q): the output's height and width."""
        return (output_size(self.h, self.r, self.sh, self.ph, self.dh),
                output_size(self.w, self.s, self.sw, self.pw, self.dw))

    @property
    def gemm(self) -> tuple[int, int, int]:
        """(M, N, K) of the implicit GEMM: output pixels, output channels, R*S*C."""
        p, q = self.output
        return self.n * p * q, self.k, self.r * self.s * self.c

    def template_values(self) -> dict[str, int]:
        """The sizes a kernel is compiled for (everything but the batch, which M carries)."""
        p, q = self.output
        return {f"CONV_{name.upper()}": getattr(self, name) for name in
                ("h", "w", "c", "r", "s", "sh", "sw", "ph", "pw", "dh", "dw")} | {"CONV_P": p, "CONV_Q": q}


def output_size(size: int, window: int, stride: int, pad: int, dilation: int) -> int:
    """Output positions along one axis (as PyTorch counts them)."""
    return (size + 2 * pad - dilation * (window - 1) - 1) // stride + 1


def pair(value, name: str, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each at least ``minimum``."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2 or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in items):
        raise InputError(f"{name}={value!r} is not an integer or a pair of integers",
                         remedy=f"pass {name}=1 or {name}=(1, 1)")
    if min(items) < minimum:
        raise InputError(f"{name}={value!r}: each must be >= {minimum}", remedy=f"pass {name} >= {minimum}")
    return int(items[0]), int(items[1])


def check_precision(dtype: str, precision: str | None) -> None:
    """``precision`` applies to float32 inputs only, and is "tf32" or None."""
    if precision not in (None, "tf32") or (precision == "tf32" and dtype != "float32"):
        raise InputError(f"precision={precision!r} does not apply to {dtype} inputs",
                         remedy="leave precision out (it is 'tf32' for float32 inputs only)")


def family_for(dtype: str, precision: str | None) -> str:
    """The family a conv2d request of these inputs is a problem of: float32 is computed exactly
    on the CUDA cores (``conv2d_simt``) unless ``precision="tf32"`` lets the tensor cores read
    it as tf32; 16-bit inputs run on the tensor cores (``conv2d``, which ``route`` may hand to
    another tensor-core family).

    >>> family_for("float32", None), family_for("float32", "tf32"), family_for("bfloat16", None)
    ('conv2d_simt', 'conv2d', 'conv2d')
    """
    check_precision(dtype, precision)
    return EXACT_FLOAT32 if dtype == "float32" and precision is None else FAMILY


def conv2d_problem(n: int, h: int, w: int, c: int, k: int, r: int, s: int, *, stride=1, padding=0,
                   dilation=1, dtype: str = "bfloat16", out_dtype: str | None = None,
                   epilogue: str = "none", family: str = FAMILY) -> Problem:
    """The conv2d problem of an NHWC image and a KRSC weight (checked: a typed error names what
    is wrong), for ``family`` (``conv2d``, or a family that runs conv2d another way)."""
    sizes = dict(n=n, h=h, w=w, c=c, k=k, r=r, s=s)
    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ShapeError(f"conv2d: {name}={v!r} must be an integer >= 1",
                             remedy="give every size as an integer >= 1")
    (sh, sw), (ph, pw), (dh, dw) = pair(stride, "stride", 1), pair(padding, "padding", 0), pair(dilation, "dilation", 1)
    if dtype not in DTYPES:
        raise DtypeError(f"conv2d takes {', '.join(DTYPES)}; got {dtype}", remedy="cast the operands first")
    out_dtype = checked_output(dtype, out_dtype, epilogue)
    g = Geometry(**{k_: int(v) for k_, v in sizes.items()}, sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw)
    _check(g)
    return Problem.of(family, **{f: getattr(g, f) for f in SIZES + PAIRS}, dtype=dtype, out_dtype=out_dtype,
                      epilogue=epilogue)


def _check(g: Geometry) -> None:
    p, q = g.output
    if p < 1 or q < 1:
        raise ShapeError(f"conv2d: a {g.r}x{g.s} window (dilation {g.dh}x{g.dw}) does not fit a {g.h}x{g.w} image "
                         f"padded by {g.ph}x{g.pw}", remedy="pad more, or use a smaller window or dilation")
    for name, elements in (("x", g.n * g.h * g.w * g.c), ("w", g.k * g.r * g.s * g.c), ("y", g.n * p * q * g.k)):
        if elements > MAX_ELEMENTS:
            raise ShapeError(f"conv2d: {name} would hold {elements} elements; this family addresses at most "
                             f"{MAX_ELEMENTS}", remedy="split the batch into calls")


@functools.lru_cache(maxsize=1024)
def geometry(problem: Problem) -> Geometry:
    """The sizes of a conv2d problem, checked to be what ``conv2d_problem`` writes (a key read
    from a file is used only if it is); remembered, as a launch's arguments read them each call."""
    try:
        g = Geometry(**{f: problem[f] for f in SIZES + PAIRS})
        again = conv2d_problem(g.n, g.h, g.w, g.c, g.k, g.r, g.s, stride=(g.sh, g.sw), padding=(g.ph, g.pw),
                               dilation=(g.dh, g.dw), dtype=problem["dtype"], out_dtype=problem["out_dtype"],
                               epilogue=problem["epilogue"], family=problem.family)
    except KeyError as exc:
        raise InputError(f"{problem.key} lacks {exc}", remedy="make conv2d problems with conv2d_problem") from None
    if again != problem:
        raise InputError(f"{problem.key} is not a conv2d problem as conv2d_problem writes it",
                         remedy="make conv2d problems with conv2d_problem")
    return g


def alignment(elements: int, itemsize: int) -> int:
    """The widest vector (elements, at most 16 bytes) dividing a run of ``elements``."""
    v = 16 // itemsize
    while v > 1 and elements % v:
        v //= 2
    return v


def vector_bytes(problem: Problem) -> dict[str, int]:
    """The widest loads (bytes) the conv families may make of x and w: a run of channels of one
    pixel (C's alignment) and of a weight row (R*S*C's), as ``gemm_view`` (and conv2d_simt's
    view) allow their vectors; each array's address must be a multiple.

    >>> vector_bytes(conv2d_problem(1, 8, 8, 12, 16, 3, 3, dtype="bfloat16"))
    {'x': 8, 'w': 8}
    """
    g, size = geometry(problem), ITEMSIZE[problem["dtype"]]
    return {"x": size * alignment(g.c, size), "w": size * alignment(g.r * g.s * g.c, size)}


@functools.lru_cache(maxsize=1024)
def gemm_view(problem: Problem, family: str = "gemm_mma") -> Problem:
    """The implicit GEMM as a problem of the GEMM ``family`` (layout NT: A's rows are output
    pixels, k contiguous; B is the weight, k contiguous), aligned as far as C (for A's
    gathered rows) and R*S*C (for the weight's rows) allow."""
    g = geometry(problem)
    m, n, k = g.gemm
    size = ITEMSIZE[problem["dtype"]]
    return tc_problem(family, m, n, k, problem["dtype"], "NT", out_dtype=problem["out_dtype"],
                      epilogue=problem["epilogue"], align_a=alignment(g.c, size), align_b=alignment(k, size))
