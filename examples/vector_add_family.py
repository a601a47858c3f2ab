"""A kernel family of your own: a template, a space, the launch geometry, inputs and a
reference. This one adds two vectors, tuned over block size and vector width.

    python examples/vector_add_family.py          # registers it; tunes and runs it on a GPU

Shipped in a package, the family reaches every command with no edit to kgen: name it in the
package's pyproject.toml under [project.entry-points."kgen.families"] (vadd = "mypkg:VectorAdd").
"""

import math
import numpy as np
import kgen
from kgen import KernelSpec, Launch, Param, Constraint, Space, Problem

VADD = """
extern "C" __global__ void __launch_bounds__({{ BLOCK }}) {{ entry }}(
        const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, long long n) {
    long long i = ((long long)blockIdx.x * {{ BLOCK }} + threadIdx.x) * {{ VEC }};
    #pragma unroll
    for (int j = 0; j < {{ VEC }}; ++j)
        if (i + j < n) out[i + j] = x[i + j] + y[i + j];
}
"""


class VectorAdd(KernelSpec):
    family = "vadd"
    template_source = VADD
    shape_params = ("n",)
    outputs = ("out",)

    def space(self, problem, target):
        return Space([Param("BLOCK", (64, 128, 256, 512, 1024)), Param("VEC", (1, 2, 4))],
                     [Constraint("block fits", lambda v: v["BLOCK"] <= target.max_threads_per_block)],
                     namer=lambda v: f"vadd_b{v['BLOCK']}_v{v['VEC']}")

    def launch(self, problem, config):
        per_block = config["BLOCK"] * config["VEC"]
        return Launch((max(1, math.ceil(problem["n"] / per_block)), 1, 1), (config["BLOCK"], 1, 1))

    def args(self, problem, config, ops):
        return [ops["x"], ops["y"], ops["out"], np.int64(problem["n"])]

    def inputs(self, problem, seed):
        import cupy
        rng = cupy.random.default_rng(seed)
        n = problem["n"]
        return {"x": rng.random(n, dtype=cupy.float32) + 0.5, "y": rng.random(n, dtype=cupy.float32) + 0.5,
                "out": cupy.full(n, cupy.nan, dtype=cupy.float32)}

    def reference(self, problem, ops):
        return {"out": ops["x"] + ops["y"]}

    def bytes(self, problem):
        return 12.0 * problem["n"]


spec = kgen.register(VectorAdd())
problem = Problem.of("vadd", n=1 << 24)


if __name__ == "__main__":
    from kgen.db import open_default
    from kgen.runners import LocalGPURunner
    from kgen.search import tune

    with LocalGPURunner() as runner:
        result = tune(spec, problem, kgen.Target.detect(), runner, open_default(), trials=15)
    best = result.best
    print(f"{best.config_name}: {best.time_ms:.4f} ms" if best else "no config ran")
