"""Exit 0 when the configs of a compare_configs.py --base-template run are faster than their
@base versions by a geometric mean of at least --min-gain (default 2 %), else 1; prints it."""

from __future__ import annotations

import argparse
import json
import math
import sys


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", help="compare.jsonl")
    ap.add_argument("--min-gain", type=float, default=0.02)
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in open(args.rows)]
    ms = {(r["problem"], r["config"]): r["ms"] for r in rows}
    ratios = [ms[(p, c + "@base")] / t for (p, c), t in ms.items()
              if not c.endswith("@base") and (p, c + "@base") in ms]
    if not ratios:
        print("no config ran in both versions")
        return 1
    gain = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"{len(ratios)} configs: the new template {gain:.3f}x the base (geometric mean of base / new times)")
    return 0 if gain >= 1 + args.min_gain else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
