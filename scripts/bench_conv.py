"""conv2d forward side by side with cuDNN (PyTorch, channels-last, ``cudnn.benchmark``), in one run.

Each case is timed as a user calls it: ``kgen.conv2d`` on channels-last PyTorch tensors into a
preallocated output, and ``torch.nn.functional.conv2d`` on the same tensors (cuDNN picks its
algorithm in the warm-up), with CUDA events, the L2 flushed before each run, median of the runs.
Before timing, kgen's result is compared with a float64 convolution of the same inputs.

    python scripts/bench_conv.py                  # every case -> scripts/results/<device>/bench_conv.json
    python scripts/bench_conv.py --quick --keys /tmp/keys

Rows (one per case): op ("fprop"), n, h, w, c, k, r, s, stride, padding, dilation, dtype,
epilogue, kgen_ms, baselines ({"cudnn": ms}), tflops (kgen's), speedup (cuDNN ms / kgen ms),
config and how dispatch chose it (tuned, model, default), ok (within tolerance of float64), error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import commit, last_choice, median_ms, write_keys  # noqa: E402

# ResNet-50's convolutions at batch 32 (stem, the 3x3 and 1x1 of each stage, the strided ones),
# then shapes no network here was built around: C not a multiple of 8, dilation, 1x1 images,
# rectangular windows, a small batch
RESNET = [
    (32, 224, 224, 3, 64, 7, 7, 2, 3, 1),
    (32, 56, 56, 64, 64, 1, 1, 1, 0, 1),
    (32, 56, 56, 64, 64, 3, 3, 1, 1, 1),
    (32, 56, 56, 64, 256, 1, 1, 1, 0, 1),
    (32, 56, 56, 256, 128, 1, 1, 1, 0, 1),
    (32, 56, 56, 128, 128, 3, 3, 2, 1, 1),
    (32, 28, 28, 128, 128, 3, 3, 1, 1, 1),
    (32, 28, 28, 512, 256, 1, 1, 1, 0, 1),
    (32, 28, 28, 256, 256, 3, 3, 2, 1, 1),
    (32, 14, 14, 256, 256, 3, 3, 1, 1, 1),
    (32, 14, 14, 1024, 512, 1, 1, 1, 0, 1),
    (32, 7, 7, 512, 512, 3, 3, 1, 1, 1),
    (32, 7, 7, 512, 2048, 1, 1, 1, 0, 1),
]
ODD = [
    (16, 64, 64, 20, 48, 3, 3, 1, 2, 2),
    (8, 33, 47, 36, 100, 5, 5, 2, 2, 1),
    (256, 1, 1, 512, 1000, 1, 1, 1, 0, 1),
    (4, 112, 112, 12, 24, 3, 3, 1, 1, 1),
    (64, 17, 17, 192, 224, 1, 7, 1, (0, 3), 1),
    (2, 128, 128, 64, 64, 3, 3, 1, 1, 1),
]
FIELDS = ("n", "h", "w", "c", "k", "r", "s", "stride", "padding", "dilation")


def _cases(quick: bool) -> list[dict]:
    cases = []
    resnet = RESNET[:: 4] if quick else RESNET
    for shape in resnet:
        cases.append(dict(zip(FIELDS, shape), dtype="bfloat16", epilogue="none", suite="resnet50"))
    for shape in (ODD[:2] if quick else ODD):
        cases.append(dict(zip(FIELDS, shape), dtype="bfloat16", epilogue="none", suite="odd"))
    if not quick:
        for shape in (RESNET[2], RESNET[9], ODD[0]):
            cases.append(dict(zip(FIELDS, shape), dtype="float16", epilogue="bias_relu", suite="epilogue"))
        cases.append(dict(zip(FIELDS, RESNET[6]), dtype="float32", epilogue="none", suite="tf32"))
    return cases


def _flops(case: dict) -> float:
    from kgen.kernels.conv.problem import conv2d_problem, geometry

    p = conv2d_problem(*(case[f] for f in FIELDS[:7]), stride=case["stride"], padding=case["padding"],
                       dilation=case["dilation"], dtype=case["dtype"])
    m, n, k = geometry(p).gemm
    return 2.0 * m * n * k


def _reference(x, w, bias, case, torch):
    """The convolution (and epilogue) in float64 on the GPU, of the inputs as stored."""
    y = torch.nn.functional.conv2d(x.double(), w.double(), None if bias is None else bias.double(),
                                   case["stride"], case["padding"], case["dilation"])
    return torch.relu(y) if case["epilogue"].endswith("relu") else y


def bench_case(case: dict, args, torch, kgen, flush, log) -> dict:
    dtype = getattr(torch, case["dtype"])
    n, h, w_, c, k, r, s = (case[f] for f in FIELDS[:7])
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.rand((n, c, h, w_), device="cuda", generator=gen) * 2 - 1).to(dtype)
    x = x.to(memory_format=torch.channels_last)
    w = (torch.rand((k, c, r, s), device="cuda", generator=gen) * 2 - 1).to(dtype) / math.sqrt(c * r * s)
    w = w.to(memory_format=torch.channels_last)
    bias = (torch.rand((k,), device="cuda", generator=gen) - 0.5).to(dtype) if "bias" in case["epilogue"] else None
    act = "relu" if case["epilogue"].endswith("relu") else None
    kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"])
    precision = "tf32" if case["dtype"] == "float32" else None
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = case["dtype"] == "float32"
    flops = _flops(case)
    row = dict(op="fprop", **{f: case[f] for f in FIELDS}, dtype=case["dtype"], epilogue=case["epilogue"],
               suite=case["suite"], baselines={}, ok=None, config="", how="")
    for f in ("stride", "padding", "dilation"):
        row[f] = list(row[f]) if isinstance(row[f], tuple) else row[f]

    def cudnn():
        y = torch.nn.functional.conv2d(x, w, bias, **kw)
        return torch.relu_(y) if act else y

    try:
        out = kgen.conv2d(x, w, bias, activation=act, precision=precision, **kw)
        want = _reference(x, w, bias, case, torch)
        err = float((out.double() - want).abs().max() / want.abs().max().clamp(min=1e-30))
        tol = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-3}[case["dtype"]]
        row["error_vs_float64"], row["ok"] = err, bool(err <= tol and out.is_contiguous(
            memory_format=torch.channels_last))
        row["config"], row["how"] = last_choice("conv2d")
        row["kgen_ms"] = median_ms(lambda: kgen.conv2d(x, w, bias, activation=act, precision=precision, out=out, **kw),
                                   args.runs, flush)
        row["tflops"] = flops / row["kgen_ms"] / 1e9
    except Exception as exc:                                     # a failure is a row, not the end of the run
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"  kgen failed: {row['error']}")
    cudnn()
    row["baselines"]["cudnn"] = median_ms(cudnn, args.runs, flush)
    row["cudnn_tflops"] = flops / row["baselines"]["cudnn"] / 1e9
    if "kgen_ms" in row:
        row["speedup"] = row["baselines"]["cudnn"] / row["kgen_ms"]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few cases")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", default="")
    parser.add_argument("--commit", default="", help="the commit measured (default: git rev-parse HEAD)")
    parser.add_argument("--keys", default="", help="write the cases' problem keys to KEYS.conv2d.txt "
                                                   "(for `kgen tune conv2d --from`)")
    args = parser.parse_args(argv)

    import cupy
    import torch

    import kgen
    from kgen.measure.bench import l2_flusher
    from kgen.problem import Target

    target = Target.detect(0)
    flush = l2_flusher(int(cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]))
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / target.slug / "bench_conv.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": target.name, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": args.commit or commit(), "runs": args.runs, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "l2": "flushed", "baseline": "torch conv2d, channels_last, "
            "cudnn.benchmark=True"}
    rows = []
    for case in _cases(args.quick):
        start = time.perf_counter()
        row = bench_case(case, args, torch, kgen, flush, print)
        rows.append(row)
        shape = " ".join(f"{f}={row[f]}" for f in FIELDS)
        print(f"{case['dtype']:8s} {shape:72s} kgen {row.get('kgen_ms', float('nan')):.4f} ms "
              f"({row.get('tflops', float('nan')):.0f} TF/s, {row['how']}) | cudnn {row['baselines']['cudnn']:.4f} ms "
              f"| x{row.get('speedup', float('nan')):.2f} ok={row['ok']} [{time.perf_counter() - start:.0f} s]",
              flush=True)
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")     # kept as it grows
        if args.keys:
            write_keys(args.keys, "conv2d")
    speedups = [r["speedup"] for r in rows if "speedup" in r]
    if speedups:
        print(f"geomean speed-up over cuDNN {math.exp(statistics.fmean(map(math.log, speedups))):.2f} "
              f"(worst {min(speedups):.2f}) over {len(speedups)} cases")
    print(f"wrote {out}")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
