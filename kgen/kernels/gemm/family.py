"""What every GEMM family answers the same way, beside its kernels: the problem fields a user
gives (``kgen tune gemm --m ... --dtype bfloat16``) and the family that request goes to, the
cost model's pick for an untuned problem (``cost``) and cuBLAS as a candidate (``vendor``).

>>> from kgen.registry import get_spec
>>> get_spec("gemm").model_version() == get_spec("gemm_wgmma").model_version()
True
>>> spec, problem = get_spec("gemm").request(Target.h200(), m=64, n=64, k=64, dtype="float32", layout="nt")
>>> spec.family, problem["layout"]
('gemm', 'NT')
"""

from __future__ import annotations

from kgen.errors import KgenError
from kgen.fields import Field
from kgen.kernels.gemm import cost as gemm_cost
from kgen.kernels.gemm import vendor as gemm_vendor
from kgen.kernels.gemm.dtypes import EPILOGUES
from kgen.kernels.gemm.problem import LAYOUTS
from kgen.kernels.gemm.route import PRECISIONS, preferred_request, rival_requests
from kgen.problem import Problem, Target

FIELDS = (
    Field("m", int, "rows of A and C"),
    Field("n", int, "columns of B and C"),
    Field("k", int, "inner dimension"),
    Field("dtype", str, "input dtype", "float32", ("float32", "float64", "float16", "bfloat16")),
    Field("layout", str, "A's and B's layout: N (as is) or T (transposed storage)", "NN"),
    Field("precision", str, "tf32: float32 on the tensor cores", None, tuple(p for p in PRECISIONS if p)),
    Field("out_dtype", str, "C's dtype (float32 allowed for half inputs)", None),
    Field("epilogue", str, "fused tail", "none", EPILOGUES),
)


class GemmFamily:
    """A mixin of the GEMM specs (listed before ``KernelSpec`` among the bases)."""

    problem_fields = FIELDS
    baseline_name = "cuBLAS"

    def request(self, target: Target, **values):
        """(spec, problem) of a GEMM request: ``gemm`` routes half precision, float64, tf32 and
        epilogues to the tensor-core family the cost model predicts fastest on ``target``."""
        return preferred_request(self.family, *_request_fields(values), target, **values)

    def rivals(self, target: Target, **values) -> list[tuple]:
        """The other families' problems of a ``gemm`` request (``rival_requests``)."""
        return rival_requests(self.family, *_request_fields(values), target, **values)

    def model_choice(self, problem: Problem, target: Target):
        return gemm_cost.pick(self, problem, target)

    def model_version(self) -> str | None:
        return gemm_cost.model_version() if gemm_cost.has_model(self.family) else None

    def vendor_supported(self, problem: Problem) -> bool:
        return gemm_vendor.vendor_supported(problem)

    def vendor_call(self, problem: Problem):
        return gemm_vendor.vendor_call(problem)


def _request_fields(values: dict) -> tuple[int, int, int, str, str]:
    """(m, n, k, dtype, layout) popped from a request's field values, checked; the options stay."""
    layout = str(values.pop("layout", "NN")).upper()
    if layout not in LAYOUTS:
        raise KgenError(f"layout {layout!r} is not one of {LAYOUTS}", remedy="give two letters of N and T")
    m, n, k = values.pop("m"), values.pop("n"), values.pop("k")
    if min(m, n, k) < 1:
        raise KgenError(f"sizes must be >= 1 (got m={m}, n={n}, k={k})")
    return m, n, k, values.pop("dtype", "float32"), layout
