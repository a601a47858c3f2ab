"""How far gemm_skinny's model is from measurement on a bench_shapes run that routed to it.

    python3 scripts/experiments/skinny_model_error.py RESULTS.json [--device "NVIDIA H100 80GB HBM3"]

For every row whose kernel was a gemm_skinny pick, the measured time over the time the model
predicted for that pick (``GemmSkinny.model_choice`` on the row's problem, checked to be the
config the row ran), grouped by input dtype (tf32 apart) and by the variant: lanes along k (the
big operand contiguous along k) or lanes over columns. Prints geometric means, 90th percentiles
and the rows it misses most. The model's constants are an H200's, so on another GPU the figures
include the difference in memory rate.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen.kernels.gemm.skinny import GemmSkinny, roles  # noqa: E402
from kgen.problem import Target  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="a bench_shapes.py results file")
    parser.add_argument("--device", default="", help="the target's name (default: the file's device)")
    parser.add_argument("--worst", type=int, default=12, help="rows shown that the model misses most")
    args = parser.parse_args(argv)
    doc = json.loads(Path(args.results).read_text())
    spec, target = GemmSkinny(), Target.h200(args.device or doc.get("device", "NVIDIA H200"))
    groups, misses, mismatched = defaultdict(list), [], 0
    for row in doc["rows"]:
        chosen = (row.get("choice") or "").split(" ")[0]
        if not chosen.startswith("gemm_skinny") or not row.get("kgen_ms"):
            continue
        problem = spec.problem(row["m"], row["n"], row["k"], row["dtype"], row["layout"])
        config, predicted_ms = spec.model_choice(problem, target)
        if config.name != chosen:
            mismatched += 1
            continue
        error = row["kgen_ms"] / predicted_ms
        dtype = "tf32" if row.get("precision") == "tf32" else row["dtype"]
        variant = "lanes along k" if roles(problem)["y_kcontig"] else "lanes over columns"
        groups[(dtype, variant)].append(error)
        misses.append((error, row["dtype"], row["m"], row["n"], row["k"], row["layout"], chosen, predicted_ms,
                       row["kgen_ms"]))
    for (dtype, variant), errors in sorted(groups.items()):
        errors.sort()
        mean = math.exp(sum(map(math.log, errors)) / len(errors))
        p90 = errors[min(len(errors) - 1, int(0.9 * len(errors)))]
        print(f"{dtype:9s} {variant:18s} {len(errors):3d} rows  measured/predicted {mean:5.2f}  p90 {p90:5.2f}")
    print(f"({mismatched} rows ran a config the model does not pick today: left out)")
    for error, dtype, m, n, k, layout, name, predicted, measured in sorted(misses, reverse=True)[:args.worst]:
        print(f"  x{error:5.1f}  {dtype:8s} {m}x{n}x{k} {layout}  {name}  predicted {predicted * 1e3:.1f} us, "
              f"measured {measured * 1e3:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
