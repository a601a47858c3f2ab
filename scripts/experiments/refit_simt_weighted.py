"""The CUDA-core GEMM model refitted with the float32 grid recording, its recorded spaces weighted.

    python scripts/experiments/refit_simt_weighted.py [--weight 10] [--out /tmp/model.json]

The float32 grid of the H200 (``docs/evidence/nvidia-h200/f32_gemm_grid_2fd0b84.jsonl.gz``: 105
problems of every layout, 12-21 configs each) outnumbers the recorded spaces of
``scripts/train_gemm_cost.py`` (a few NN problems, hundreds of configs each); here each of the
latter's groups counts ``--weight`` times in the listwise fit. Prints the model's pick over the
best recorded config (geometric mean, worst): five-fold over the grid problems (each fold fitted
without them) and on the evaluation-only recording, which neither fit sees; with ``--out``,
writes the model fitted on everything (the shipped model file is left as it is).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import train_gemm_cost as T  # noqa: E402
from kgen.kernels.gemm import cost as gc  # noqa: E402

FAMILY = "gemm"
GRID = "docs/evidence/nvidia-h200/f32_gemm_grid_2fd0b84.jsonl.gz"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weight", type=int, default=10, help="times each recorded space's group counts")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--out", default="", help="write the model fitted on everything here")
    args = ap.parse_args()
    spaces, shipped = T.load_groups(FAMILY, T.SPACE_FILES[FAMILY]), T.load_groups(FAMILY, [T.SHIPPED[FAMILY]])
    grid = T.load_groups(FAMILY, [GRID])
    groups = (spaces + shipped) * args.weight + grid
    start = dict(T.HW[FAMILY], launch_us=T.launch_floor(groups, T.HW[FAMILY]["launch_us"]))

    def fitted_on(train):
        return T.fit_groups(FAMILY, train, start)

    scored = [g for g in grid if len(g.times) >= 5]
    keys = sorted({g.key for g in scored})
    folds = []
    for i in range(args.folds):
        held = set(keys[i::args.folds])
        fitted = fitted_on([g for g in groups if g.key not in held])
        folds += [T.evaluate(FAMILY, fitted, g)["pick_ratio"] for g in scored if g.key in held]
    full = fitted_on(groups)
    evals = [T.evaluate(FAMILY, full, g)["pick_ratio"] for g in T.load_groups(FAMILY, T.EVAL_ONLY[FAMILY])
             if len(g.times) >= 5]
    print(json.dumps({"weight": args.weight, "grid_folds": {"geomean": round(_geomean(folds), 3),
                                                            "worst": round(max(folds), 3), "problems": len(folds)},
                      "eval_only": {"geomean": round(_geomean(evals), 3), "worst": round(max(evals), 3),
                                    "problems": len(evals)}}))
    if args.out:
        model = json.loads(gc.MODEL_PATH.read_text())
        full["catalogue"] = {"core_params": list(gc.CORE[FAMILY]),
                             "cores": [list(c) for c in T.catalogue(FAMILY, shipped, spaces + grid)]}
        model["families"][FAMILY] = T.rounded(full)
        model["version"] = f"gemm-cost-1+{gc.parameters_digest(model['families'])}"
        Path(args.out).write_text(json.dumps(model, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.out}, version {model['version']}")


if __name__ == "__main__":
    main()
