"""conv2d forward side by side with cuDNN (PyTorch, channels-last, ``cudnn.benchmark``), in one run.

Each case is timed as a user calls it: ``kgen.conv2d`` on channels-last PyTorch tensors into a
preallocated output, and ``torch.nn.functional.conv2d`` on the same tensors (cuDNN picks its
algorithm in the warm-up), with CUDA events, the L2 flushed before each run, median of the runs.
kgen is timed before its baselines and again after them, its time the mean of the two medians
(``kgen_ms_runs``), so that neither side has the first place. Before timing, kgen's result is
compared with a float64 convolution of the same inputs.

    python scripts/bench_conv.py                  # every case -> scripts/results/<device>/bench_conv.json
    python scripts/bench_conv.py --quick --keys /tmp/keys

Rows (one per case): op ("fprop"), n, h, w, c, k, r, s, stride, padding, dilation, dtype,
precision ("tf32" for the suite "tf32"; the suite "float32", ResNet-50's layers at batch 64 and
1, is exact: kgen's CUDA-core family against cuDNN with TF32 off), epilogue, kgen_ms, baselines ({"cudnn": ms}), tflops (kgen's), speedup (cuDNN ms / kgen ms),
or for batched GEMMs (suite "bmm": ``kgen.gemm`` on 3-D tensors against ``torch.matmul``; suite
"bmm-random": shapes drawn by ``random_bmm``, its seed in the meta, which no record is tuned on) op
("bmm"), batch, m, n, k, layout, dtype, kgen_ms, baselines ({"cublas": ms}), tflops, speedup;
suite "grouped" (``kgen.gemm_grouped``, mixture-of-experts layers; "grouped-random": layers drawn by
``random_grouped``, which no record is tuned on) op ("grouped"), groups, m (rows
in all), n, k, layout, dtype, kgen_ms, baselines ({"cublas": one torch.matmul a group,
"torch._grouped_mm": ms}), tflops, speedup (over the cuBLAS loop), speedup_vs_fastest;
suite "grouped-wgrad" (``kgen.gemm_kgrouped``, the weight gradients of the "grouped" layers: each
expert's rows of x transposed times its rows of dy) op ("grouped_wgrad"), groups, m and n (each
product's), k (rows in all), dtype, kgen_ms, baselines ({"cublas": one torch.matmul a group,
"torch._grouped_mm": ms where this PyTorch runs the K-grouped case}), tflops, speedup,
speedup_vs_fastest (checked on up to 9 groups spread over them: 256 experts' float64
gradients outgrow an 80 GB GPU);
suite "backward" (ResNet-50's layers at batch 64 but the stem): op "dgrad" (``kgen.torch.
data_gradient`` against cuDNN's ``torch.nn.grad.conv2d_input``) for each, op "wgrad"
(``kgen.torch.weight_gradient``: ``conv2d_wgrad_wgmma`` where it applies, else one GEMM for
the 1x1 ones and a convolution with batch and channels swapped for the others) against
``conv2d_weight``;
suite "depthwise" (``kgen.conv2d(..., groups=C)``: MobileNetV2's and EfficientNet-B0's depthwise
layers at batch 64, two odd shapes, one float32) op ("depthwise"), the conv fields (k = c),
kgen_ms, baselines ({"cudnn": conv2d with groups = C}), tflops, bytes (x, w and y once), gb_s
(those bytes over kgen's time), speedup;
family, config and how dispatch chose it (tuned, model, default), ok (within tolerance of float64),
error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import add_run_args, commit, geomean, gpu_session, median_ms  # noqa: E402

# ResNet-50's distinct convolutions (torchvision's, the stride on the 3x3): (h, w, c, k, r, s, stride,
# padding), each at batch 64 and at batch 1
RESNET50 = [
    (224, 224, 3, 64, 7, 7, 2, 3),
    (56, 56, 64, 64, 1, 1, 1, 0), (56, 56, 64, 64, 3, 3, 1, 1), (56, 56, 64, 256, 1, 1, 1, 0),
    (56, 56, 256, 64, 1, 1, 1, 0),
    (56, 56, 256, 128, 1, 1, 1, 0), (56, 56, 128, 128, 3, 3, 2, 1), (28, 28, 128, 512, 1, 1, 1, 0),
    (56, 56, 256, 512, 1, 1, 2, 0), (28, 28, 512, 128, 1, 1, 1, 0), (28, 28, 128, 128, 3, 3, 1, 1),
    (28, 28, 512, 256, 1, 1, 1, 0), (28, 28, 256, 256, 3, 3, 2, 1), (14, 14, 256, 1024, 1, 1, 1, 0),
    (28, 28, 512, 1024, 1, 1, 2, 0), (14, 14, 1024, 256, 1, 1, 1, 0), (14, 14, 256, 256, 3, 3, 1, 1),
    (14, 14, 1024, 512, 1, 1, 1, 0), (14, 14, 512, 512, 3, 3, 2, 1), (7, 7, 512, 2048, 1, 1, 1, 0),
    (14, 14, 1024, 2048, 1, 1, 2, 0), (7, 7, 2048, 512, 1, 1, 1, 0), (7, 7, 512, 512, 3, 3, 1, 1),
]
# shapes no network here was built around: C not a multiple of 8, dilation, 1x1 images,
# rectangular windows and padding, a small batch of large images
ODD = [
    (16, 64, 64, 20, 48, 3, 3, 1, 2, 2),
    (8, 33, 47, 36, 100, 5, 5, 2, 2, 1),
    (256, 1, 1, 512, 1000, 1, 1, 1, 0, 1),
    (4, 112, 112, 12, 24, 3, 3, 1, 1, 1),
    (64, 17, 17, 192, 224, 1, 7, 1, (0, 3), 1),
    (2, 128, 128, 64, 64, 3, 3, 1, 1, 1),
]
# batched GEMMs (batch, m, n, k, layout): attention's scores (Q K^T, K read transposed) and
# values (P V) at several head counts and lengths, expert-sized GEMMs, and large batches of big ones
BMM = [
    (64, 512, 512, 64, "NT"), (64, 512, 64, 512, "NN"), (256, 128, 128, 128, "NT"), (128, 256, 256, 64, "NT"),
    (32, 1024, 1024, 128, "NT"), (32, 1024, 128, 1024, "NN"), (8, 1024, 1024, 64, "NT"),
    (8, 512, 1024, 1024, "NN"), (8, 2048, 2048, 2048, "NN"), (16, 1024, 4096, 1024, "NN"),
]
# grouped GEMMs (groups, rows in all, n, k, layout): mixture-of-experts layers, tokens routed
# unevenly (a seeded multinomial split), weights as nn.Linear stores them (NT) or as (K, N) (NN):
# 8 large experts, 64 and 128 small ones (up and down projections), 256 of a wide model, and
# decode-sized batches of a few rows an expert
GROUPED = [
    (8, 4096, 4096, 4096, "NT"), (64, 8192, 1408, 2048, "NT"), (64, 8192, 2048, 1408, "NT"),
    (128, 16384, 768, 2048, "NT"), (128, 16384, 2048, 768, "NN"), (256, 8192, 2048, 7168, "NT"),
    (16, 512, 4096, 4096, "NT"), (32, 2048, 4096, 1024, "NN"),
]
# depthwise convolutions (h, w, c, r, s, stride, padding, dilation): MobileNetV2's (3x3) and
# EfficientNet-B0's 5x5 ones at batch 64, and shapes no network here was built around
DEPTHWISE = [
    (112, 112, 32, 3, 3, 1, 1, 1), (112, 112, 96, 3, 3, 2, 1, 1), (56, 56, 144, 3, 3, 1, 1, 1),
    (56, 56, 144, 3, 3, 2, 1, 1), (28, 28, 192, 3, 3, 1, 1, 1), (28, 28, 192, 3, 3, 2, 1, 1),
    (14, 14, 384, 3, 3, 1, 1, 1), (14, 14, 576, 3, 3, 1, 1, 1), (14, 14, 576, 3, 3, 2, 1, 1),
    (7, 7, 960, 3, 3, 1, 1, 1), (28, 28, 240, 5, 5, 1, 2, 1), (14, 14, 480, 5, 5, 1, 2, 1),
    (14, 14, 672, 5, 5, 2, 2, 1),
]
DEPTHWISE_ODD = [(33, 47, 36, 7, 7, 2, 3, 1), (20, 20, 35, 3, 3, 1, 2, 2)]
SUITES = ("resnet50-b64", "resnet50-b1", "odd", "epilogue", "tf32", "float32", "bmm", "bmm-random", "grouped", "grouped-random",
          "grouped-wgrad", "backward", "depthwise")
RANDOM_BMM_SEED = 20261206       # the bmm-random suite's draw (no record is tuned on it)


def random_bmm(count: int, seed: int = RANDOM_BMM_SEED) -> list[tuple]:
    """Batched GEMMs nobody tuned for (batch, m, n, k, layout, dtype): batch log-uniform in
    2..256, M and N in 16..1024 and K in 64..1024 (attention- and expert-like), a quarter of
    M and N not multiples of 8, every layout, bf16 and fp16."""
    import math
    import random

    rng = random.Random(seed)

    def log_uniform(lo, hi):
        return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))

    def side(lo, hi):
        x = log_uniform(lo, hi)
        return x if rng.random() < 0.25 else max(8, 8 * round(x / 8))

    return [(log_uniform(2, 256), side(16, 1024), side(16, 1024), 8 * round(log_uniform(64, 1024) / 8),
             rng.choice(("NN", "NT", "TN", "TT")), rng.choice(("bfloat16", "float16"))) for _ in range(count)]


def random_grouped(count: int, seed: int = RANDOM_BMM_SEED) -> list[tuple]:
    """Mixture-of-experts layers nobody tuned for (groups, rows in all, n, k, layout): experts
    log-uniform in 4..256, rows an expert 4..2048, N and K in 256..8192 (multiples of 64), B
    either way, at most 2e12 FLOPs."""
    import math
    import random

    rng, shapes = random.Random(seed + 1), []

    def log_uniform(lo, hi):
        return math.exp(rng.uniform(math.log(lo), math.log(hi)))

    while len(shapes) < count:
        groups = int(round(log_uniform(4, 256)))
        rows = max(groups, int(groups * log_uniform(4, 2048)))
        n, k = (64 * max(4, round(log_uniform(256, 8192) / 64)) for _ in range(2))
        if 2.0 * rows * n * k <= 2e12:
            shapes.append((groups, rows, n, k, rng.choice(("NN", "NT"))))
    return shapes
FIELDS = ("n", "h", "w", "c", "k", "r", "s", "stride", "padding", "dilation")


def _resnet(batch: int, layer: tuple) -> tuple:
    h, w, c, k, r, s, stride, padding = layer
    return (batch, h, w, c, k, r, s, stride, padding, 1)


def _cases(quick: bool, suites: set[str]) -> list[dict]:
    cases = []

    def add(shape, suite, dtype="bfloat16", epilogue="none", precision=None):
        if suite in suites:
            cases.append(dict(zip(FIELDS, shape), dtype=dtype, epilogue=epilogue, suite=suite, precision=precision))

    layers = RESNET50[::5] if quick else RESNET50
    for layer in layers:
        add(_resnet(64, layer), "resnet50-b64")
    for layer in layers:
        add(_resnet(1, layer), "resnet50-b1")
    for shape in (ODD[:2] if quick else ODD):
        add(shape, "odd")
    for shape in (_resnet(64, RESNET50[2]), _resnet(64, RESNET50[16]), ODD[0]):
        add(shape, "epilogue", "float16", "bias_relu")
    add(_resnet(64, RESNET50[10]), "tf32", "float32", precision="tf32")
    for batch in (64, 1):                       # exact float32 (CUDA cores) against cuDNN with TF32 off
        for layer in layers:
            add(_resnet(batch, layer), "float32", "float32")
    if "backward" in suites:
        for layer in layers[1:]:                        # the stem: its input needs no gradient
            shape = _resnet(64, layer)
            cases.append(dict(zip(FIELDS, shape), dtype="bfloat16", epilogue="none", suite="backward", op="dgrad"))
            cases.append(dict(zip(FIELDS, shape), dtype="bfloat16", epilogue="none", suite="backward", op="wgrad"))
    if "bmm" in suites:
        for batch, m, n, k, layout in (BMM[::3] if quick else BMM):
            cases.append(dict(op="bmm", batch=batch, m=m, n=n, k=k, layout=layout, dtype="bfloat16", suite="bmm"))
    if "bmm-random" in suites:
        for batch, m, n, k, layout, dtype in random_bmm(4 if quick else 16):
            cases.append(dict(op="bmm", batch=batch, m=m, n=n, k=k, layout=layout, dtype=dtype, suite="bmm-random"))
    if "grouped" in suites:
        for groups, m, n, k, layout in (GROUPED[::3] if quick else GROUPED):
            cases.append(dict(op="grouped", groups=groups, m=m, n=n, k=k, layout=layout, dtype="bfloat16",
                              suite="grouped"))
    if "grouped-random" in suites:
        for groups, m, n, k, layout in random_grouped(3 if quick else 10):
            cases.append(dict(op="grouped", groups=groups, m=m, n=n, k=k, layout=layout, dtype="bfloat16",
                              suite="grouped-random"))
    if "depthwise" in suites:
        for i, (h, w, c, r, s, stride, padding, dilation) in enumerate(DEPTHWISE[::4] if quick else DEPTHWISE):
            cases.append(dict(op="depthwise", n=64, h=h, w=w, c=c, k=c, r=r, s=s, stride=stride, padding=padding,
                              dilation=dilation, dtype="bfloat16", epilogue="none", suite="depthwise"))
        for h, w, c, r, s, stride, padding, dilation in DEPTHWISE_ODD:
            cases.append(dict(op="depthwise", n=16, h=h, w=w, c=c, k=c, r=r, s=s, stride=stride, padding=padding,
                              dilation=dilation, dtype="float16", epilogue="bias_relu", suite="depthwise"))
        cases.append(dict(op="depthwise", n=64, h=56, w=56, c=144, k=144, r=3, s=3, stride=1, padding=1, dilation=1,
                          dtype="float32", epilogue="none", suite="depthwise"))
    if "grouped-wgrad" in suites:     # dW[g] = x_g^T dy_g: K x N products over the layer's T rows
        for groups, rows, n, k, _ in (GROUPED[::3] if quick else GROUPED):
            cases.append(dict(op="grouped_wgrad", groups=groups, m=k, n=n, k=rows, dtype="bfloat16",
                              suite="grouped-wgrad"))
    return cases


def _grouped_problem(case: dict):
    from kgen.kernels.gemm.grouped import grouped_problem

    return grouped_problem(case["groups"], case["m"], case["n"], case["k"], case["dtype"], case["layout"])


def _grouped_problems(case: dict) -> list:
    """The problems of every grouped family that runs a grouped case here (their keys, for
    ``kgen tune <family> --from``)."""
    from kgen.kernels.gemm.grouped import route
    from kgen.problem import Target

    return [p for _, p in route(Target.detect(0), _grouped_problem(case))]


def bench_grouped(case: dict, args, torch, kgen, flush, log) -> dict:
    """kgen.gemm_grouped (device ends) against one torch.matmul a group (cuBLAS; the ends known on
    the host beforehand) and torch._grouped_mm where this PyTorch has it, on the same tensors."""
    from kgen.kernels.gemm.grouped import split_rows

    groups, m, n, k, layout = (case[f] for f in ("groups", "m", "n", "k", "layout"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.rand((m, k), device="cuda", generator=gen) - 0.5).to(torch.bfloat16)
    b = (torch.rand((groups, n, k) if layout[1] == "T" else (groups, k, n), device="cuda", generator=gen) - 0.5)
    b = b.to(torch.bfloat16)
    b = b.transpose(1, 2) if layout[1] == "T" else b
    host_ends = split_rows(m, groups, seed=0).tolist()
    ends = torch.tensor(host_ends, dtype=torch.int32, device="cuda")
    bounds = list(zip([0] + host_ends, host_ends))
    row = dict(case, baselines={}, ok=None, config="", how="")
    flops = 2.0 * m * n * k
    c = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    from kgen.ops.gemm_grouped import routed

    _time_gemm(row, lambda: routed(_grouped_problem(case), 0), lambda out=None: kgen.gemm_grouped(a, b, ends, out),
               lambda: torch.cat([a[s:e].double() @ b[g].double() for g, (s, e) in enumerate(bounds)]),
               flops, args, flush, log)
    pieces = [(a[s:e], b[g], c[s:e]) for g, (s, e) in enumerate(bounds) if e > s]
    return _grouped_baselines(row, torch, lambda mm: mm(a, b, offs=ends), pieces, flops, args, flush)


def _grouped_baselines(row: dict, torch, grouped_mm_call, pieces, flops: float, args, flush) -> dict:
    """A grouped row's baselines: ``grouped_mm_call(torch._grouped_mm)`` where this PyTorch has
    it (an error of its is the row's ``grouped_mm_error``), one ``torch.matmul`` a group over
    ``pieces`` (x, w, out), and kgen's speed-up over the faster."""
    grouped_mm = getattr(torch, "_grouped_mm", None)
    if grouped_mm is not None:
        try:
            _with_baseline(row, "torch._grouped_mm", lambda: grouped_mm_call(grouped_mm), flops, args, flush)
        except Exception as exc:
            row["grouped_mm_error"] = f"{type(exc).__name__}: {exc}"[:300]

    def loop():
        for x, w, y in pieces:
            torch.matmul(x, w, out=y)

    _with_baseline(row, "cublas", loop, flops, args, flush)
    if "kgen_ms" in row:
        row["speedup_vs_fastest"] = min(row["baselines"].values()) / row["kgen_ms"]
    return row


def _kgrouped_problem(case: dict):
    from kgen.kernels.gemm.kgrouped import kgrouped_problem

    return kgrouped_problem(case["groups"], case["m"], case["n"], case["k"], case["dtype"])


def _kgrouped_problems(case: dict) -> list:
    """The problems of every K-grouped family that runs a grouped-wgrad case here (their keys)."""
    from kgen.kernels.gemm.kgrouped import route
    from kgen.problem import Target

    return [p for _, p in route(Target.detect(0), _kgrouped_problem(case))]


def bench_grouped_wgrad(case: dict, args, torch, kgen, flush, log) -> dict:
    """kgen.gemm_kgrouped (device ends) against one torch.matmul a group (cuBLAS; the ends known on
    the host beforehand) and torch._grouped_mm's K-grouped form where this PyTorch runs it."""
    from kgen.kernels.gemm.grouped import split_rows
    from kgen.ops.gemm_kgrouped import routed

    groups, m, n, rows = (case[f] for f in ("groups", "m", "n", "k"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.rand((rows, m), device="cuda", generator=gen) - 0.5).to(torch.bfloat16)
    dy = (torch.rand((rows, n), device="cuda", generator=gen) - 0.5).to(torch.bfloat16)
    host_ends = split_rows(rows, groups, seed=0).tolist()
    ends = torch.tensor(host_ends, dtype=torch.int32, device="cuda")
    bounds = list(zip([0] + host_ends, host_ends))
    row = dict(case, baselines={}, ok=None, config="", how="")
    flops = 2.0 * m * n * rows
    checked = sorted(set(range(0, groups, max(1, groups // 8))) | {groups - 1})   # float64 of every group
    _time_gemm(row, lambda: routed(_kgrouped_problem(case), 0),
               lambda out=None: kgen.gemm_kgrouped(x, dy, ends, out),
               lambda: torch.stack([x[s:e].double().T @ dy[s:e].double() for s, e in (bounds[g] for g in checked)]),
               flops, args, flush, log, part=lambda out: out[checked])
    c = torch.empty((groups, m, n), device="cuda", dtype=torch.bfloat16)
    pieces = [(x[s:e].T, dy[s:e], c[g]) for g, (s, e) in enumerate(bounds) if e > s]
    return _grouped_baselines(row, torch, lambda mm: mm(x.t(), dy, offs=ends), pieces, flops, args, flush)


def _bmm_problem(case: dict):
    """The batched problem ``kgen.gemm`` makes of a bmm case's dense tensors (allocations start
    256-byte aligned: the leading dimensions decide the alignment)."""
    from kgen.kernels.gemm import rules
    from kgen.kernels.gemm.batched import batched_problem, leading_dims

    layout, m, n, k = case["layout"], case["m"], case["n"], case["k"]
    dense = batched_problem(case["batch"], m, n, k, case["dtype"], layout)
    lda, ldb, _ = leading_dims(dense)
    return batched_problem(case["batch"], m, n, k, case["dtype"], layout, align_a=rules.natural_alignment(lda, 2),
                           align_b=rules.natural_alignment(ldb, 2))


def _bmm_problems(case: dict) -> list:
    """The problems of every batched family that runs a bmm case here (their keys, for
    ``kgen tune <family> --from``)."""
    from kgen.kernels.gemm.batched import route
    from kgen.problem import Target

    return [p for _, p in route(Target.detect(0), _bmm_problem(case))]


def bench_bmm(case: dict, args, torch, kgen, flush, log) -> dict:
    """kgen.gemm on 3-D tensors against torch.matmul (cuBLAS's batched GEMM) on the same tensors."""
    batch, m, n, k, layout = (case[f] for f in ("batch", "m", "n", "k", "layout"))
    gen, dtype = torch.Generator(device="cuda").manual_seed(0), getattr(torch, case["dtype"])

    def operand(rows, cols, transposed):     # dense matrices, or transposed views of dense ones
        shape = (batch, cols, rows) if transposed else (batch, rows, cols)
        x = (torch.rand(shape, device="cuda", generator=gen) - 0.5).to(dtype)
        return x.transpose(1, 2) if transposed else x

    a, b = operand(m, k, layout[0] == "T"), operand(k, n, layout[1] == "T")
    row = dict(case, baselines={}, ok=None, config="", how="")
    flops = 2.0 * batch * m * n * k
    from kgen.ops.gemm_batched import routed

    _time_gemm(row, lambda: routed(_bmm_problem(case), 0), lambda out=None: kgen.gemm(a, b, out),
               lambda: a.double() @ b.double(), flops, args, flush, log)
    c = torch.empty((batch, m, n), device="cuda", dtype=dtype)
    return _with_baseline(row, "cublas", lambda: torch.matmul(a, b, out=c), flops, args, flush)


def _time_gemm(row: dict, routed, call, reference, flops: float, args, flush, log, part=None) -> None:
    """kgen's side of a bmm or grouped row: ``call(out=None)`` (or the ``part(out)`` of it)
    checked against ``reference()`` (float64) within 1e-2, the call's choice (``routed()``:
    spec, problem, choice), then timed into the output of the first call; a failure is the
    row's error."""
    try:
        out = call()
        want = reference()
        got = out if part is None else part(out)
        err = float((got.double() - want).abs().max() / want.abs().max())
        row["error_vs_float64"], row["ok"] = err, err <= 1e-2
        spec, _, choice = routed()
        row["family"], row["config"], row["how"] = spec.family, choice.config.name, choice.how
        _time_kgen(row, lambda: call(out), args, flush)
        row["tflops"] = flops / row["kgen_ms"] / 1e9
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"  kgen failed: {row['error']}")


def _time_kgen(row: dict, fn, args, flush) -> None:
    """kgen's median ms of ``fn`` into ``row``, and the timer itself (``_again``: kgen is timed
    once more after its baselines, so that neither side has the first place)."""
    row["kgen_ms"] = median_ms(fn, args.runs, flush)
    row["_again"] = lambda: median_ms(fn, args.runs, flush)


def _timed_again(row: dict) -> dict:
    """``row`` with kgen's time the mean of its medians before and after the baselines
    (``kgen_ms_runs``), and what derives from it (TFLOP/s, speed-ups) rescaled."""
    again = row.pop("_again", None)
    if again is None or "kgen_ms" not in row:
        return row
    first, second = row["kgen_ms"], again()
    row["kgen_ms_runs"], row["kgen_ms"] = [first, second], (first + second) / 2
    for field in ("tflops", "gb_s", "speedup", "speedup_vs_fastest"):
        if field in row:
            row[field] *= first / row["kgen_ms"]
    return row


def _with_baseline(row: dict, name: str, fn, flops: float, args, flush) -> dict:
    """``row`` with the baseline ``name`` timed beside kgen (after a warm-up call, where cuDNN
    picks its algorithm), its TFLOP/s, and the speed-up over it."""
    fn()
    row["baselines"][name] = median_ms(fn, args.runs, flush)
    row[f"{name}_tflops"] = flops / row["baselines"][name] / 1e9
    if "kgen_ms" in row:
        row["speedup"] = row["baselines"][name] / row["kgen_ms"]
    return row


def bench_gradient(case: dict, args, torch, kgen, flush, log) -> dict:
    """A data or weight gradient of a bf16 layer: kgen.torch's against cuDNN's (torch.nn.grad)."""
    import kgen.torch as kt

    n, h, w_, c, k, r, s = (case[f] for f in FIELDS[:7])
    kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"])
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = ((torch.rand((n, c, h, w_), device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
         .to(memory_format=torch.channels_last))
    w = ((torch.rand((k, c, r, s), device="cuda", generator=gen) * 2 - 1) / math.sqrt(c * r * s)).to(torch.bfloat16)
    w = w.to(memory_format=torch.channels_last)
    y_shape = torch.nn.functional.conv2d(x[:1], w, None, **kw).shape
    dy = ((torch.rand((n, *y_shape[1:]), device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
          .to(memory_format=torch.channels_last))
    torch.backends.cudnn.benchmark = True
    dgrad = case["op"] == "dgrad"
    ours = (lambda: kt.data_gradient(x, w, dy, **kw)) if dgrad else (lambda: kt.weight_gradient(x, w, dy, **kw))
    theirs = (lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, **kw)) if dgrad else \
        (lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, **kw))
    row = dict(op=case["op"], **{f: case[f] for f in FIELDS}, dtype=case["dtype"], epilogue="none",
               suite=case["suite"], baselines={}, ok=None, config="", how="")
    flops = _flops(case)
    try:
        before = _loaded_kernels()
        got = ours()
        row["kernels"] = sorted(_loaded_kernels() - before)    # what the gradient ran (first loads only)
        want = (torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), **kw) if dgrad else
                torch.nn.grad.conv2d_weight(x.double(), w.shape, dy.double(), **kw))
        err = float((got.double() - want).abs().max() / want.abs().max().clamp(min=1e-30))
        row["error_vs_float64"], row["ok"] = err, err <= 1e-2
        _time_kgen(row, ours, args, flush)
        row["tflops"] = flops / row["kgen_ms"] / 1e9
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"  kgen failed: {row['error']}")
    return _with_baseline(row, "cudnn", theirs, flops, args, flush)


def _loaded_kernels() -> set:
    """(family, problem key, config, how) of every kernel the default dispatcher has loaded."""
    from kgen.dispatch import default_dispatcher
    from kgen.registry import families

    dispatcher = default_dispatcher()
    return {(f, problem.key, choice.config.name if choice.config is not None else "", choice.how)
            for f in families() for problem, choice in dispatcher.loaded(f)}


def _problem(case: dict):
    """The conv2d problem of a case (float32: exact unless the case's precision is tf32)."""
    from kgen.kernels.conv.problem import conv2d_problem, family_for

    return conv2d_problem(*(case[f] for f in FIELDS[:7]), stride=case["stride"], padding=case["padding"],
                          dilation=case["dilation"], dtype=case["dtype"], epilogue=case["epilogue"],
                          family=family_for(case["dtype"], case.get("precision")))


def _flops(case: dict) -> float:
    from kgen.kernels.conv.problem import geometry

    m, n, k = geometry(_problem(case)).gemm
    return 2.0 * m * n * k


def _reference(x, w, bias, case, torch):
    """The convolution (and epilogue) in float64 on the GPU, of the inputs as stored."""
    y = torch.nn.functional.conv2d(x.double(), w.double(), None if bias is None else bias.double(),
                                   case["stride"], case["padding"], case["dilation"])
    return torch.relu(y) if case["epilogue"].endswith("relu") else y



def _choice(case: dict) -> tuple[str, str, str, str]:
    """(family, config, how, problem key) of the kernel ``kgen.conv2d`` runs for ``case`` on device 0."""
    from kgen.ops.conv import routed

    spec, chosen, choice = routed(_problem(case), 0)
    return spec.family, choice.config.name if choice.config is not None else "", choice.how, chosen.key


def _candidates(case: dict) -> list:
    """The problems of every family that can run ``case`` here (each is tuned: dispatch then
    compares measured times, not the cost model's guesses)."""
    from kgen.kernels.conv.family import route
    from kgen.problem import Target

    return [p for _, p in route(Target.detect(0), _problem(case))]


def _depthwise_problem(case: dict):
    from kgen.kernels.conv.depthwise import depthwise_problem

    return depthwise_problem(*(case[f] for f in ("n", "h", "w", "c", "r", "s")), stride=case["stride"],
                             padding=case["padding"], dilation=case["dilation"], dtype=case["dtype"],
                             epilogue=case["epilogue"])


def bench_depthwise(case: dict, args, torch, kgen, flush, log) -> dict:
    """kgen.conv2d(groups=C) against cuDNN's (``conv2d`` with groups = C, channels-last, TF32
    off), the bias in the call and relu after, on the same tensors; gb_s: x, w and y once over
    kgen's time (the floor's bytes)."""
    from kgen.ops.launch import choice_of
    from kgen.registry import get_spec

    dtype = getattr(torch, case["dtype"])
    n, h, w_, c, r, s = (case[f] for f in ("n", "h", "w", "c", "r", "s"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.rand((n, c, h, w_), device="cuda", generator=gen) * 2 - 1).to(dtype)
    x = x.to(memory_format=torch.channels_last)
    w = ((torch.rand((c, 1, r, s), device="cuda", generator=gen) * 2 - 1) / (r * s)).to(dtype)
    bias = (torch.rand((c,), device="cuda", generator=gen) - 0.5).to(dtype) if "bias" in case["epilogue"] else None
    act = "relu" if case["epilogue"].endswith("relu") else None
    kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"])
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    problem = _depthwise_problem(case)
    spec = get_spec(problem.family)
    flops, moved = spec.flops(problem), spec.bytes(problem)
    row = dict(case, baselines={}, ok=None, config="", how="", bytes=moved)

    def cudnn():
        y = torch.nn.functional.conv2d(x, w, bias, groups=c, **kw)
        return torch.relu_(y) if act else y

    try:
        out = kgen.conv2d(x, w, bias, activation=act, groups=c, **kw)
        want = torch.nn.functional.conv2d(x.double(), w.double(), None if bias is None else bias.double(),
                                          groups=c, **kw)
        want = torch.relu(want) if act else want
        err = float((out.double() - want).abs().max() / want.abs().max().clamp(min=1e-30))
        tol = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}[case["dtype"]]
        row["error_vs_float64"], row["ok"] = err, bool(err <= tol and out.is_contiguous(
            memory_format=torch.channels_last))
        choice = choice_of(problem.family, problem, 0)
        row["family"], row["config"], row["how"] = problem.family, choice.config.name, choice.how
        _time_kgen(row, lambda: kgen.conv2d(x, w, bias, activation=act, groups=c, out=out, **kw), args, flush)
        row["tflops"], row["gb_s"] = flops / row["kgen_ms"] / 1e9, moved / row["kgen_ms"] / 1e6
    except Exception as exc:                                     # a failure is a row, not the end of the run
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"  kgen failed: {row['error']}")
    _with_baseline(row, "cudnn", cudnn, flops, args, flush)
    return row


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
    precision = case.get("precision")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    flops = _flops(case)
    row = dict(op="fprop", **{f: case[f] for f in FIELDS}, dtype=case["dtype"], precision=precision,
               epilogue=case["epilogue"], suite=case["suite"], baselines={}, ok=None, config="", how="")
    for f in ("stride", "padding", "dilation"):
        row[f] = list(row[f]) if isinstance(row[f], tuple) else row[f]

    def cudnn():
        y = torch.nn.functional.conv2d(x, w, bias, **kw)
        return torch.relu_(y) if act else y

    try:
        out = kgen.conv2d(x, w, bias, activation=act, precision=precision, **kw)
        want = _reference(x, w, bias, case, torch)
        err = float((out.double() - want).abs().max() / want.abs().max().clamp(min=1e-30))
        tol = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-3 if precision == "tf32" else 1e-5}[case["dtype"]]
        row["error_vs_float64"], row["ok"] = err, bool(err <= tol and out.is_contiguous(
            memory_format=torch.channels_last))
        row["family"], row["config"], row["how"], row["problem_key"] = _choice(case)
        _time_kgen(row, lambda: kgen.conv2d(x, w, bias, activation=act, precision=precision, out=out, **kw),
                   args, flush)
        row["tflops"] = flops / row["kgen_ms"] / 1e9
    except Exception as exc:                                     # a failure is a row, not the end of the run
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"  kgen failed: {row['error']}")
    return _with_baseline(row, "cudnn", cudnn, flops, args, flush)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few cases of each suite")
    parser.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated, of {', '.join(SUITES)}")
    add_run_args(parser, "write the cases' problem keys to KEYS.FAMILY.txt, one file per family "
                         "(for `kgen tune FAMILY --from`)")
    args = parser.parse_args(argv)

    cupy, torch, kgen, target, flush = gpu_session()
    from kgen.knobs import knobs

    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / target.slug / "bench_conv.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": target.name, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": args.commit or commit(), "runs": args.runs, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "vendor": knobs.vendor, "race": knobs.race,
            "l2": "flushed", "baseline": "torch conv2d, channels_last, "
            "cudnn.benchmark=True (bmm: torch.matmul; grouped and grouped_wgrad: a torch.matmul a group, and "
            "torch._grouped_mm)"}
    rows = []
    suites = set(filter(None, args.suites.split(",")))
    if "bmm-random" in suites or "grouped-random" in suites:
        meta["random_seed"] = RANDOM_BMM_SEED     # random_bmm's; random_grouped draws from it + 1
    if suites - set(SUITES):
        parser.error(f"unknown suites {sorted(suites - set(SUITES))}; choose from {', '.join(SUITES)}")
    for case in _cases(args.quick, suites):
        start = time.perf_counter()
        op = case.get("op")
        bench = {"bmm": bench_bmm, "grouped": bench_grouped, "grouped_wgrad": bench_grouped_wgrad,
                 "dgrad": bench_gradient, "wgrad": bench_gradient, "depthwise": bench_depthwise}.get(op, bench_case)
        row = _timed_again(bench(case, args, torch, kgen, flush, print))
        rows.append(row)
        fields = {"bmm": ("batch", "m", "n", "k", "layout"), "grouped": ("groups", "m", "n", "k", "layout"),
                  "grouped_wgrad": ("groups", "m", "n", "k")}
        shape = " ".join(f"{f}={row[f]}" for f in fields.get(op, FIELDS))
        print(f"{case['dtype']:8s} {shape:72s} kgen {row.get('kgen_ms', float('nan')):.4f} ms "
              f"({row.get('tflops', float('nan')):.0f} TF/s, {row.get('family', '')} {row['how']}) | "
              + " ".join(f"{name} {ms:.4f} ms" for name, ms in row["baselines"].items()) + " "
              f"| x{row.get('speedup', float('nan')):.2f} ok={row['ok']} [{time.perf_counter() - start:.0f} s]",
              flush=True)
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")     # kept as it grows
        if args.keys and case.get("op") not in ("dgrad", "wgrad"):
            problems = {"bmm": _bmm_problems, "grouped": _grouped_problems, "grouped_wgrad": _kgrouped_problems,
                        "depthwise": lambda case: [_depthwise_problem(case)]}.get(op, _candidates)
            for problem in problems(case):
                with Path(f"{args.keys}.{problem.family}.txt").open("a") as keys:
                    keys.write(problem.key + "\n")
    speedups = [r["speedup"] for r in rows if "speedup" in r]
    if speedups:
        print(f"geomean speed-up over the baselines (cuDNN, cuBLAS) {geomean(speedups):.2f} "
              f"(worst {min(speedups):.2f}) over {len(speedups)} cases")
    print(f"wrote {out}")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
