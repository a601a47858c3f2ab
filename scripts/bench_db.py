"""Tuning-database throughput and lookup latency on the CPU (no GPU needed).

    python scripts/bench_db.py [--records 100000]

Builds synthetic records (valid configs of the gemm family with plausible times, 25 timed
runs each, 100 configs per problem), then times: import
into a fresh SQLite file through ``import_file`` (validation included; lines parsed by
``KGEN_DB_WORKERS`` processes, default one per CPU), the same import without the checks
(``import_unchecked``, for scale only: the checks' target is ``validation_share``, the lines'
parse with and without the checks, timed alternately), export, merge of two
overlapping files, and ``best()`` latency, cold (first call on a freshly opened store) and
warm (median of repeated calls on the same store). Writes
scripts/results/cpu-<model>-<N>cpu/bench_db.json (N: the CPUs this process may use; the
figures depend on it): {"device", "commit", "date", "rows": [...]}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kgen.db import SqlStore, write_jsonl  # noqa: E402
from kgen.db.exchange import export, import_file, merge, read_records, read_rows  # noqa: E402
from kgen.db.reading import gc_paused  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.measurement import Measurement, Provenance, Record, Timing  # noqa: E402
from kgen.provenance import cpu_name  # noqa: E402

IMPORT_TARGET = 25_000     # records/s into SQLite (checked), on 2 CPUs
VALIDATION_TARGET = 0.10   # of import's time, at most
WARM_TARGET_US = 50.0      # warm best() lookup


def slug(model: str) -> str:
    words = re.sub(r"\((r|tm)\)|\bcpu\b|@.*$|processor|\d+-core", " ", model.lower())
    return "cpu-" + "-".join(re.findall(r"[a-z0-9]+", words)[:5])


def commit() -> str:
    """The checkout's short commit hash, read from .git (no git process), else "unknown"."""
    try:
        git = ROOT / ".git"
        if git.is_file():
            git = (ROOT / git.read_text().split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head[:7]
        ref = head.split(":", 1)[1].strip()
        common = Path((git / "commondir").read_text().strip()) if (git / "commondir").is_file() else None
        for base in (git, (git / common).resolve() if common else git):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()[:7]
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line[:7]
    except (OSError, IndexError):
        pass
    return "unknown"


def _config_pool(spec, target) -> list:
    """Configs of the gemm family valid for every problem ``synthetic`` makes (256 to 32,000
    rows and columns, k 256 to 2048, float32 NN, alignment 4): those of the smallest problem
    without split-K or grouping, whose other constraints do not depend on the shape."""
    from kgen.kernels.gemm.problem import gemm_problem

    space = spec.space(gemm_problem(256, 256, 256), target)
    return [c for c in space.configs() if c["SK"] == 1 and c["GM"] == 1]


def synthetic(n: int, configs: int = 100, seed: int = 0) -> list[Record]:
    """``n`` successful and failed records: n / configs gemm problems on two devices, each
    with ``configs`` valid configs of the installed gemm family and plausible times (import
    checks both)."""
    from kgen.kernels.gemm.problem import gemm_problem
    from kgen.measurement import Failure
    from kgen.problem import Target
    from kgen.registry import get_spec

    spec = get_spec("gemm")
    digest = spec.template_digest()
    pool = _config_pool(spec, Target.h200())
    rng = random.Random(seed)
    out = []
    chosen: list = []
    for i in range(n):
        p, c = divmod(i, configs)
        m, k = 256 * (1 + p // 8), 256 * (1 + p % 8)
        problem = gemm_problem(m, m, k)
        if c == 0:
            chosen = rng.sample(pool, min(configs, len(pool)))
        config = chosen[c % len(chosen)]
        base = 2 * m * m * k / 2e13 * 1e3 * rng.uniform(1.0, 3.0)        # ms at 20 TFLOP/s or less
        failed = rng.random() < 0.1
        meas = Measurement(
            config_name=config.name, config=config.as_dict(), problem_key=problem.key,
            times_ms=None if failed else tuple(base * rng.uniform(0.99, 1.03) for _ in range(25)),
            failure=Failure("compile", "ptxas error") if failed else None, error=None if failed else 1e-7,
            timing=Timing(), resources={"registers": 128}, compile_s=0.4, measure_s=0.02)
        prov = Provenance(device="NVIDIA H200" if p % 2 == 0 else "NVIDIA H100 80GB HBM3", cc="9.0", driver=13000,
                          cuda_runtime=13020, nvrtc="13.0", kgen_version="0.1.0", template_digest=digest,
                          created=f"2026-11-{1 + p % 28:02d}T12:00:00+00:00")
        out.append(Record("gemm", meas, prov))
    return out


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def timed_write(op: str, path: Path, write, note: str) -> dict:
    """A result row for ``write(store)`` into a fresh SQLite file, timed with the cyclic
    garbage collector paused as ``import_file`` pauses it."""
    store = SqlStore(f"sqlite:///{path}")
    try:
        with gc_paused():
            n, s = timed(lambda: write(store))
    finally:
        store.close()
    return {"op": op, "store": "sqlite", "records": n, "seconds": round(s, 3), "records_per_s": round(n / s),
            "note": note}


def raw_query_row(path: Path, sample, calls: int) -> dict:
    """The same lookup through the sqlite3 module alone: what SQL itself costs, without the store."""
    from kgen.db.sql import TABLE

    con = sqlite3.connect(path)
    q = (f"SELECT id, data FROM {TABLE} WHERE family = ? AND problem_key = ? AND device = ? "
         "AND time_ms IS NOT NULL ORDER BY time_ms, config_name, created, data LIMIT 1")
    lat = []
    for i in range(calls):
        k, d = sample[i % len(sample)]
        t0 = time.perf_counter()
        con.execute(q, ("gemm", k, d)).fetchall()
        lat.append((time.perf_counter() - t0) * 1e6)
    con.close()
    return {"op": "best_warm_sqlite3_query_only", "calls": calls, "us_median": round(statistics.median(lat), 1),
            "note": "same SELECT through the sqlite3 module, no SQLAlchemy, no JSON decode"}


def import_unchecked(path: Path, db_path: Path, checked_s: float) -> dict:
    """The import's work without kgen.db.validity (an internal switch no command offers): the
    same lines parsed by the same workers into rows stored in a fresh SQLite file."""
    from kgen.db.reading import read_chunks

    row = timed_write("import_unchecked", db_path,
                      lambda db: db.add_rows(read_chunks(path, "auto", "import:all.jsonl", {}, True, check=False)).written,
                      "import without kgen.db.validity, end to end: not a target; import minus this, over import, "
                      "is end_to_end_share (the target is validation_share's)")
    row["end_to_end_share"] = round(max(0.0, checked_s - row["seconds"]) / checked_s, 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--lookups", type=int, default=5_000, help="warm best() calls timed")
    parser.add_argument("--out", default="", help="results file (default scripts/results/<cpu>/bench_db.json)")
    parser.add_argument("--commit", default="", help="commit to record (default: read from .git)")
    args = parser.parse_args()

    model = cpu_name()
    load_start = os.getloadavg()[0]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / f"{slug(model)}-{cpus}cpu" / "bench_db.json"
    rows = []
    records = synthetic(args.records)
    problems = sorted({(r.measurement.problem_key, r.provenance.device) for r in records})
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_jsonl(tmp / "all.jsonl", records)
        size = (tmp / "all.jsonl").stat().st_size
        url = f"sqlite:///{tmp / 'kgen.db'}"

        db = SqlStore(url)
        report, s = timed(lambda: import_file(tmp / "all.jsonl", db))
        rows.append({"op": "import", "store": "sqlite", "records": report.imported, "file_mb": round(size / 1e6, 1),
                     "seconds": round(s, 3), "records_per_s": round(report.imported / s),
                     "target_records_per_s": IMPORT_TARGET, "meets_target": report.imported / s >= IMPORT_TARGET,
                     "parse_workers": knobs.db_workers})
        rows.append(import_unchecked(tmp / "all.jsonl", tmp / "unchecked.db", rows[0]["seconds"]))
        # checked and unchecked parses alternated (checked, unchecked, unchecked, checked): the first
        # of two back-to-back parses runs slower, and the mean of each pair takes the order out
        checked_runs, unchecked_runs = [], []
        order = (True, False, False, True)
        for i, check in enumerate(order):
            parsed_rows, s = timed(lambda: read_rows(tmp / "all.jsonl", origin="import:all.jsonl", check=check))
            (checked_runs if check else unchecked_runs).append(s)
            rows_in = parsed_rows if i == len(order) - 1 else None     # no run's rows alive during the next
            parsed_rows = None
        checked_s, unchecked_s = statistics.mean(checked_runs), statistics.mean(unchecked_runs)
        rows.append({"op": "import_parse_rows", "records": len(rows_in), "seconds": round(checked_s, 3),
                     "runs_s": [round(x, 3) for x in checked_runs],
                     "records_per_s": round(len(rows_in) / checked_s), "parse_workers": knobs.db_workers,
                     "note": "the first half of import: lines to validated SQL rows (mean of two runs)"})
        rows.append({"op": "import_parse_rows_unchecked", "records": len(rows_in), "seconds": round(unchecked_s, 3),
                     "runs_s": [round(x, 3) for x in unchecked_runs],
                     "records_per_s": round(len(rows_in) / unchecked_s), "parse_workers": knobs.db_workers,
                     "note": "the same, without kgen.db.validity (the schema still checked; mean of two runs "
                             "alternated with the checked ones)"})
        share = max(0.0, checked_s - unchecked_s) / rows[0]["seconds"]
        rows.append({"op": "validation_share", "seconds": round(checked_s - unchecked_s, 3),
                     "of_import_s": rows[0]["seconds"],
                     "share": round(share, 3), "target_share": VALIDATION_TARGET,
                     "meets_target": share <= VALIDATION_TARGET,
                     "note": "what kgen.db.validity adds to import: checked parse minus unchecked (each the mean "
                             "of two runs, in the order checked, unchecked, unchecked, checked), over import"})
        rows.append(timed_write("import_insert", tmp / "rows.db", lambda db: db.add_rows(rows_in).written,
                                "the second half: SqlStore.add_rows, one transaction"))
        rows_in = None
        parsed, s = timed(lambda: read_records(tmp / "all.jsonl"))          # as merge reads
        rows.append({"op": "import_read_validate", "records": len(parsed), "seconds": round(s, 3),
                     "records_per_s": round(len(parsed) / s), "parse_workers": knobs.db_workers})
        rows.append(timed_write("import_commit", tmp / "other.db", lambda db: db.commit(parsed),
                                "SqlStore.commit of parsed records, one transaction"))
        parsed = None                                       # free the memory
        n, s = timed(lambda: export(db, tmp / "export.jsonl"))
        rows.append({"op": "export", "store": "sqlite", "records": n, "seconds": round(s, 3),
                     "records_per_s": round(n / s)})
        db.close()

        cut = len(records) * 6 // 10
        write_jsonl(tmp / "a.jsonl", records[:cut])
        write_jsonl(tmp / "b.jsonl", records[len(records) - cut:])
        report, s = timed(lambda: merge([tmp / "a.jsonl", tmp / "b.jsonl"], tmp / "merged.jsonl"))
        rows.append({"op": "merge", "inputs": 2, "records_read": report.read, "records_written": report.written,
                     "seconds": round(s, 3), "records_per_s": round(report.read / s)})

        rng = random.Random(1)
        key, device = rng.choice(problems)
        fresh = SqlStore(url)
        best, s = timed(lambda: fresh.best("gemm", key, device))
        assert best is not None
        rows.append({"op": "best_cold", "store": "sqlite", "records_in_store": len(records),
                     "us": round(s * 1e6, 1), "note": "first call on a freshly opened store"})
        sample = [rng.choice(problems) for _ in range(200)]
        for k, d in sample:                                  # warm every problem once
            fresh.best("gemm", k, d)
        lat = []
        for i in range(args.lookups):
            k, d = sample[i % len(sample)]
            t0 = time.perf_counter()
            fresh.best("gemm", k, d)
            lat.append((time.perf_counter() - t0) * 1e6)
        lat.sort()
        warm = statistics.median(lat)
        rows.append({"op": "best_warm", "store": "sqlite", "records_in_store": len(records), "calls": len(lat),
                     "us_median": round(warm, 1), "us_p90": round(lat[int(0.9 * len(lat))], 1),
                     "target_us": WARM_TARGET_US, "meets_target": warm <= WARM_TARGET_US})
        fresh.close()
        rows.append(raw_query_row(tmp / "kgen.db", sample, args.lookups))

    doc = {"device": model, "commit": args.commit or commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "cpus": os.cpu_count(),
           "load_avg_1m": [round(load_start, 2), round(os.getloadavg()[0], 2)],   # other work on the machine
           "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for row in rows:
        print(json.dumps(row))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
