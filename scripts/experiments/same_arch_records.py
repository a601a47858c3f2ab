"""What a record tuned on another card of this compute capability is worth to dispatch here.

    python3 scripts/experiments/same_arch_records.py tuning_db/nvidia-h200_gemm_wgmma.jsonl --out OUT.json

For every GEMM problem of the records file (measured on another device of this GPU's compute
capability; problems with an epilogue or an unaligned operand are left out), ``kgen.gemm`` on
PyTorch tensors is timed as dispatch serves it twice, with the other card's best config
(KGEN_SAME_ARCH_RECORDS=1, the default) and without it (0: the cost models' picks and the
first-call race), beside ``torch.matmul`` (cuBLAS), generated kernels only (KGEN_VENDOR=0):
CUDA events, the L2 flushed before each run, the median of --runs, the two modes in alternating
order from problem to problem, ``kgen.refresh()`` between them. Each result is checked against
a float64 product first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import commit, geomean, gpu_session, median_ms  # noqa: E402

TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-4, "tf32": 5e-3}


def problems(path: Path) -> list[dict]:
    """The distinct plain GEMM problems of a records file, as their fields."""
    seen, out = set(), []
    for line in path.read_text().splitlines():
        key = json.loads(line)["problem_key"]
        if key in seen:
            continue
        seen.add(key)
        fields = dict(part.split("=", 1) for part in key.split("|")[1:])
        if fields.get("epilogue", "none") != "none" or fields.get("out_dtype", fields["dtype"]) != fields["dtype"]:
            continue
        natural = {"float32": 4, "float64": 2}.get(fields["dtype"], 8)
        if int(fields.get("align_a", natural)) < natural or int(fields.get("align_b", natural)) < natural:
            continue
        out.append(dict(m=int(fields["m"]), n=int(fields["n"]), k=int(fields["k"]), dtype=fields["dtype"],
                        layout=fields["layout"], precision=fields.get("precision", "native"), key=key))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", help="a GEMM family's records file of another device (tuning_db/)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--limit", type=int, default=0, help="at most this many problems (0: all)")
    parser.add_argument("--out", default="")
    parser.add_argument("--commit", default="")
    args = parser.parse_args(argv)
    os.environ["KGEN_VENDOR"] = "0"
    cupy, torch, kgen, target, flush = gpu_session()
    todo = problems(Path(args.records))[:args.limit or None]
    rows = []
    for index, p in enumerate(todo):
        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(p["dtype"], torch.float32)
        tf32 = p["precision"] == "tf32"
        gen = torch.Generator(device="cuda").manual_seed(index)
        a = torch.randn(*((p["m"], p["k"]) if p["layout"][0] == "N" else (p["k"], p["m"])), device="cuda",
                        generator=gen).to(dtype)
        b = torch.randn(*((p["k"], p["n"]) if p["layout"][1] == "N" else (p["n"], p["k"])), device="cuda",
                        generator=gen).to(dtype)
        a = a if p["layout"][0] == "N" else a.t()
        b = b if p["layout"][1] == "N" else b.t()
        c = torch.empty(p["m"], p["n"], device="cuda", dtype=dtype)
        ref = a.double() @ b.double()
        torch.backends.cuda.matmul.allow_tf32 = tf32
        cublas = median_ms(lambda: torch.matmul(a, b, out=c), args.runs, flush)
        row = {**{f: p[f] for f in ("m", "n", "k", "dtype", "layout", "precision")}, "baselines": {"cublas": cublas}}
        modes = ("arch", "model") if index % 2 == 0 else ("model", "arch")
        for mode in modes:
            os.environ["KGEN_SAME_ARCH_RECORDS"] = "1" if mode == "arch" else "0"
            kgen.refresh()
            call = lambda: kgen.gemm(a, b, c, precision="tf32" if tf32 else None)       # noqa: E731
            call()
            err = float((c.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
            choice = kgen.gemm_choice(a, b, precision="tf32" if tf32 else None)
            ok = err <= TOLERANCE["tf32" if tf32 else p["dtype"]]
            ms = median_ms(call, args.runs, flush) if ok else None
            row[mode] = {"kgen_ms": ms, "ok": ok, "error": err, "family": choice.family, "config": choice.config,
                         "how": choice.how}
        rows.append(row)
        print(f"{p['m']}x{p['n']}x{p['k']} {p['dtype']} {p['layout']}: cuBLAS {cublas * 1e3:.1f} us, "
              + ", ".join(f"{mode} {row[mode]['kgen_ms'] * 1e3 if row[mode]['kgen_ms'] else float('nan'):.1f} us "
                          f"({row[mode]['how']})" for mode in ("arch", "model")), flush=True)
    timed = [r for r in rows if r["arch"]["kgen_ms"] and r["model"]["kgen_ms"]]
    summary = {mode: geomean(r["baselines"]["cublas"] / r[mode]["kgen_ms"] for r in timed) for mode in ("arch", "model")}
    print(f"geomean cuBLAS/kgen over {len(timed)} problems: with the other card's records {summary['arch']:.3f}, "
          f"without {summary['model']:.3f}")
    doc = {"device": target.name, "records": args.records, "commit": args.commit or commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "runs": args.runs, "l2": "flushed", "summary": summary, "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
