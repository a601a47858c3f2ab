"""Where a convolution gradient's time goes: the GPU's kernels and the host's share (GPU machine).

    python scripts/experiments/gradient_breakdown.py [--out FILE]

For the weight gradient of the 56x56 3x3 layer (64 channels in and out, batch 64, bf16) and
the data gradient of the 56x56 3x3 stride-2 layer, runs ``kgen.torch``'s gradient and cuDNN's
under ``torch.profiler`` and prints: the call's time with CUDA events (L2 not flushed, median of
20), its host time per call (``perf_counter`` with the GPU synchronised before and after, and
without the final synchronisation), every GPU kernel it ran with its duration, and for kgen's
the host functions of most cumulative time (cProfile, 20 calls).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

CASES = [
    dict(op="wgrad", n=64, h=56, w=56, c=64, k=64, r=3, s=3, stride=1, padding=1),
    dict(op="dgrad", n=64, h=56, w=56, c=128, k=128, r=3, s=3, stride=2, padding=1),
]


def operands(torch, case):
    gen = torch.Generator(device="cuda").manual_seed(0)
    n, h, w_, c, k, r, s = (case[f] for f in ("n", "h", "w", "c", "k", "r", "s"))
    kw = dict(stride=case["stride"], padding=case["padding"])
    x = ((torch.rand((n, c, h, w_), device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
         .to(memory_format=torch.channels_last))
    w = ((torch.rand((k, c, r, s), device="cuda", generator=gen) * 2 - 1) / (c * r * s) ** 0.5).to(torch.bfloat16)
    w = w.to(memory_format=torch.channels_last)
    y_shape = torch.nn.functional.conv2d(x[:1], w, None, **kw).shape
    dy = ((torch.rand((n, *y_shape[1:]), device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
          .to(memory_format=torch.channels_last))
    return x, w, dy, kw


def event_ms(torch, fn, runs=20):
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def host_us(torch, fn, runs=20):
    """(synchronised per call, queued): host microseconds per call."""
    synced = []
    for _ in range(runs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        synced.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(runs):
        fn()
    queued = (time.perf_counter() - t0) / runs * 1e6
    torch.cuda.synchronize()
    return statistics.median(synced), queued


def kernels(torch, fn):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = []
    for e in prof.events():
        if e.device_type.name == "CUDA":
            out.append({"kernel": e.name[:90], "us": round(e.device_time if hasattr(e, "device_time")
                                                            else e.cuda_time, 1)})
    return out


def host_profile(fn, calls=20, top=30) -> list:
    """The functions with the most cumulative host time over ``calls`` calls (cProfile)."""
    from launch_costs import profile_text

    text = profile_text(fn, calls, top, "cumulative")
    return [line.strip()[:160] for line in text.splitlines() if line.strip()][-top:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    import torch

    import kgen.torch as kt

    rows = []
    for case in CASES:
        x, w, dy, kw = operands(torch, case)
        torch.backends.cudnn.benchmark = True
        if case["op"] == "wgrad":
            ours = lambda: kt.weight_gradient(x, w, dy, **kw)                        # noqa: E731
            theirs = lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, **kw)       # noqa: E731
        else:
            ours = lambda: kt.data_gradient(x, w, dy, **kw)                          # noqa: E731
            theirs = lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, **kw)        # noqa: E731
        for who, fn in (("kgen", ours), ("cudnn", theirs)):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            synced, queued = host_us(torch, fn)
            row = {"case": case, "who": who, "event_ms": round(event_ms(torch, fn), 4),
                   "host_us_synced": round(synced, 1), "host_us_queued": round(queued, 1),
                   "kernels": kernels(torch, fn)}
            if who == "kgen":
                row["host_profile"] = host_profile(fn)
                torch.cuda.synchronize()
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
