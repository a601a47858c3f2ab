"""float32 GEMMs whose N is no multiple of 4 on the CUDA-core family: its epilogue with lanes that
exchange values (C_TRANSPOSE, consecutive columns per store) against the template before it
(scalar stores 4 columns apart), the same config on N rounded up to a multiple of 4 (vector
stores), and cuBLAS (TF32 off), side by side in one run.

    python3 scripts/experiments/simt_odd_n_stores.py --base-template /tmp/simt_base.cu.j2 --out rows.jsonl

The config is the one ``kgen.gemm`` runs untuned with KGEN_VENDOR=0, or those named with
``--config``. Each kernel is checked against float64 on fresh inputs (NaN-poisoned output)
before it is timed (CUDA events, L2 flushed, median of 25, the variants in turns, 3 rounds).
One JSON line per (shape, variant): m, n, k, layout, config, variant, ms, written_tbps (C's bytes
over the time), cublas_ms.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

SHAPES = ("7872x9507x22:NT", "4000x3001x64:NN", "2048x1023x512:TN", "6000x5555x16:TT", "1536x777x2048:NT",
          "9000x301x128:NN", "4000x3000x64:NN")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-template", type=Path, required=True, help="templates/gemm/simt.cu.j2 as it was")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="MxNxK:LAYOUT, comma-separated")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import cupy
    import torch

    from compare_configs import in_turns
    from kgen.compile import compile_source
    from kgen.kernels.gemm.problem import gemm_problem
    from kgen.measure.bench import l2_flusher
    from kgen.measure.launch import CupyKernel
    from kgen.measure.verify import verify
    from kgen.problem import Target
    from kgen.registry import get_spec
    from kgen.render import render

    import kgen

    os.environ["KGEN_VENDOR"] = "0"
    target = Target.detect(0)
    spec = get_spec("gemm")
    base = copy.copy(spec)
    base.template = str(args.base_template.resolve())
    flush = l2_flusher(target.l2_bytes)
    for item in args.shapes.split(","):
        shape, layout = item.split(":")
        m, n, k = (int(x) for x in shape.split("x"))
        problem = gemm_problem(m, n, k, "float32", layout, None, None)
        ops = spec.inputs(problem, seed=1)
        choice = kgen.gemm_choice(ops["a"], ops["b"], ops["c"])
        config = spec.space(problem, target).find([choice.config.name])[choice.config.name]
        runs, wide = {}, n + (-n) % 4
        variants = [("exchange", spec, problem), ("before", base, problem)]
        if wide != n:
            variants.append((f"n={wide}", spec, gemm_problem(m, wide, k, "float32", layout, None, None)))
        for name, variant, p in variants:
            space = variant.space(p, target)
            binary = compile_source(render(variant, p, config, target, space)).binary
            kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
            check_ops = variant.inputs(p, seed=2)
            check = verify(variant, p, config, kernel, check_ops, variant.reference(p, check_ops))
            if not check.ok:
                print(f"{item} {name}: WRONG ({check.detail})", flush=True)
                continue
            timed_ops = ops if p is problem else variant.inputs(p, seed=1)
            runs[name] = (lambda kernel=kernel, variant=variant, p=p, o=timed_ops: variant.run(kernel, p, config, o))
        a, b, c = (torch.as_tensor(ops[x], device="cuda") for x in ("a", "b", "c"))
        torch.backends.cuda.matmul.allow_tf32 = False
        runs["cublas"] = lambda: torch.matmul(a, b, out=c)       # (the operands are M x K and K x N views)
        times = {name: statistics.median(ts) for name, ts in in_turns(runs, flush).items()}
        cublas = times.pop("cublas")
        for name, ms in times.items():
            row = {"m": m, "n": n, "k": k, "layout": layout, "config": config.name, "how": choice.how,
                   "variant": name, "ms": ms, "written_tbps": m * n * 4 / (ms * 1e-3) / 1e12, "cublas_ms": cublas}
            print(f"{item:22s} {name:10s} {config.name:60s} {ms * 1e3:9.1f} us  "
                  f"{row['written_tbps']:.2f} TB/s  cuBLAS {cublas * 1e3:9.1f} us", flush=True)
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
        cupy.cuda.Device().synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
