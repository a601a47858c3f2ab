"""``kgen.gemm_grouped``: the groups of rows of ``a`` each times its own matrix of ``b``, in one
launch (the mixture-of-experts layer: tokens sorted by expert, one weight an expert).

``a`` is (T, K), row-major: every group's rows one after another. ``b`` is (G, K, N), or a view
(G, N, K).transpose(1, 2) (an ``nn.Linear`` weight an expert), dense a matrix. ``ends`` says
where each group's rows end: ``ends[g]`` is one past group g's last row (group g holds rows
``ends[g-1] <= row < ends[g]``, ``ends[-1] = 0``), as ``torch._grouped_mm``'s ``offs``. It is
an int32 device array of G values of the caller's library (read by the kernel, never by the
host: no synchronisation), or a host sequence of G ints (checked, then copied on the caller's
stream). Rows at and past ``ends[-1]`` are not written. The result is (T, N), of the caller's
library, on its current stream; ``activation`` (relu, gelu) is fused. On Hopper, with 16-bit
operands TMA can read, the kernel is ``gemm_grouped_wgmma``'s; elsewhere ``gemm_grouped``'s
(mma.sync); of two that can, the faster measured, else, on the first call of a problem, the
faster of the two timed on the call's operands (``kgen.ops.race.race_routed``), else the Hopper one
(``routed``).
"""

from __future__ import annotations

import numpy as np

from kgen.arrays import array_kind, describe
from kgen.errors import DeviceError, DtypeError, InputError, LayoutError, ShapeError
from kgen.kernels.gemm import rules
from kgen.kernels.gemm.dtypes import checked_output, epilogue_name
from kgen.ops.caller import (CallerArray, check_no_overlap, contiguous, custom_op, on_caller_stream, output_array,
                             result_array, same_device, to_jax, torch_graph_call)
from kgen.ops.gemm_batched import dense_matrices
from kgen.ops.launch import first_ranked, launch_family, raced_route


def on_device(ends) -> bool:
    """Whether ``ends`` is a device array (else a host sequence)."""
    return hasattr(ends, "__cuda_array_interface__") or array_kind(ends) in ("torch", "jax")


def ends_count(ends) -> int:
    """How many groups ``ends`` gives an end (a one-dimensional array or sequence)."""
    shape = describe(ends, "ends").shape if on_device(ends) else np.shape(ends)
    if len(shape) != 1:
        raise ShapeError(f"ends must be one-dimensional, one end a group; got shape {tuple(shape)}")
    return shape[0]


def host_ends(ends, groups: int, rows: int) -> np.ndarray | None:
    """``ends`` as checked int32 values where it is a host sequence; None for a device array."""
    if on_device(ends):
        return None
    values = np.asarray(ends)
    if values.dtype.kind not in "iu" or values.shape != (groups,):
        raise ShapeError(f"ends must hold {groups} integers (one a group); got {values.dtype} of shape {values.shape}")
    if values[0] < 0 or (np.diff(values) < 0).any() or values[-1] > rows:
        raise ShapeError(f"ends must rise from 0 to at most {rows} (a's rows); got {values.tolist()[:8]}",
                         remedy="pass the running sum of the groups' row counts")
    return values.astype(np.int32)


def device_ends(ends, groups: int, like: CallerArray) -> CallerArray:
    """A device ``ends`` checked: dense int32, one a group, with ``like`` (library and device)."""
    info = describe(ends, "ends")
    if info.dtype != "int32" or info.shape != (groups,) or not contiguous(info):
        raise ShapeError(f"ends must be a dense int32 array of {groups} values (one a group); got {info.dtype} "
                         f"of shape {info.shape}", remedy="pass ends.to(torch.int32), or a contiguous int32 copy")
    if info.device != like.info.device:
        raise DeviceError(f"ends is on device {info.device} and a on device {like.info.device}")
    if array_kind(ends) != like.kind:
        raise InputError(f"a is a {like.kind} array and ends a {array_kind(ends)} one",
                         remedy="pass arrays of one library")
    return CallerArray(ends, like.kind, info, "int32")


def operand_kind_and_dtype(a, b, ai, bi, dtype, precision, what: str) -> tuple[str, str]:
    """(library, input dtype) of a grouped family's two operands (``ai``, ``bi``: their
    descriptions), checked alike: one library, one device, one dtype, float32 only as tf32."""
    from kgen.ops.gemm_tc import input_dtype

    kind = array_kind(a)
    if array_kind(b) != kind:
        raise InputError(f"a is a {kind} array and b a {array_kind(b)} one", remedy="pass arrays of one library")
    if ai.device != bi.device:
        raise DeviceError(f"a is on device {ai.device} and b on device {bi.device}")
    in_a, in_b = input_dtype(ai, dtype, "a"), input_dtype(bi, dtype, "b")
    if in_a != in_b:
        raise DtypeError(f"a is {in_a} and b is {in_b}", remedy="cast both to one dtype")
    if in_a == "float32" and precision != "tf32":
        raise DtypeError(f"{what} runs on the tensor cores: float32 only as tf32",
                         remedy="pass precision='tf32', or cast to bfloat16")
    return kind, in_a


def gemm_grouped(a, b, ends, out=None, *, activation=None, precision=None, dtype=None, out_dtype=None):
    """``out[rows of g] = act(a[rows of g] @ b[g])`` for every group g (see the module text).

    Inside ``torch.compile``, or where autograd records it, the call is the custom operator
    ``torch.ops.kgen.gemm_grouped`` (``kgen.torch``), with a backward."""
    if torch_graph_call(a, b):
        return custom_op("gemm_grouped")(a, b, ends, out, activation=activation, precision=precision, dtype=dtype,
                                         out_dtype=out_dtype)
    from kgen.kernels.gemm.grouped import MAX_GROUPS, grouped_problem

    ai, bi = describe(a, "a"), describe(b, "b")
    if len(ai.shape) != 2 or not contiguous(ai):
        raise LayoutError(f"a (shape {ai.shape}, strides {ai.strides} in elements) must be a dense (rows, K) "
                          "row-major array", remedy="pass a contiguous copy of a")
    if ai.shape[1] == 0:
        raise ShapeError("K = 0: every product is zero", remedy="fill the result with zeros instead")
    if len(bi.shape) != 3:
        raise ShapeError(f"b has {len(bi.shape)} dimensions; it holds one (K, N) matrix a group: (groups, K, N)")
    groups, k, n, layout_b = dense_matrices(bi, "b")
    rows = ai.shape[0]
    if ai.shape[1] != k:
        raise ShapeError(f"inner dimensions differ: a's rows hold {ai.shape[1]} values, b's matrices are {k}x{n}")
    if not 1 <= groups <= MAX_GROUPS:
        raise ShapeError(f"b holds {groups} matrices; grouped GEMM takes 1..{MAX_GROUPS}")
    kind, in_a = operand_kind_and_dtype(a, b, ai, bi, dtype, precision, "grouped GEMM")
    epilogue = epilogue_name(False, activation)
    out_t = checked_output(in_a, out_dtype, epilogue)
    like = CallerArray(a, kind, ai, in_a)
    host = host_ends(ends, groups, rows)
    checked = device_ends(ends, groups, like) if host is None else None
    target = result_array(output_array(out, like, (rows, n), out_t), like, (rows, n), out_t)
    if out is not None:
        same_device([like, target])
        check_no_overlap(target, [like, CallerArray(b, kind, bi, in_a)], "gemm_grouped")
    if rows and n:
        problem = grouped_problem(groups, rows, n, k, in_a, "N" + layout_b, out_dtype=out_t, epilogue=epilogue,
                                  align_a=rules.alignment(ai.ptr, k, ai.itemsize),
                                  align_b=rules.alignment(bi.ptr, int(np.gcd(k * n, n if layout_b == "N" else k)),
                                                          bi.itemsize))
        with on_caller_stream(kind, ai.device):
            # host ends are copied on the caller's stream; CuPy's pool hands that memory out again only
            # in this stream's order, so the copy may be dropped once the kernel is queued
            copied = None if host is None else to_device(host)
            ends_ptr = checked.ptr if copied is None else copied.data.ptr
            operands = {"a": ai.ptr, "b": bi.ptr, "c": target.ptr, "ends": ends_ptr, "alpha": 1.0, "beta": 0.0}
            spec, chosen, _ = raced_route(routed, _route(), problem, ai.device, kind, operands, "c", target)
            launch_family(spec.family, chosen, ai.device, kind, operands)
    return to_jax(target.obj, out_t) if kind == "jax" else target.obj


def routed(problem, device: int):
    """(spec, problem, choice) of the family that runs a grouped ``problem`` on ``device``: of
    those that can (``kgen.kernels.gemm.grouped.route``), the one the dispatcher ranks first
    (measured times, then the preferred family's pick)."""
    return first_ranked(_route(), problem, device, "grouped GEMM")


def _route():
    from kgen.kernels.gemm.grouped import route

    return route


def to_device(host: np.ndarray):
    import cupy

    return cupy.asarray(host)
