"""What the card's clock, power and temperature do while one kernel runs for seconds on end.

    python3 scripts/clock_probe.py --family gemm_mma --seconds 4 float64:NN:8192x8192x8192 \\
        gemm_mma_f64_nn_64x128x16_w32x32_s4_va2_vb2_g8_k1_mb1_fb2

For each problem (dtype:layout:MxNxK, then config names, as scripts/compare_configs.py takes
them; each config checked against float64 first) and for cuBLAS on it: the kernel runs back
to back for ``--seconds`` while ``nvidia-smi`` samples the card every 100 ms, after an idle
``--rest`` so that each starts from the same state. A row gives the mean time of a launch
over the whole run and over its last second, and the median SM clock, power draw and
temperature of the samples in the first and the last second, with every clock event reason
(power cap, thermal, ...) seen. Short timed runs (the tuner's, compare_configs.py's) see the
first second only; a kernel that draws more power may be slowed later by the power cap. Only
reads the card's state: no setting is changed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

FIELDS = ("clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active")


def parse_samples(lines: list[str], elapsed_s: float) -> list[tuple[float, float, float, float, int]]:
    """nvidia-smi's CSV lines (FIELDS, no header, no units) as (seconds since sampling began,
    SM MHz, watts, degrees C, clock event reasons bitmask), spread evenly over ``elapsed_s``;
    lines that are not samples are dropped, and reasons a driver does not report read 0."""
    rows = [line for line in lines if line.strip()]
    out = []
    for i, line in enumerate(rows):
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != len(FIELDS):
            continue
        try:
            sample = (elapsed_s * (i + 0.5) / len(rows), float(parts[0]), float(parts[1]), float(parts[2]))
        except ValueError:
            continue
        try:
            bits = int(parts[3], 16)
        except ValueError:       # [N/A]
            bits = 0
        out.append(sample + (bits,))
    return out


class Sampler:
    """``nvidia-smi`` sampling the card every ``period_ms`` until stopped."""

    def __init__(self, period_ms: int = 100):
        self.proc = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits", "-i", "0",
             f"--loop-ms={period_ms}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.start = time.perf_counter()

    def stop(self) -> list[tuple[float, float, float, float, int]]:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        return parse_samples(out.splitlines(), time.perf_counter() - self.start)


def _median(values):
    return statistics.median(values) if values else None


def probe(run, seconds: float) -> dict:
    """``run`` back to back for ``seconds``, sampled; means of a launch and sample medians."""
    import cupy

    sampler = Sampler()
    time.sleep(0.3)                                  # nvidia-smi's first sample before the load
    start, marks = time.perf_counter(), []
    launches = 0
    while time.perf_counter() - start < seconds:
        for _ in range(8):
            run()
        cupy.cuda.Device().synchronize()
        launches += 8
        marks.append((time.perf_counter() - start, launches))
    samples = sampler.stop()
    total = marks[-1][0]
    last = [m for m in marks if m[0] >= total - 1.0]
    first_s, last_s = 0.3, 0.3 + total      # the load's window in sampler time
    head = [s for s in samples if first_s <= s[0] < first_s + 1.0]
    tail = [s for s in samples if last_s - 1.0 <= s[0] < last_s]
    reasons = 0
    for s in samples:
        if first_s <= s[0] < last_s:
            reasons |= s[4]
    return {"launches": launches, "ms_mean": 1e3 * total / launches,
            "ms_mean_last_s": (1e3 * (last[-1][0] - last[0][0]) / (last[-1][1] - last[0][1])
                               if len(last) > 1 else None),
            "sm_mhz_first_s": _median([s[1] for s in head]), "sm_mhz_last_s": _median([s[1] for s in tail]),
            "watts_first_s": _median([s[2] for s in head]), "watts_last_s": _median([s[2] for s in tail]),
            "temp_c_first_s": _median([s[3] for s in head]), "temp_c_last_s": _median([s[3] for s in tail]),
            "event_reasons": hex(reasons)}


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("items", nargs="+", help="dtype:layout:MxNxK, then config names; repeat")
    ap.add_argument("--family", default="gemm_wgmma", help="gemm_wgmma or gemm_mma")
    ap.add_argument("--seconds", type=float, default=4.0, help="how long each kernel runs")
    ap.add_argument("--rest", type=float, default=3.0, help="idle seconds before each run")
    ap.add_argument("--out", type=Path, help="append the rows here (JSON lines)")
    args = ap.parse_args(argv)

    from compare_configs import checked_runs

    for head, problem, runs in checked_runs(args.family, args.items):
        flops = 2.0 * problem["m"] * problem["n"] * problem["k"]
        for name, run in runs.items():
            time.sleep(args.rest)
            row = {"family": args.family, "problem": head, "config": name, "seconds": args.seconds,
                   **probe(run, args.seconds)}
            row["tflops_last_s"] = flops / row["ms_mean_last_s"] * 1e-9 if row["ms_mean_last_s"] else None
            print(json.dumps(row), flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
