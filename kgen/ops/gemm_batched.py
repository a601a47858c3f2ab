"""``kgen.gemm`` on 3-D operands: a batch of GEMMs in one launch (``gemm_batched_wgmma`` on
Hopper where TMA can read the operands, ``gemm_batched``'s mma.sync elsewhere).

``a`` is (batch, M, K) or (M, K), ``b`` (batch, K, N) or (K, N); a 2-D operand (or a batch of
one) serves every batch. Each matrix may be a transposed view (``x.transpose(-1, -2)``) but the
batch must be dense (matrices one after another). A row-major ``a`` whose ``b`` serves every
batch is one GEMM of batch * M rows: it goes to the 2-D path (and its fastest family). The
result is (batch, M, N), of the caller's library, on its current stream. Where cuBLAS's batched
GEMM measured faster the call is cuBLAS's (the vendor candidate of both families; ``KGEN_VENDOR=0``
runs a generated kernel always); where nothing measured decides, the first call races cuBLAS
and the families' picks on its operands and keeps the fastest (``kgen.ops.race``).
"""

from __future__ import annotations

from typing import Any

from kgen.arrays import array_kind, describe
from kgen.errors import DeviceError, DtypeError, InputError, LayoutError, ShapeError
from kgen.kernels.gemm import rules
from kgen.kernels.gemm.dtypes import checked_output, epilogue_name
from kgen.ops.caller import CallerArray, check_no_overlap, new_array, on_caller_stream, to_jax
from kgen.ops.launch import first_ranked, launch_family


def dense_matrices(info, name: str) -> tuple[int, int, int, str]:
    """(batch, rows, cols, layout letter) of a 2-D or 3-D operand whose batch is dense."""
    if len(info.shape) not in (2, 3):
        raise ShapeError(f"{name} has {len(info.shape)} dimensions; batched GEMM takes 2-D or 3-D arrays")
    batch, rows, cols = info.shape if len(info.shape) == 3 else (1, *info.shape)
    inner = info.strides[-2:]
    found = rules.operand_layout((rows, cols), inner)
    dense = found is not None and found[1] == (cols if found[0] == "N" else rows)
    if dense and len(info.shape) == 3 and batch > 1:
        dense = info.strides[0] == rows * cols
    if not dense:
        raise LayoutError(f"{name} (shape {info.shape}, strides {info.strides} in elements) is not a dense batch of "
                          "row-major or transposed matrices", remedy=f"pass a contiguous copy of {name}")
    return batch, rows, cols, found[0]


def _flattened(gemm, a, b, c, alpha, beta, kw):
    """a (batch, M, K) row-major, b one matrix: one ``gemm`` (the 2-D call) of batch * M rows,
    its result reshaped."""
    batch, m, k = a.shape
    if c is not None and (len(c.shape) != 3 or dense_matrices(describe(c, "c"), "c")[3] != "N"):
        raise LayoutError(f"c (shape {tuple(c.shape)}) must be a dense batch of row-major matrices",
                          remedy="pass a contiguous c, or leave it unset")
    flat_c = c.reshape(batch * m, c.shape[-1]) if c is not None else None
    out = gemm(a.reshape(batch * m, k), b, flat_c, alpha, beta, **kw)
    return c if c is not None else out.reshape(batch, m, out.shape[-1])


def call(gemm, a, b, c=None, alpha: float = 1.0, beta: float = 0.0, *, bias=None, activation=None, precision=None,
         dtype=None, out_dtype=None):
    """``kgen.gemm`` on 3-D operands; ``gemm`` is the 2-D call (for a broadcast ``b``)."""
    from kgen.kernels.gemm.batched import batched_problem
    from kgen.ops.gemm_tc import input_dtype

    ai, bi = describe(a, "a"), describe(b, "b")
    (ba, m, k, la), (bb, k2, n, lb) = dense_matrices(ai, "a"), dense_matrices(bi, "b")
    if k != k2:
        raise ShapeError(f"inner dimensions differ: a's matrices are {m}x{k}, b's {k2}x{n}")
    if ba != bb and 1 not in (ba, bb):
        raise ShapeError(f"a holds {ba} matrices and b {bb}", remedy="pass batches of one size (or one matrix)")
    kind = array_kind(a)
    if array_kind(b) != kind:
        raise InputError(f"a is a {kind} array and b a {array_kind(b)} one", remedy="pass arrays of one library")
    if ai.device != bi.device:
        raise DeviceError(f"a is on device {ai.device} and b on device {bi.device}")
    batch = max(ba, bb)
    in_a, in_b = input_dtype(ai, dtype, "a"), input_dtype(bi, dtype, "b")
    if in_a != in_b:
        raise DtypeError(f"a is {in_a} and b is {in_b}", remedy="cast both to one dtype")
    kw = dict(bias=bias, activation=activation, precision=precision, dtype=dtype, out_dtype=out_dtype)
    if bb == 1 and la == "N" and len(ai.shape) == 3 and kind != "jax" and hasattr(a, "reshape"):
        return _flattened(gemm, a, b if len(bi.shape) == 2 else b[0], c, alpha, beta, kw)
    if in_a == "float32" and precision != "tf32":
        raise DtypeError("batched GEMM runs on the tensor cores: float32 only as tf32",
                         remedy="pass precision='tf32', or cast to bfloat16")
    epilogue = epilogue_name(bias is not None, activation)
    out = checked_output(in_a, out_dtype, epilogue)
    broadcast = "a" if ba == 1 < batch else "b" if bb == 1 < batch else "none"
    if min(batch, m, n) == 0:                      # nothing to compute: an empty result
        empty = c if c is not None else new_array(CallerArray(a, kind, ai, in_a), (batch, m, n), out)
        return to_jax(empty, out) if kind == "jax" else empty
    lda, ldb = (k if la == "N" else m), (n if lb == "N" else k)
    problem = batched_problem(batch, m, n, k, in_a, la + lb, broadcast, out_dtype=out, epilogue=epilogue,
                              align_a=rules.alignment(ai.ptr, lda, ai.itemsize),     # (a view may start anywhere)
                              align_b=rules.alignment(bi.ptr, ldb, bi.itemsize))
    stored = ("uint16", "bfloat16") if out == "bfloat16" else (out,)
    if c is not None:
        if kind == "jax":
            raise InputError("c is a JAX array, and JAX arrays are immutable", remedy="leave c unset")
        ci = describe(c, "c")
        if ci.shape != (batch, m, n) or ci.dtype not in stored or ci.device != ai.device \
                or dense_matrices(ci, "c")[3] != "N":
            raise ShapeError(f"c must be a dense ({batch}, {m}, {n}) {out} array on device {ai.device}; got "
                             f"shape {ci.shape}, {ci.dtype}, device {ci.device}")
        check_no_overlap(CallerArray(c, kind, ci, out), [CallerArray(a, kind, ai, in_a), CallerArray(b, kind, bi, in_a)],
                         "gemm")
        target = c
    else:
        target = new_array(CallerArray(a, kind, ai, in_a), (batch, m, n), out)
    operands: dict[str, Any] = {"a": ai.ptr, "b": bi.ptr, "c": describe(target, "c").ptr, "alpha": float(alpha),
                                "beta": float(beta)}
    if bias is not None:
        info = describe(bias, "bias")
        if info.shape != (n,) or info.dtype not in stored:
            raise ShapeError(f"bias must hold {n} values of {out}; got shape {info.shape}, {info.dtype}")
        operands["bias"] = info.ptr
    _run(problem, ai.device, kind, operands, (a, b, target, bias))
    return to_jax(target, out) if kind == "jax" else target


def routed(problem, device: int):
    """(spec, problem, choice) of the family that runs a batched ``problem`` on ``device``: of
    those that can (``kgen.kernels.gemm.batched.route``), the one the dispatcher ranks first
    (measured times, then the vendor, then the preferred family's pick)."""
    from kgen.kernels.gemm.batched import route

    return first_ranked(route, problem, device, "batched GEMM")


def _run(problem, device: int, kind: str, operands: dict[str, Any], arrays: tuple) -> None:
    """The routed family's choice for ``problem`` (``routed``; where no measurement decides, a
    first-call race's: ``_race``): a generated kernel, or cuBLAS (the vendor candidate) on the
    arrays themselves, on the caller's stream either way."""
    spec, routed_problem, choice = routed(problem, device)
    if choice.time_ms is None and _race(problem, device, kind, operands, arrays):
        spec, routed_problem, choice = routed(problem, device)
    problem = routed_problem
    if not choice.vendor:
        launch_family(spec.family, problem, device, kind, operands)
        return
    a, b, c, bias = arrays
    with on_caller_stream(kind, device):
        _vendor_call(problem)(a, b, c, operands["alpha"], operands["beta"], bias)


def _race(problem, device: int, kind: str, operands: dict[str, Any], arrays: tuple) -> bool:
    """Time cuBLAS (where it is an unmeasured candidate) and the generated picks of the
    ``KGEN_RACE_FAMILIES`` best-ranked families that run ``problem`` on the call's operands,
    each into a scratch output, and keep the fastest as the problem's choice
    (``kgen.ops.race.race_routed``). False where no race ran."""
    from kgen.kernels.gemm.batched import route
    from kgen.ops import race

    a, b, c, bias = arrays

    def vendor_run(loaded, scratch):
        return lambda: _vendor_call(loaded.problem)(a, b, scratch, 1.0, 0.0, bias)

    like = CallerArray(c, kind, describe(c, "c"), problem["out_dtype"])
    return race.race_routed(route, problem, device, kind, operands, "c", like, vendor_run)


_VENDOR_CALLS: dict[str, Any] = {}


def _vendor_call(problem):
    call = _VENDOR_CALLS.get(problem.key)
    if call is None:
        from kgen.registry import get_spec

        call = _VENDOR_CALLS[problem.key] = get_spec("gemm_batched").vendor_call(problem)
    return call
