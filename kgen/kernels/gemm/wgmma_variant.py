"""What a family that runs ``gemm_wgmma``'s kernel on a problem of its own (batched, grouped)
answers the same way: 16-bit inputs only (its operands all come by TMA), the request from
``kgen tune`` fields, no staging of operands, no split-K in the model's picks, no cost model (it
knows plain GEMMs only), export with the generic runtime (``run(problem, a=, b=, c=, ...)``, the
maps encoded at call time), and the space with some of ``gemm_wgmma``'s parameters fixed."""

from __future__ import annotations

from typing import Any

from kgen.errors import DtypeError
from kgen.kernels.gemm.wgmma import GemmWgmma
from kgen.problem import Problem, Target
from kgen.space import Param, Space
from kgen.spec import GENERIC_RUNTIME, KernelSpec

DTYPES = ("bfloat16", "float16")


class WgmmaVariant(GemmWgmma):
    export_runtime = GENERIC_RUNTIME
    export_files, export_extras = KernelSpec.export_files, KernelSpec.export_extras
    stores_rows_by_band = False      # a C TMA cannot store is written from registers (batch or group offsets)

    def request(self, target: Target, **values):
        values["layout"] = str(values.get("layout", "NN")).upper()
        values.pop("precision", None)
        if values.get("dtype", "bfloat16") not in DTYPES:
            mma = self.family.replace("_wgmma", "")
            raise DtypeError(f"{self.family} runs {' and '.join(DTYPES)}, not {values['dtype']}",
                             remedy=f"pass --dtype bfloat16 (or float16); float32 runs as tf32 on {mma}")
        return self, self.problem(**{k: v for k, v in values.items() if v is not None})

    def supports(self, problem: Problem, target: Target) -> bool:
        return problem["dtype"] in DTYPES and super().supports(problem, target)

    def staging_needed(self, problem: Problem) -> tuple[bool, bool]:
        return False, False

    def default_split(self, problem: Problem, rows: int, cols: int, bm: int, bn: int, sms: int) -> int:
        return 1

    def model_choice(self, problem: Problem, target: Target):
        return None

    def model_version(self) -> str | None:
        return None

    def fixed_space(self, whole: Space, fixed: dict[str, Any], constraints=()) -> Space:
        """``whole`` (a gemm_wgmma space) with the ``fixed`` parameters at one value, and more
        ``constraints``, its configs named after this family."""
        params = [Param(p.name, (fixed[p.name],), default=fixed[p.name]) if p.name in fixed else p
                  for p in whole.params]
        return Space(params, [*whole.constraints, *constraints], whole.derived, whole.namer).renamed(
            "gemm_wgmma_", self.family + "_")
