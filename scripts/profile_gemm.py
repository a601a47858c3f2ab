"""Hardware counters of kgen's kernel and cuBLAS's on the same problems, under Nsight Compute.

    ncu --clock-control none --csv --page raw --metrics ... python3 scripts/profile_gemm.py \\
        bfloat16:NN:1x4096x4096:gemm_wgmma_bf16_nn_64x128x64_s4_c2_g1_pp_k4 ...

Each argument names a problem and a config of a tensor-core GEMM family (gemm_wgmma, gemm_mma,
gemm_skinny: the family is the config name's prefix), or the family's name alone for its
default config; the script launches that kernel,
then torch.matmul on the same operands, each twice (ncu profiles every launch; the second of
each is the one to read). `scripts/gpu_check.sh ncu ARGS` runs it with the metrics that say
where the time goes (duration, DRAM bytes and throughput, L2 hit rate, SM throughput).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str]) -> None:
    import cupy

    from kgen.compile import compile_source
    from kgen.kernels.gemm.tc import torch_baseline
    from kgen.measure.launch import CupyKernel
    from kgen.problem import Target
    from kgen.registry import families, get_spec
    from kgen.render import render

    target = Target.detect(0)
    for arg in argv:
        dtype, layout, shape, name = arg.split(":")
        family = max((f for f in families() if name == f or name.startswith(f + "_")), key=len,
                     default=None)
        if family is None:
            raise SystemExit(f"{arg}: no family's name begins {name!r}")
        spec = get_spec(family)
        m, n, k = (int(x) for x in shape.split("x"))
        problem = spec.problem(m, n, k, dtype, layout)
        space = spec.space(problem, target)
        if name == family:
            config = spec.default_config(problem, target)
            name = config.name
        else:
            found = space.find([name])
            if name not in found:
                raise SystemExit(f"{arg}: {name} is not a valid config of this problem's space")
            config = found[name]
        binary = compile_source(render(spec, problem, config, target, space)).binary
        kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
        ops = spec.inputs(problem, seed=1)
        cublas = torch_baseline(problem, ops)
        for run in (lambda: spec.run(kernel, problem, config, ops), cublas):
            for _ in range(2):
                run()
            cupy.cuda.Device().synchronize()
        print(f"profiled {name} and torch.matmul on {m}x{n}x{k}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
