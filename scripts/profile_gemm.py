"""Hardware counters of kgen's kernel and cuBLAS's on the same problems, under Nsight Compute.

    ncu --clock-control none --csv --page raw --metrics ... python3 scripts/profile_gemm.py \\
        bfloat16:NN:1x4096x4096:gemm_wgmma_bf16_nn_64x128x64_s4_c2_g1_pp_k4 ...

Each argument names a problem and a config of a tensor-core GEMM family (gemm_wgmma, gemm_mma,
gemm_skinny: the family is the config name's prefix), or the family's name alone for its
default config; or, for any family, ``KEY@NAME``: a problem key as the database writes it
(``conv2d_wgmma|c=64|...``) and a config name or the family's name. The script launches that
kernel, then the family's baseline (torch.matmul for GEMM, cuDNN for convolutions) on the same
operands, each twice (ncu profiles every launch; the second of each is the one to read). `scripts/gpu_check.sh ncu ARGS` runs it with the metrics that say
where the time goes (duration, DRAM bytes and throughput, L2 hit rate, SM throughput).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def resolve(arg: str, target):
    """(spec, problem, space, config) an argument names (see the module's doc)."""
    from kgen.problem import Problem
    from kgen.registry import families, get_spec

    if "@" in arg:
        key, name = arg.rsplit("@", 1)
        problem = Problem.from_key(key)
        spec = get_spec(problem.family)
    else:
        dtype, layout, shape, name = arg.split(":")
        family = max((f for f in families() if name == f or name.startswith(f + "_")), key=len,
                     default=None)
        if family is None:
            raise SystemExit(f"{arg}: no family's name begins {name!r}")
        spec = get_spec(family)
        m, n, k = (int(x) for x in shape.split("x"))
        problem = spec.problem(m, n, k, dtype, layout)
    space = spec.space(problem, target)
    if name == spec.family:
        return spec, problem, space, spec.default_config(problem, target)
    found = space.find([name])
    if name not in found:
        raise SystemExit(f"{arg}: {name} is not a valid config of this problem's space")
    return spec, problem, space, found[name]


def main(argv: list[str]) -> None:
    import cupy

    from kgen.compile import compile_source
    from kgen.measure.launch import CupyKernel
    from kgen.problem import Target
    from kgen.render import render

    target = Target.detect(0)
    for arg in argv:
        spec, problem, space, config = resolve(arg, target)
        binary = compile_source(render(spec, problem, config, target, space)).binary
        kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
        ops = spec.inputs(problem, seed=1)
        baseline = spec.baseline(problem, ops)
        for run in (lambda: spec.run(kernel, problem, config, ops), baseline):
            if run is None:
                continue
            for _ in range(2):
                run()
            cupy.cuda.Device().synchronize()
        print(f"profiled {config.name} and {spec.baseline_name} on {problem.key}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
