"""The GEMM families' vendor candidate: cuBLAS on the caller's arrays, on the caller's stream.

A tune times this very call on its operands (``KernelSpec.vendor_run``), so the stored
``cublas`` time is the time of what dispatch runs: ``torch.matmul`` (``torch.addmm`` with
beta; a batch of GEMMs, 3-D operands, as ``torch.matmul``'s batched call), then bias and
activation as PyTorch operations, where PyTorch is installed; else ``cupy.matmul``, which
covers float16, float32 and float64 without an epilogue. A problem whose output dtype is
not its input dtype has no vendor candidate (the library would round the product to the
input dtype first).

>>> from kgen.kernels.gemm.problem import gemm_problem
>>> vendor_supported(gemm_problem(100, 100, 100, "float32", "NT"))
True
"""

from __future__ import annotations

import functools
import importlib.util
import sys

from kgen.problem import Problem


@functools.cache
def _torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


def _parts(problem: Problem) -> tuple[str, str, str, bool]:
    """(input dtype, output dtype, epilogue, tf32) of a CUDA-core or tensor-core GEMM problem."""
    params = dict(problem.params)
    dtype = params["dtype"]
    return (dtype, params.get("out_dtype", dtype), params.get("epilogue", "none"),
            params.get("precision") == "tf32")


def _cupy_runs(problem: Problem) -> bool:
    dtype, out, epilogue, tf32 = _parts(problem)
    return dtype in ("float16", "float32", "float64") and out == dtype and epilogue == "none" and not tf32


def vendor_supported(problem: Problem) -> bool:
    dtype, out, _, _ = _parts(problem)
    if out != dtype:
        return False
    return _torch_installed() or _cupy_runs(problem)


def vendor_call(problem: Problem):
    """``call(a, b, c, alpha, beta, bias)``: c = act(alpha a @ b + beta c + bias) by cuBLAS."""
    if _torch_installed():
        return _torch_call(problem)
    return _cupy_call(problem)


# ---- through PyTorch ------------------------------------------------------------------------

def _torch_call(problem: Problem):
    import torch

    dtype, out, epilogue, tf32 = _parts(problem)
    activation = epilogue.replace("bias", "").strip("_")
    streams: dict[int, object] = {}

    last: list = [None, None, None]   # per operand: (pointer, shape, strides) and its PyTorch view

    def tensor(x, dt, slot):
        """A PyTorch view of ``x``; of a CuPy array, the last call's view where it is the same
        array (the view holds that one array alive until the next call)."""
        if isinstance(x, torch.Tensor):
            return x
        data = getattr(x, "data", None)
        key = (getattr(data, "ptr", None), getattr(x, "shape", None), getattr(x, "strides", None))
        seen = last[slot]
        if key[0] is not None and seen is not None and seen[0] == key:
            return seen[1]
        t = torch.from_dlpack(x)
        t = t.view(torch.bfloat16) if dt == "bfloat16" and t.dtype == torch.uint16 else t
        last[slot] = (key, t) if key[0] is not None else None
        return t

    def torch_bits(x, dt):
        t = torch.from_dlpack(x)
        return t.view(torch.bfloat16) if dt == "bfloat16" and t.dtype == torch.uint16 else t

    def compute(ta, tb, tc, alpha, beta, bias):
        if beta and tc.dim() == 2:
            torch.addmm(tc, ta, tb, beta=beta, alpha=alpha, out=tc)
        elif beta:                               # a batch (torch.baddbmm takes no broadcast operand)
            tc.mul_(beta).add_(torch.matmul(ta, tb), alpha=alpha)
        else:
            torch.matmul(ta, tb, out=tc)
            if alpha != 1.0:
                tc.mul_(alpha)
        if bias is not None:
            tc.add_(bias if isinstance(bias, torch.Tensor) else torch_bits(bias, out))
        if activation == "relu":
            torch.relu_(tc)
        elif activation == "gelu":
            tc.copy_(torch.nn.functional.gelu(tc))

    def call(a, b, c, alpha, beta, bias):
        ta, tb, tc = tensor(a, dtype, 0), tensor(b, dtype, 1), tensor(c, out, 2)
        allowed = torch.backends.cuda.matmul.allow_tf32
        if allowed != tf32:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            if isinstance(a, torch.Tensor):       # PyTorch's current stream, as kgen's kernels use
                compute(ta, tb, tc, alpha, beta, bias)
                return
            ptr = sys.modules["cupy"].cuda.get_current_stream().ptr   # CuPy's current stream
            if not ptr:
                compute(ta, tb, tc, alpha, beta, bias)
                return
            stream = streams.get(ptr)
            if stream is None:
                stream = streams[ptr] = torch.cuda.ExternalStream(ptr)
            with torch.cuda.stream(stream):
                compute(ta, tb, tc, alpha, beta, bias)
        finally:
            if allowed != tf32:
                torch.backends.cuda.matmul.allow_tf32 = allowed

    return call


# ---- through CuPy ---------------------------------------------------------------------------

def _cupy_call(problem: Problem):
    import cupy

    if not _cupy_runs(problem):
        raise NotImplementedError(f"cupy.matmul does not run {problem.key}; the vendor call needs PyTorch")

    def call(a, b, c, alpha, beta, bias):
        ca, cb, cc = cupy.asarray(a), cupy.asarray(b), cupy.asarray(c)
        if beta:
            product = cupy.matmul(ca, cb)
            cc *= beta
            cc += alpha * product if alpha != 1.0 else product
            return
        cupy.matmul(ca, cb, out=cc)
        if alpha != 1.0:
            cc *= alpha

    return call
