"""Ground truth for search studies: measure a whole config space (or a uniform sample of it)
on the GPU and write every measurement as a compressed recording for replay.

A space small enough (the wgmma family's: 687-1336 valid configs per problem; the whole
space, tests/data/h200_gemm_wgmma_bf16_space.jsonl.gz, took 3 minutes of the H200) is measured whole
(``--configs 0``). The CUDA-core and mma.sync spaces hold 35,000-150,000 valid configs
per problem, hours of compiling each; they are recorded as a uniform sample of distinct
valid configs (``--configs N``), and a replay searches exactly that sample.

    python scripts/record_space.py --set wgmma --configs 0 --out tests/data/h200_gemm_wgmma_bf16_space.jsonl.gz
    python scripts/record_space.py --set simt --configs 400 --out tests/data/h200_gemm_f32_simt_space.jsonl.gz

Each problem gets ``--timeout`` seconds at most; what was measured by then is kept.

``--extend OLD`` adds to a sampled recording what a search meets first, which a uniform
sample of 35,000+ configs almost never holds: the family's model picks and every valid
config one parameter away from them (``--around-best N``: from the N fastest recorded
configs too), and the configs ``--live-seeds`` kgen tunes of
``--live-trials`` trials each measure in the real space (not a replay). The recording's ten
fastest configs per problem are measured again, and the ratio of new to recorded times is
printed, so a drift between the two sessions shows. Configs already recorded keep their
recorded times. Give the timing the old recording was made with (its ``timing.l2``;
``KGEN_L2_FLUSH_STYLE``, ``KGEN_BENCH_HOLD``), so old and new times compare.

    python scripts/record_space.py --set simt --extend tests/data/h200_gemm_f32_simt_space.jsonl.gz \
        --out /tmp/h200_gemm_f32_simt_space.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kgen.runners.base import Runner  # noqa: E402

SHAPES = [(2048, 2048, 2048), (1000, 1000, 1000), (128, 4096, 4096), (3000, 5000, 700)]
SETS = {   # name: (family, dtype, shapes)
    "simt": ("gemm", "float32", SHAPES),
    "mma": ("gemm_mma", "bfloat16", SHAPES),
    # TMA needs 16-byte rows: the odd shape's k is 720 (not 700) for it
    "wgmma": ("gemm_wgmma", "bfloat16", [(4096, 4096, 4096)] + SHAPES[:3] + [(3000, 5000, 720)]),
}


class OnlyListed(Runner):
    """A runner measuring on ``inner`` that offers a tune only the listed configs (as a replay
    offers the recorded ones), so an exhaustive tune measures exactly them."""

    def __init__(self, inner: Runner, listed: dict[str, dict]):
        self.inner, self.listed = inner, listed
        self.slots, self.needs_binaries = inner.slots, inner.needs_binaries

    def submit(self, task):
        return self.inner.submit(task)

    def measurable(self, problem_key: str) -> dict[str, dict]:
        return self.listed


def neighbourhood(space, anchors) -> dict[str, dict]:
    """``anchors`` (configs' values) and every valid config one parameter away from one, name -> values."""
    out: dict[str, dict] = {}
    for anchor in anchors:
        out[space.make(anchor).name] = dict(anchor)
        for config in space.neighbours(anchor):
            out.setdefault(config.name, config.as_dict())
    return out


def sample(args, family, dtype, shapes, target, runner) -> list:
    """The records of ``args.configs`` configs (0: every valid one) of each shape."""
    from kgen.db import MemoryStore
    from kgen.kernels.gemm.route import gemm_request
    from kgen.search import tune

    db = MemoryStore()
    records = []
    for m, n, k in shapes:
        [(spec, problem)] = [c for c in gemm_request(family, m, n, k, dtype, "NN", target)
                             if c[0].family == family]
        valid = sum(1 for _ in spec.space(problem, target).iter_values())
        budget = args.configs or valid
        sampler = "exhaustive" if budget >= valid else "random"
        t0 = time.perf_counter()
        result = tune(spec, problem, target, runner, db, trials=budget, timeout_s=args.timeout,
                      sampler=sampler, seed=args.seed, warm_start=False)
        ok = sum(1 for t in result.trials if t.ok)
        best = f"{result.best.time_ms:.4f} ms" if result.best else "none"
        print(f"{problem.key}: {len(result.trials)}/{valid} valid configs measured ({ok} ok, "
              f"{dict(result.failures)} failed), best {best}, {time.perf_counter() - t0:.0f} s", flush=True)
        records.extend(db.records(family, problem.key, target.name))
    return records


def extend(args, family, target, runner) -> list:
    """The records of ``args.extend`` and those the extension measured (see the module's text)."""
    from kgen.db import MemoryStore
    from kgen.db.exchange import read_records
    from kgen.problem import Problem
    from kgen.runners import Recording
    from kgen.search import tune
    from kgen.registry import get_spec

    records = read_records(args.extend)
    old = Recording.from_records(records)
    for key in sorted(old.problems()):
        problem = Problem.from_key(key)
        if problem.family != family:
            continue
        spec = get_spec(family)
        recorded = {name: m for (k, name), m in old.entries.items() if k == key and m.ok}
        fastest = sorted(recorded, key=lambda name: statistics.median(recorded[name].times_ms))[:10]
        space = spec.space(problem, target)
        anchors = [pick.as_dict() for pick in spec.model_picks(problem, target, 3)] if args.around_picks else []
        anchors += [space.complete(dict(recorded[name].config)) for name in fastest[:args.around_best]]
        listed = neighbourhood(space, [a for a in anchors if space.is_valid(a)])
        listed.update({name: dict(recorded[name].config) for name in fastest})
        db = MemoryStore()
        t0 = time.perf_counter()
        tune(spec, problem, target, OnlyListed(runner, listed), db, trials=len(listed), timeout_s=args.timeout,
             sampler="exhaustive", seed=args.seed, warm_start=False)
        for seed in range(args.live_seeds):
            live = MemoryStore()
            tune(spec, problem, target, runner, live, trials=args.live_trials, timeout_s=args.timeout,
                 sampler="kgen", seed=seed, warm_start=False)
            have = {r.measurement.config_name for r in db.records(family, key, target.name)}
            db.commit([r for r in live.records(family, key, target.name) if r.measurement.config_name not in have])
        fresh = {r.measurement.config_name: r for r in db.records(family, key, target.name)}
        ratios = [statistics.median(fresh[name].measurement.times_ms) / statistics.median(recorded[name].times_ms)
                  for name in fastest if name in fresh and fresh[name].measurement.ok]
        added = [r for name, r in fresh.items() if (key, name) not in old.entries]
        records.extend(added)
        best_old = min(statistics.median(m.times_ms) for m in recorded.values())
        best_new = min((statistics.median(r.measurement.times_ms) for r in added if r.measurement.ok),
                       default=float("inf"))
        drift = f"{statistics.median(ratios):.3f} (of {len(ratios)})" if ratios else "n/a"
        print(f"{key}: {len(added)} configs added ({sum(1 for r in added if r.measurement.ok)} ok); "
              f"new/recorded time of the recorded fastest, median {drift}; best recorded {best_old:.4f} ms, "
              f"best added {best_new:.4f} ms; {time.perf_counter() - t0:.0f} s", flush=True)
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), required=True)
    parser.add_argument("--configs", type=int, default=0, help="configs per problem (0: every valid one)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per problem")
    parser.add_argument("--shapes", default="", help="only these of the set's shapes, MxNxK,... (a recording "
                                                     "made in parts; the parts' files are concatenated)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="the recording (.jsonl.gz)")
    parser.add_argument("--extend", default="", help="a recording to extend (see above) instead of sampling")
    parser.add_argument("--around-picks", type=int, default=1,
                        help="--extend: the model picks' neighbourhoods (0: not)")
    parser.add_argument("--around-best", type=int, default=0,
                        help="--extend: the neighbourhoods of the recording's N fastest configs too")
    parser.add_argument("--live-seeds", type=int, default=2, help="--extend: kgen tunes per problem")
    parser.add_argument("--live-trials", type=int, default=50, help="--extend: trials of each")
    args = parser.parse_args()

    from kgen.problem import Target
    from kgen.runners import LocalGPURunner

    family, dtype, shapes = SETS[args.set]
    if args.shapes:
        wanted = [tuple(int(x) for x in shape.split("x")) for shape in args.shapes.split(",")]
        unknown = [w for w in wanted if w not in shapes]
        if unknown:
            parser.error(f"--shapes {unknown} not in the {args.set} set: {shapes}")
        shapes = [s for s in shapes if s in wanted]
    target = Target.detect(0)
    with LocalGPURunner((0,), target.l2_bytes) as runner:
        if args.extend:
            records = extend(args, family, target, runner)
        else:
            records = sample(args, family, dtype, shapes, target, runner)
    count = write_recording(args.out, records)
    print(f"wrote {count} records to {args.out}")
    return 0


def write_recording(path: str, records) -> int:
    """``records`` as a gzip-compressed JSON lines recording (the same bytes for the same
    records: no time stamp in the gzip header); how many were written."""
    from kgen.db import write_jsonl

    out = Path(path)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "recording.jsonl"
        count = write_jsonl(plain, records)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(plain, "rb") as src, gzip.GzipFile(out, "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)
    return count


if __name__ == "__main__":
    sys.exit(main())
