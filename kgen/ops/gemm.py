"""``kgen.gemm``: the user-facing GEMM, a layer above dispatch. It reads how the call was
made, sends it to the CUDA-core path (``gemm_simt``) or the tensor-core one (``gemm_tc``),
and says which kernel a call would run (``gemm_choice``)."""

from __future__ import annotations

from dataclasses import dataclass

from kgen.dispatch import default_dispatcher
from kgen.measure.arg_pack import cupy_ndarray
from kgen.ops import gemm_batched, gemm_simt, gemm_tc
from kgen.ops.caller import custom_op, torch_graph_call


def _ndim(x) -> int:
    """Dimensions of an operand (ndim where the library has it, else its array interface's)."""
    ndim = getattr(x, "ndim", None)
    if ndim is None:
        cai = getattr(x, "__cuda_array_interface__", None)
        ndim = len(cai["shape"]) if cai else 2
    return ndim


def gemm(a, b, c=None, alpha: float = 1.0, beta: float = 0.0, *, bias=None, activation=None,
         precision=None, dtype=None, out_dtype=None):
    """C = act(alpha * a @ b + beta * c + bias) on the GPU, with the best kernel kgen knows.

    ``a`` and ``b`` are CuPy arrays, PyTorch tensors, JAX arrays (or any
    ``__cuda_array_interface__`` arrays) of float32, float64, float16 or bfloat16 (a CuPy
    uint16 array holds bfloat16 bits when ``dtype="bfloat16"`` says so); a transposed view
    is read as such, never copied. float32 runs on CUDA cores unless ``precision="tf32"``;
    the rest on tensor cores. ``bias`` (one value per column, in the output dtype) and
    ``activation`` ("relu" or "gelu") are fused into the kernel; ``out_dtype`` may be
    float32 for half-precision inputs. Without ``c`` a new array of the caller's type is
    returned. Runs on the caller's current stream, without synchronising. The first call
    of a signature chooses and loads the kernel; later calls reuse that plan. 3-D operands
    are a batch of GEMMs (``kgen.ops.gemm_batched``: (batch, M, K) @ (batch, K, N), a 2-D
    operand serving every batch).

    >>> # import cupy, kgen
    >>> # a = cupy.random.rand(512, 256, dtype=cupy.float32); b = cupy.random.rand(256, 128, dtype=cupy.float32)
    >>> # cupy.allclose(kgen.gemm(a, b), a @ b, rtol=1e-4)

    Inside ``torch.compile``, or where autograd records it, the call is the custom operator
    ``torch.ops.kgen.gemm`` (``kgen.torch``): one node of the graph, with a backward.
    """
    if torch_graph_call(a, b, bias):
        return custom_op("gemm")(a, b, c, alpha, beta, bias=bias, activation=activation, precision=precision,
                                 dtype=dtype, out_dtype=out_dtype)
    if _ndim(a) > 2 or _ndim(b) > 2:
        return gemm_batched.call(gemm, a, b, c, alpha, beta, bias=bias, activation=activation, precision=precision,
                                 dtype=dtype, out_dtype=out_dtype)
    dispatcher = default_dispatcher()
    ndarray = cupy_ndarray()
    cupy_arrays = type(a) is ndarray and type(b) is ndarray and (c is None or type(c) is ndarray)
    ia = None
    if (bias is not None or activation is not None or precision is not None or dtype is not None
            or out_dtype is not None
            or (a.dtype.char != "f" if cupy_arrays else (ia := gemm_simt.float32_interface(a)) is None)):
        out = gemm_tc.call(dispatcher, a, b, c, alpha, beta, bias=bias, activation=activation,
                           precision=precision, dtype=dtype, out_dtype=out_dtype)
        if out is not None:
            return out
        ia = None if cupy_arrays else gemm_simt.float32_interface(a)
    return gemm_simt.call(dispatcher, a, b, c, alpha, beta, cupy_arrays, ia)


@dataclass(frozen=True)
class GemmChoice:
    """What ``kgen.gemm`` runs for a call: the family, the config (``cublas``: the vendor
    library) and how dispatch chose it (tuned, raced, vendor, arch, model, nearest, default)."""

    family: str
    config: str
    how: str
    staged: str = ""       # the arrays copied through padded rows: "a", "b", "c" (the output, back) or ""


def gemm_choice(a, b, c=None, *, bias=None, activation=None, precision=None, dtype=None,
                out_dtype=None) -> GemmChoice:
    """The kernel ``kgen.gemm`` would run for these arguments, chosen (and loaded) as a call
    would, without running it.

    >>> # kgen.gemm_choice(a, b)  ->  GemmChoice(family='gemm_wgmma', config='gemm_wgmma_bf16_nn_...', how='model')
    """
    dispatcher = default_dispatcher()
    plan = gemm_tc.make_plan(dispatcher, a, b, c, bias, activation, precision, dtype, out_dtype)
    if plan.simt:
        simt = gemm_simt.make_plan(dispatcher, a, b, c)
        if simt.delegate is None:
            return GemmChoice("gemm", simt.config.name if simt.config else "", simt.how)
        plan = simt.delegate
    staged = plan.staging.label if plan.staging is not None else ""
    return GemmChoice(plan.spec.family, plan.config.name if plan.config else "", plan.how, staged)
