"""gemm_skinny's model against every measured skinny config the H100 evidence holds, by loads in flight (no GPU).

    python3 scripts/experiments/skinny_loads_in_flight.py

Rows: the study (``skinny_study_6285cc2.jsonl``), the row-pitch probe (``skinny_row_pitch_f429f6f.jsonl``,
its f429f6f configs), the GEMV routing runs (``gemv_route_{vector,side2}_ca354f7.json``, rows that ran a
gemm_skinny config) and the untuned rows of ``scripts/results/nvidia-h100-80gb-hbm3/bench_shapes.json``
that did. For each, measured / predicted (``predict_seconds`` at HEAD, for the config the row ran). Prints
the error per source and, for the configs whose lanes run along k, per (U x CJ loads in flight per lane,
bytes per load). The older rows were measured under older templates (the study's and the GEMV runs'
before the row pitch of f429f6f, which changed configs with X along i and Y along k only).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kgen.kernels.gemm import skinny  # noqa: E402
from kgen.kernels.gemm.dtypes import ITEMSIZE  # noqa: E402
from kgen.problem import Target  # noqa: E402

EVIDENCE = ROOT / "docs" / "evidence" / "nvidia-h100-80gb-hbm3"
RESULTS = ROOT / "scripts" / "results" / "nvidia-h100-80gb-hbm3" / "bench_shapes.json"


def measured_rows() -> list[tuple[tuple, str, float, str]]:
    """(m, n, k, dtype, layout), config, ms, source."""
    rows = []
    for line in (EVIDENCE / "skinny_study_6285cc2.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows.append(((r["m"], r["n"], r["k"], r["dtype"], r["layout"]), r["config"], r["ms"], "study"))
    for line in (EVIDENCE / "skinny_row_pitch_f429f6f.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("template") == "f429f6f" and r["config"].startswith("gemm_skinny"):
            rows.append(((268, 15, 16150, "float32", "NN"), r["config"], r["ms"], "pitch probe"))
    runs = [(RESULTS, "bench_shapes", "untuned")] + [(EVIDENCE / f"gemv_route_{name}_ca354f7.json", "gemv", None)
                                                     for name in ("vector", "side2")]
    for path, source, mode in runs:
        data = json.loads(path.read_text())
        for r in data["rows"] if isinstance(data, dict) else data:
            config = (r.get("choice") or "").split(" ")[0]
            if config.startswith("gemm_skinny") and r.get("kgen_ms") and mode in (None, r.get("mode")):
                rows.append(((r["m"], r["n"], r["k"], r["dtype"], r["layout"]), config, r["kgen_ms"], source))
    return rows


def main() -> int:
    spec, target = skinny.GemmSkinny(), Target.h200("NVIDIA H100 80GB HBM3")
    predicted: dict[tuple, dict[str, tuple[float, dict]]] = {}
    by_source, by_loads = defaultdict(list), defaultdict(list)
    for key, config, ms, source in measured_rows():
        if key not in predicted:
            problem = spec.problem(*key)
            space = spec.space(problem, target)
            cols = skinny.candidates(problem, target, all_rows=True)
            times = skinny.predict_seconds(problem, target, cols)
            predicted[key] = {}
            for i, seconds in enumerate(times):
                values = {name: int(cols[name][i]) for name in skinny.PARAMS}
                predicted[key][space.make(values).name] = (float(seconds) * 1e3, values)
        if config not in predicted[key]:
            continue
        guess, v = predicted[key][config]
        error = math.log(ms / guess)
        by_source[source].append(error)
        problem = spec.problem(*key)
        if skinny.roles(problem)["y_kcontig"]:
            by_loads[(v["U"] * v["CJ"], v["V"] * ITEMSIZE[key[3]])].append(error)

    def line(errors) -> str:
        return (f"{len(errors):3d} rows, measured / predicted geomean {math.exp(statistics.mean(errors)):.2f} "
                f"(range {math.exp(min(errors)):.2f}-{math.exp(max(errors)):.2f})")

    for source, errors in by_source.items():
        print(f"{source:12s} {line(errors)}")
    print("lanes along k, by (loads in flight per lane, bytes per load):")
    for loads, errors in sorted(by_loads.items()):
        print(f"  {str(loads):10s} {line(errors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
