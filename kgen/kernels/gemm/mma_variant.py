"""What a family that runs ``gemm_mma``'s kernel, changed, on a problem of its own (batched,
grouped) answers the same way: the request from ``kgen tune`` fields (float32 only as tf32,
when asked), the default tile counting the family's own tiles, no cost model (it knows plain
GEMMs only), and export with the generic runtime (``run(problem, a=, b=, c=, ...)``)."""

from __future__ import annotations

from kgen.errors import InputError
from kgen.kernels.gemm.mma import GemmMma
from kgen.problem import Problem, Target
from kgen.spec import GENERIC_RUNTIME, KernelSpec


class MmaVariant(GemmMma):
    export_runtime = GENERIC_RUNTIME
    export_dependencies, export_files, export_extras = (KernelSpec.export_dependencies, KernelSpec.export_files,
                                                        KernelSpec.export_extras)

    def tiles(self, problem: Problem, bm: int, bn: int) -> int:
        """Output tiles of bm x bn the problem has (every batch's, every group's)."""
        raise NotImplementedError

    def request(self, target: Target, **values):
        values["layout"] = str(values.get("layout", "NN")).upper()
        precision = values.pop("precision", None)
        if values.get("dtype", "bfloat16") == "float32" and precision != "tf32":
            raise InputError(f"{self.family} runs float32 on the tensor cores as tf32 only when asked",
                             remedy="pass --precision tf32")
        return self, self.problem(**{k: v for k, v in values.items() if v is not None})

    def _tile_rank(self, problem: Problem, target: Target, tile: tuple) -> tuple:
        """gemm_mma's rule (the largest tile of which there are as many as SMs), counting ``tiles``."""
        tiles = self.tiles(problem, tile[0], tile[1])
        return (tiles < target.sm_count, -tile[0] * tile[1] if tiles >= target.sm_count else -tiles)

    def model_choice(self, problem: Problem, target: Target):
        return None

    def model_version(self) -> str | None:
        return None
