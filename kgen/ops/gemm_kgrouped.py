"""``kgen.gemm_kgrouped``: for every group, its rows of ``a`` transposed times its rows of ``b``,
in one launch (a mixture-of-experts layer's weight gradient: ``out[g] = a[rows of g]ᵀ @
b[rows of g]``, the reduction over each expert's tokens).

``a`` is (T, M) and ``b`` (T, N), both row-major: every group's rows one after another. ``ends``
says where each group's rows end, as for ``kgen.gemm_grouped``: ``ends[g]`` is one past group
g's last row; an int32 device array of G values (read by the kernel, never by the host: no
synchronisation), or a host sequence of G ints (checked, then copied on the caller's stream).
Rows at and past ``ends[-1]`` are not read; a group without rows gets zeros. The result is
(G, M, N), of the caller's library, on its current stream, in the inputs' dtype unless
``out_dtype`` (float32 for half inputs) says otherwise. On Hopper, with 16-bit operands whose
rows TMA can read, the kernel is ``gemm_kgrouped_wgmma``'s; elsewhere ``gemm_kgrouped``'s
(mma.sync); of two that can, the faster measured, else the Hopper one.
"""

from __future__ import annotations

from kgen.arrays import describe
from kgen.errors import LayoutError, ShapeError
from kgen.kernels.gemm import rules
from kgen.kernels.gemm.dtypes import checked_output
from kgen.ops.caller import (CallerArray, check_no_overlap, contiguous, custom_op, on_caller_stream, output_array,
                             result_array, same_device, to_jax, torch_graph_call)
from kgen.ops.gemm_grouped import device_ends, ends_count, host_ends, operand_kind_and_dtype, to_device
from kgen.ops.launch import first_ranked, launch_family, raced_route


def _rows(info, name: str) -> tuple[int, int]:
    if len(info.shape) != 2 or not contiguous(info):
        raise LayoutError(f"{name} (shape {info.shape}, strides {info.strides} in elements) must be a dense "
                          "(rows, columns) row-major array", remedy=f"pass a contiguous copy of {name}")
    return info.shape


def gemm_kgrouped(a, b, ends, out=None, *, precision=None, dtype=None, out_dtype=None):
    """``out[g] = a[rows of g]ᵀ @ b[rows of g]`` for every group g (see the module text).

    Inside ``torch.compile``, or where autograd records it, the call is the custom operator
    ``torch.ops.kgen.gemm_grouped_weight_gradient`` (``kgen.torch``)."""
    if torch_graph_call(a, b):
        return custom_op("gemm_kgrouped")(a, b, ends, out, precision=precision, dtype=dtype, out_dtype=out_dtype)
    from kgen.kernels.gemm.kgrouped import MAX_GROUPS, kgrouped_problem

    ai, bi = describe(a, "a"), describe(b, "b")
    (rows, m), (rows_b, n) = _rows(ai, "a"), _rows(bi, "b")
    if rows != rows_b:
        raise ShapeError(f"a has {rows} rows and b {rows_b}: both hold every group's rows",
                         remedy="pass the same tokens' rows of both")
    groups = ends_count(ends)
    if not 1 <= groups <= MAX_GROUPS:
        raise ShapeError(f"ends holds {groups} groups; K-grouped GEMM takes 1..{MAX_GROUPS}")
    kind, in_a = operand_kind_and_dtype(a, b, ai, bi, dtype, precision, "K-grouped GEMM")
    out_t = checked_output(in_a, out_dtype, "none")
    like = CallerArray(a, kind, ai, in_a)
    host = host_ends(ends, groups, rows)
    checked = device_ends(ends, groups, like) if host is None else None
    target = result_array(output_array(out, like, (groups, m, n), out_t), like, (groups, m, n), out_t)
    if out is not None:
        same_device([like, target])
        check_no_overlap(target, [like, CallerArray(b, kind, bi, in_a)], "gemm_kgrouped")
    if m and n:
        with on_caller_stream(kind, ai.device):
            if rows == 0:           # no rows at all: every group's product is zero
                target.obj[...] = 0
            else:
                problem = kgrouped_problem(groups, m, n, rows, in_a, out_t,
                                           align_a=rules.alignment(ai.ptr, m, ai.itemsize),
                                           align_b=rules.alignment(bi.ptr, n, bi.itemsize))
                copied = None if host is None else to_device(host)
                ends_ptr = checked.ptr if copied is None else copied.data.ptr
                operands = {"a": ai.ptr, "b": bi.ptr, "c": target.ptr, "ends": ends_ptr, "alpha": 1.0, "beta": 0.0}
                spec, chosen, _ = raced_route(routed, _route(), problem, ai.device, kind, operands, "c", target)
                launch_family(spec.family, chosen, ai.device, kind, operands)
    return to_jax(target.obj, out_t) if kind == "jax" else target.obj


def routed(problem, device: int):
    """(spec, problem, choice) of the family that runs a K-grouped ``problem`` on ``device``: of
    those that can (``kgen.kernels.gemm.kgrouped.route``), the one the dispatcher ranks first."""
    return first_ranked(_route(), problem, device, "K-grouped GEMM")


def _route():
    from kgen.kernels.gemm.kgrouped import route

    return route
