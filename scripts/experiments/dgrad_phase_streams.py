"""Strided data gradients with their phase convolutions one after another and at once (GPU machine).

    python scripts/experiments/dgrad_phase_streams.py COMMIT OUT.json

ResNet-50's three stride-2 3x3 layers at batch 64, bf16 (128 channels at 56x56, 256 at 28x28,
512 at 14x14): ``kgen.torch.data_gradient`` with ``KGEN_CONV_PHASE_STREAMS=0`` (the four phase
convolutions on the caller's stream, one after another) and ``=4`` (each on a side stream of
its own), and cuDNN's ``torch.nn.grad.conv2d_input`` (``cudnn.benchmark``), each checked
against float64 and timed in two alternating rounds (CUDA events, L2 flushed, the GPU held
until each run is queued, median of 20; the mean of the two medians). Prints a JSON line a
layer and writes them to OUT.json with the device and COMMIT.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LAYERS = ((128, 56), (256, 28), (512, 14))      # (channels in and out, input size)
WAYS = {"cudnn": None, "serial": "0", "streams": "4"}   # KGEN_CONV_PHASE_STREAMS of each kgen way


def main() -> None:
    import torch

    import kgen.torch
    from kgen.measure.bench import l2_flusher, time_runs
    from kgen.measurement import Timing
    from kgen.problem import Target

    commit, out = sys.argv[1], sys.argv[2]
    flush = l2_flusher(Target.detect(0).l2_bytes)
    torch.backends.cudnn.benchmark = True
    rows = []
    for c, h in LAYERS:
        gen = torch.Generator(device="cuda").manual_seed(0)

        def rand(*shape):
            return (torch.rand(shape, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)

        x = rand(64, c, h, h).to(memory_format=torch.channels_last)
        w = rand(c, c, 3, 3) / (9 * c) ** 0.5
        dy = rand(64, c, h // 2, h // 2).to(memory_format=torch.channels_last)
        kw = dict(stride=2, padding=1)
        want = torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), **kw)
        calls = {"cudnn": lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, **kw),
                 "serial": lambda: kgen.torch.data_gradient(x, w, dy, **kw),
                 "streams": lambda: kgen.torch.data_gradient(x, w, dy, **kw)}
        row = dict(c=c, h=h)
        medians = {way: [] for way in WAYS}
        for round_ in range(3):                 # the first round checks (and loads), two are timed
            for way, streams in WAYS.items():
                if streams is not None:
                    os.environ["KGEN_CONV_PHASE_STREAMS"] = streams
                if round_ == 0:
                    got = calls[way]()
                    torch.cuda.synchronize()
                    row[way + "_err"] = float((got.double() - want).abs().max() / want.abs().max())
                else:
                    medians[way].append(1e3 * statistics.median(time_runs(calls[way], Timing(runs=20, warmup=3),
                                                                          flush)))
        row.update({way + "_us": sum(m) / len(m) for way, m in medians.items()})
        print(json.dumps(row), flush=True)
        rows.append(row)
    os.environ.pop("KGEN_CONV_PHASE_STREAMS", None)
    Path(out).write_text(json.dumps(dict(device=torch.cuda.get_device_name(), commit=commit, rows=rows), indent=1))


if __name__ == "__main__":
    main()
