"""How well gemm_skinny's model ranks configs that were measured, and how far its picks' times are (no GPU).

    python3 scripts/experiments/skinny_model_regret.py

Two views, both from shipped evidence:
- regret: for each problem of ``skinny_study_6285cc2.jsonl`` and of the row-pitch probe
  (``skinny_row_pitch_f429f6f.jsonl``, its f429f6f template's configs) the measured time of the
  config the model ranks first among the measured ones over the best measured, geomean;
- error: on the ``bench_shapes`` results file, the rows that ran the model's pick (how "model")
  and whose config the model still picks, measured / predicted, geomean and mean |log|.
The study's configs were measured under an older template (before the row pitch), so its
TT problems with M small read slower than today's kernel.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kgen.kernels.gemm import skinny  # noqa: E402
from kgen.problem import Target  # noqa: E402

EVIDENCE = ROOT / "docs" / "evidence" / "nvidia-h100-80gb-hbm3"
RESULTS = ROOT / "scripts" / "results" / "nvidia-h100-80gb-hbm3" / "bench_shapes.json"


def measured_configs() -> dict[tuple, dict[str, float]]:
    """(m, n, k, dtype, layout) -> {config: ms} of the study and the probe."""
    groups: dict[tuple, dict[str, float]] = {}
    for line in (EVIDENCE / "skinny_study_6285cc2.jsonl").read_text().splitlines():
        r = json.loads(line)
        groups.setdefault((r["m"], r["n"], r["k"], r["dtype"], r["layout"]), {})[r["config"]] = r["ms"]
    for line in (EVIDENCE / "skinny_row_pitch_f429f6f.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["template"] == "f429f6f" and r["config"].startswith("gemm_skinny"):
            groups.setdefault((268, 15, 16150, "float32", "NN"), {})[r["config"]] = r["ms"]
    return groups


def predictions(spec, problem, target) -> dict[str, float]:
    """Predicted ms of every valid candidate of the model (every row count)."""
    space = spec.space(problem, target)
    cols = skinny.candidates(problem, target, all_rows=True)
    times = skinny.predict_seconds(problem, target, cols)
    out = {}
    for i, seconds in enumerate(times):
        values = {name: int(cols[name][i]) for name in skinny.PARAMS}
        if space.is_valid(values):
            out[space.make(values).name] = float(seconds) * 1e3
    return out


def main() -> int:
    spec, target = skinny.GemmSkinny(), Target.h200("NVIDIA H100 80GB HBM3")
    regrets = []
    for key, measured in measured_configs().items():
        predicted = predictions(spec, spec.problem(*key), target)
        common = [c for c in measured if c in predicted]
        if len(common) < 3:
            continue
        top = min(common, key=lambda c: predicted[c])
        regrets.append(measured[top] / min(measured[c] for c in common))
        print(f"{key}: {len(common)} configs, the pick's time / the best {regrets[-1]:.2f}")
    print(f"regret over {len(regrets)} problems, geomean {math.exp(sum(map(math.log, regrets)) / len(regrets)):.3f}")
    errors = []
    for row in json.loads(RESULTS.read_text())["rows"]:
        chosen = (row.get("choice") or "").split(" ")[0]
        if not chosen.startswith("gemm_skinny") or row.get("how") != "model" or not row.get("kgen_ms"):
            continue
        picked = spec.model_choice(spec.problem(row["m"], row["n"], row["k"], row["dtype"], row["layout"]), target)
        if picked is not None and picked[0].name == chosen:
            errors.append(math.log(row["kgen_ms"] / picked[1]))
    if errors:
        print(f"{len(errors)} bench_shapes rows that ran today's pick: measured / predicted geomean "
              f"{math.exp(sum(errors) / len(errors)):.2f}, mean |log| {sum(map(abs, errors)) / len(errors):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
