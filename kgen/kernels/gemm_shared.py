"""What every GEMM family answers the same way, beside its kernels: the cost model's pick
for an untuned problem (``gemm_cost``) and cuBLAS as a candidate (``gemm_vendor``).

>>> from kgen.spec import get_spec
>>> get_spec("gemm").model_version() == get_spec("gemm_wgmma").model_version()
True
"""

from __future__ import annotations

from kgen.kernels import gemm_vendor
from kgen.problem import Problem, Target


class GemmCandidates:
    """A mixin of the GEMM specs (listed before ``KernelSpec`` among the bases)."""

    def model_choice(self, problem: Problem, target: Target):
        from kgen.kernels import gemm_cost      # the model reads the family modules' rules

        return gemm_cost.pick(self, problem, target)

    def model_version(self) -> str | None:
        from kgen.kernels import gemm_cost

        return gemm_cost.model_version() if gemm_cost.has_model(self.family) else None

    def vendor_supported(self, problem: Problem) -> bool:
        return gemm_vendor.vendor_supported(problem)

    def vendor_call(self, problem: Problem):
        return gemm_vendor.vendor_call(problem)
