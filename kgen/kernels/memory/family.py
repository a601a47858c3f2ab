"""MemoryFamily: what the memory-bound families share. Their element types in the templates,
random operands that are never zero (bfloat16 held as its bits), outputs poisoned with NaN,
the check against a float64 reference in which a NaN or Inf of the reference must be met
exactly, and PyTorch eager as the baseline a report compares with."""

from __future__ import annotations

from typing import Any, Mapping

from kgen.fields import Field
from kgen.kernels.memory.elements import DTYPES, ELEMENTS, element
from kgen.problem import Problem
from kgen.spec import Check, KernelSpec


def dtype_field(name: str = "dtype", help: str = "element type", default: str = "float32") -> Field:
    return Field(name, str, help, default, DTYPES)


def element_context(prefix: str, dtype: str) -> dict[str, str]:
    """The template's names for arrays of ``dtype``: ``{prefix}_t`` (the stored C type),
    ``{prefix}_load`` (to float) and ``{prefix}_store`` (from float)."""
    e = element(dtype)
    return {f"{prefix}_t": e.storage, f"{prefix}_load": e.load, f"{prefix}_store": e.store}


def rows_cols(shape: tuple[int, ...]) -> tuple[int, int]:
    """An array as the families see it: rows x cols, its last axis the columns and every other
    axis folded into rows (a scalar or a vector is one row)."""
    rows = 1
    for size in shape[:-1]:
        rows *= size
    return rows, (shape[-1] if shape else 1)


# ---- device arrays as the families store them (CuPy; loaded on first use) ---------------------
def encode(values, dtype: str):
    """A CuPy array of ``dtype`` from float values (bfloat16: rounded to nearest even, as bits)."""
    import cupy

    if dtype == "bfloat16":
        bits = cupy.ascontiguousarray(values, dtype=cupy.float32).view(cupy.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        nan = cupy.isnan(values)
        return cupy.where(nan, cupy.uint16(0x7FC0), rounded.astype(cupy.uint16))
    return cupy.ascontiguousarray(values, dtype=element(dtype).numpy)


def decode(array, dtype: str):
    """The float64 values of a CuPy array holding ``dtype``."""
    import cupy

    if dtype == "bfloat16":
        return (array.astype(cupy.uint32) << 16).view(cupy.float32).astype(cupy.float64)
    return array.astype(cupy.float64)


def random_array(shape, dtype: str, seed: int, low: float = -1.0, high: float = 1.0):
    """Uniform values in [low, high) stored as ``dtype``, none exactly zero."""
    import cupy

    rng = cupy.random.default_rng(seed)
    values = rng.uniform(low, high, size=shape, dtype=cupy.float32)
    values = cupy.where(values == 0, cupy.float32(0.5 * (low + high) or 0.25), values)
    return encode(values, dtype)


def poisoned(shape, dtype: str):
    """An output array of ``dtype`` full of NaN, so that an element left unwritten fails the check."""
    import cupy

    e = element(dtype)
    if dtype == "bfloat16":
        return cupy.full(shape, 0x7FC0, dtype=cupy.uint16)
    return cupy.full(shape, cupy.nan, dtype=e.numpy)


def torch_view(array, dtype: str):
    """A PyTorch tensor over a CuPy array of ``dtype`` (no copy), for the baselines."""
    import torch

    t = torch.from_dlpack(array)
    return t.view(torch.bfloat16) if dtype == "bfloat16" else t


class MemoryFamily(KernelSpec):
    """Base of the memory-bound families. A family declares ``output_dtype`` when its output is
    not of the problem's ``dtype`` and overrides ``torch_baseline`` to be compared with."""

    options = ("--std=c++17",)
    shape_params = ("rows", "cols")          # a row-major array seen as rows x cols (``rows_cols``)
    baseline_name = "torch"

    def output_dtype(self, problem: Problem, name: str) -> str:
        """The dtype of output ``name`` (default: the problem's ``dtype``)."""
        return problem["dtype"]

    def tolerance(self, problem: Problem) -> float:
        return max(self.output_tolerance(problem, name) for name in self.outputs)

    def output_tolerance(self, problem: Problem, name: str) -> float:
        """The tolerance of output ``name``: that of its dtype (an index output: exact)."""
        dtype = self.output_dtype(problem, name)
        return ELEMENTS[dtype].tolerance if dtype in ELEMENTS else 0.0

    def check(self, problem: Problem, arrays: Mapping[str, Any], expected: Mapping[str, Any]) -> Check:
        """Max error (less the output dtype's spacing at zero) over max abs finite reference, per
        output; where the reference is NaN or Inf, the output must be the same; elsewhere it
        must be finite."""
        import cupy

        worst = 0.0
        for name, want in expected.items():
            dtype = self.output_dtype(problem, name)
            got = decode(arrays[name], dtype) if dtype in ELEMENTS else arrays[name].astype(cupy.float64)
            want = want.astype(cupy.float64)
            if got.shape != want.shape:
                got = got.reshape(want.shape)
            special = ~cupy.isfinite(want)
            if bool(special.any()):
                same = (cupy.isnan(got) & cupy.isnan(want)) | (got == want)
                if not bool(same[special].all()):
                    return Check(False, float("inf"), f"{name}: a NaN or Inf of the reference is not met")
                got, want = got[~special], want[~special]
            if got.size == 0:
                continue
            if not bool(cupy.isfinite(got).all()):
                return Check(False, float("inf"), f"{name} holds NaN or Inf where the reference is finite "
                                                  "(unwritten or overflowed)")
            scale = float(cupy.abs(want).max()) or 1.0
            tiny = ELEMENTS[dtype].tiny if dtype in ELEMENTS else 0.0       # a subnormal result's spacing
            err = max(float(cupy.abs(got - want).max()) - tiny, 0.0) / scale
            worst = max(worst, err)
            tol = self.output_tolerance(problem, name)
            if not err <= tol:
                return Check(False, err, f"{name}: max error {err:.3g} over tolerance {tol:.1g}")
        return Check(True, worst)

    def baseline(self, problem: Problem, operands: Mapping[str, Any]):
        """PyTorch eager on the same arrays (None where PyTorch is not installed)."""
        try:
            import torch  # noqa: F401
        except ImportError:
            return None
        return self.torch_baseline(problem, operands)

    def torch_baseline(self, problem: Problem, operands: Mapping[str, Any]):
        """A function computing the problem with PyTorch on ``operands`` (families override)."""
        return None
