"""Search strategies against recorded measurements, with no GPU: how fast each finds the best.

For every problem of a recording and every strategy, ``--seeds`` tunes replay the recording
(each config's time resampled from its recorded runs; configs outside the recording are
not offered). A trajectory's quality after n trials is the recorded optimum's time over the
best time found so far (1.0 = the optimum). Rows, medians over seeds:
{space, strategy, seeds, trials_to_95, trials_to_99, frac_at: {"10", "25", "50", "100", "200"}}
in scripts/results/<machine>/bench_search.json.

    python3 -m pip install '.[search]'      # Kernel Tuner (its strategies) and cmaes (CMA-ES)
    python scripts/bench_search.py --recording tests/data/h200_gemm_f32_simt.jsonl.gz --seeds 20

kgen+warm: the nearest other problem of the recording is tuned first (kgen, WARM_TRIALS
trials, the same seed) into the same database; the tune then warm-starts from it (its best
configs first, and its measurements estimate this problem's times until its own can). A
problem with none within KGEN_SEARCH_WARM_DISTANCE (as far as a tune warm-starts) has no
kgen+warm row.

Note: a replay offers only the recorded configs, and the numbers say how strategies do
within them. The wgmma recording is its space whole (the template of 2026-12-02);
the CUDA-core and mma.sync spaces (35,000-151,000 configs a problem) are a uniform sample of
400 configs, extended (scripts/record_space.py --extend; its log in
docs/evidence/nvidia-h200/extend_recordings.log) with what a search meets first: every
config one parameter away from a pick (the default with its next split-K values for the
SIMT family, three wave-model tiles for mma), two live kgen tunes of 50 trials, and every
config one parameter away from the ten fastest. Every strategy searches the same union;
its optimum is the fastest config measured, so the uniform sample's own optimum, 1-15 %
slower, no longer counts as 100 %.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CHECKPOINTS = (10, 25, 50, 100, 200)
WARM_TRIALS = 50      # kgen+warm: trials of the neighbouring problem's tune, half the CLI's default


def _median_time(m) -> float:
    runs = sorted(m.times_ms)
    return runs[len(runs) // 2]


def trajectory(result, optimum: float, recorded: dict[str, float]) -> list[float]:
    """Quality after each trial, in the order trials finished: the recorded optimum over the
    recorded time of the config the search holds best so far (chosen by the times it saw,
    which the replay resampled; judged by the recorded medians, so a lucky draw is no gain)."""
    seen, choice, out = float("inf"), None, []
    for m in result.trials:
        if m.ok and _median_time(m) < seen:
            seen, choice = _median_time(m), m.config_name
        out.append(optimum / recorded[choice] if choice is not None else 0.0)
    return out


def first_reaching(traj: list[float], level: float) -> int | None:
    for i, q in enumerate(traj, 1):
        if q >= level:
            return i
    return None


def run_strategy(spec, problem, target, recording, strategy: str, seed: int, budget: int,
                 warm_from=None, warm_trials: int = WARM_TRIALS) -> list[float]:
    """One replayed tune; ``warm_from``: a neighbouring problem, tuned first (kgen, ``warm_trials``
    trials, the same seed) into the tune's database, so that the tune warm-starts from it."""
    from kgen.db import MemoryStore
    from kgen.problem import Problem
    from kgen.runners import ReplayRunner
    from kgen.search import tune

    db = MemoryStore()
    runner = ReplayRunner(recording, seed=seed)
    with runner:
        if warm_from is not None:
            tune(spec, Problem.from_key(warm_from), target, runner, db, trials=warm_trials, sampler="kgen",
                 seed=seed, warm_start=False)
        result = tune(spec, problem, target, runner, db, trials=budget, sampler=strategy, seed=seed,
                      warm_start=warm_from is not None)
    recorded = {name: _median_time(m) for (key, name), m in recording.entries.items() if key == problem.key and m.ok}
    return trajectory(result, min(recorded.values()), recorded)


def nearest_problem(recording, problem, spec) -> str | None:
    """The key of the nearest other problem of the recording (None: none near enough)."""
    from kgen.knobs import knobs
    from kgen.nearest import nearest_problems

    others = nearest_problems(problem, (k for k in recording.problems() if k != problem.key), spec.shape_params,
                              within=knobs.search_warm_distance)    # as far as a tune warm-starts
    return others[0] if others else None


def median_trials(reached: list[int | None]) -> float | None:
    """The median over seeds of the trials a seed needed, a seed that never got there counting
    as more than any (None: half the seeds or more never got there)."""
    median = statistics.median(math.inf if n is None else n for n in reached)
    return None if math.isinf(median) else median


def summarize(space: str, strategy: str, trajectories: list[list[float]], budget: int = CHECKPOINTS[-1]) -> dict:
    """A row of medians over seeds, and each seed's trials to 95 % and 99 % (None: not within the
    budget); a checkpoint past the budget has none (a search that ended earlier because it had
    measured every recorded config keeps its best)."""
    frac_at = {}
    for n in CHECKPOINTS:
        at = [t[min(n, len(t)) - 1] for t in trajectories if t]
        frac_at[str(n)] = round(statistics.median(at), 4) if at and n <= budget else None
    to_95 = [first_reaching(t, 0.95) for t in trajectories]
    to_99 = [first_reaching(t, 0.99) for t in trajectories]
    return {"space": space, "strategy": strategy, "seeds": len(trajectories), "budget": budget,
            "trials_to_95": median_trials(to_95), "trials_to_99": median_trials(to_99),
            "frac_at": frac_at, "trials_available": max(len(t) for t in trajectories),
            "seeds_trials_to_95": to_95, "seeds_trials_to_99": to_99}


def strategies(args) -> list[str]:
    names = [s for s in args.strategies.split(",") if s]
    if args.kt_strategies != "none":
        sys.path.insert(0, str(ROOT / "scripts"))
        try:
            from kernel_tuner_replay import kt_strategies
        except ImportError as exc:
            print(f"Kernel Tuner strategies skipped ({exc}); pip install kernel_tuner")
            return names
        kt = kt_strategies() if args.kt_strategies == "all" else args.kt_strategies.split(",")
        names += [f"kt:{name}" for name in kt]
    return names


def one_tune(spec, problem, target, recording, strategy: str, seed: int, budget: int, workdir: str) -> list[float]:
    if strategy.startswith("kt:"):
        from kernel_tuner_replay import kt_trajectory

        return kt_trajectory(recording, problem.key, strategy[3:], seed, budget, workdir)
    if strategy == "kgen+warm":
        warm = nearest_problem(recording, problem, spec)
        if warm is None:
            raise ValueError("no other problem of this family in the recording")
        return run_strategy(spec, problem, target, recording, "kgen", seed, budget, warm_from=warm)
    return run_strategy(spec, problem, target, recording, strategy, seed, budget)


_RECORDINGS: dict = {}


def _seed(task) -> tuple:
    """One (recording, problem, strategy, seed): (cell, seed, trajectory, seconds), or (cell,
    seed, why it was skipped, seconds)."""
    path, key, strategy, seed, budget, workdir = task
    logging.getLogger("optuna").setLevel(logging.WARNING)
    from kgen.problem import Problem, Target
    from kgen.runners import Recording
    from kgen.registry import get_spec

    recording = _RECORDINGS.get(path) or _RECORDINGS.setdefault(path, Recording.load(path))
    target = Target.h200(recording.device_name() or "NVIDIA H200")
    problem = Problem.from_key(key)
    start = time.perf_counter()
    try:
        traj = one_tune(get_spec(problem.family), problem, target, recording, strategy, seed, budget, workdir)
    except Exception as exc:      # e.g. gp without PyTorch: say so, keep the other rows
        traj = f"{key} {strategy}: skipped ({type(exc).__name__}: {exc})"
    return (path, key, strategy), seed, traj, time.perf_counter() - start


def run_cells(tasks: list[tuple], seeds: int, budget: int, jobs: int):
    """Every seed of every (recording, problem, strategy) cell, spread over ``jobs`` processes;
    yields a cell's summary row (or why it was skipped) as soon as its last seed is done."""
    if jobs > 1:      # one thread a process: PyTorch (gp) would otherwise take every CPU in each
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    pending: dict = {}
    seed_tasks = [(path, key, strategy, seed, budget, workdir)
                  for path, key, strategy, workdir in tasks for seed in range(seeds)]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for cell, seed, traj, seconds in pool.imap_unordered(_seed, seed_tasks):
            done = pending.setdefault(cell, {})
            done[seed] = (traj, seconds)
            if len(done) < seeds:
                continue
            del pending[cell]
            skipped = [t for t, _ in done.values() if isinstance(t, str)]
            if skipped:
                yield skipped[0]
                continue
            path, key, strategy = cell
            row = summarize(key, strategy, [done[s][0] for s in range(seeds)], budget)
            row["recording"] = Path(path).name
            row["seconds"] = round(sum(sec for _, sec in done.values()), 1)     # one CPU's time, all seeds
            yield row


def verdicts(rows: list[dict], budget: int) -> list[dict]:
    """Per space: kgen's trials to 95% against random's and the best Kernel Tuner strategy's.
    A strategy that never got there within the budget counts as budget + 1 in the ratios (a
    lower bound), and its trials_to_95 stays None."""
    out = []
    for space in dict.fromkeys(r["space"] for r in rows):
        mine = {r["strategy"]: r for r in rows if r["space"] == space}
        if "kgen" not in mine:
            continue
        t = {name: r["trials_to_95"] if r["trials_to_95"] is not None else r.get("budget", budget) + 1
             for name, r in mine.items()}
        kt = {name: v for name, v in t.items() if name.startswith("kt:")}
        best_kt = min(kt, key=kt.get) if kt else None
        out.append({"space": space, "kgen_trials_to_95": mine["kgen"]["trials_to_95"],
                    "kgen_trials_to_99": mine["kgen"]["trials_to_99"],
                    "random_trials_to_95": mine["random"]["trials_to_95"] if "random" in mine else None,
                    "random_over_kgen": round(t["random"] / t["kgen"], 2) if "random" in t else None,
                    "best_kt": best_kt, "best_kt_trials_to_95": mine[best_kt]["trials_to_95"] if best_kt else None,
                    "best_kt_over_kgen": round(kt[best_kt] / t["kgen"], 2) if best_kt else None,
                    "kgen_warm_trials_to_95": mine["kgen+warm"]["trials_to_95"] if "kgen+warm" in mine else None})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recording", action="append", required=True, help="JSON lines (repeatable)")
    parser.add_argument("--strategies", default="kgen,kgen+warm,tpe,random,gp,cmaes",
                        help="kgen's samplers; kgen+warm: kgen warm-started from the nearest other "
                             "recorded problem's best")
    parser.add_argument("--kt-strategies", default="all",
                        help="Kernel Tuner strategies in simulation mode (all, none, or names)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--problems", type=int, default=0, help="only the first N problems of each recording")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--out", default="")
    parser.add_argument("--merge", default="", help="also keep this results file's rows of other strategies "
                                                    "(e.g. kgen's samplers run on a larger machine), and its "
                                                    "other fields (provenance) unless given anew")
    parser.add_argument("--missing-only", action="store_true",
                        help="run only the cells (space, strategy) the --merge file has no row of")
    parser.add_argument("--provenance", default="", help="what produced the rows (commits, dates); kept from "
                                                         "the --merge file when not given")
    args = parser.parse_args()

    from kgen.runners import Recording

    workdir = tempfile.mkdtemp(prefix="kgen-bench-search-")
    if args.missing_only and not args.merge:
        parser.error("--missing-only needs --merge")
    have = {(r["space"], r["strategy"]) for r in json.loads(Path(args.merge).read_text())["rows"]} \
        if args.missing_only else set()
    tasks = []
    for path in args.recording:
        keys = sorted(Recording.load(path).problems())[: args.problems or None]
        tasks += [(path, key, strategy, workdir) for key in keys for strategy in strategies(args)
                  if (key, strategy) not in have]
    print(f"{len(tasks)} cells x {args.seeds} seeds on {args.jobs} processes", flush=True)
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_db import cpu_model, slug

    model = cpu_model()
    rows = []
    for result in run_cells(tasks, args.seeds, args.budget, args.jobs):
        if isinstance(result, str):
            print(result)
            continue
        result["machine"] = model      # where it ran: a merged file holds rows of several
        rows.append(result)
        print(json.dumps(result), flush=True)
    machines, kept, recordings = [], {}, list(args.recording)
    if args.merge:
        earlier = json.loads(Path(args.merge).read_text())
        kept = {k: v for k, v in earlier.items() if k not in ("rows", "verdicts")}
        done = {(r["space"], r["strategy"]) for r in rows}
        rows = [r for r in earlier["rows"] if (r["space"], r["strategy"]) not in done] + rows
        machines = list(dict.fromkeys(m for m in [earlier.get("machine"), *earlier.get("merged_from", [])] if m))
        recordings = list(dict.fromkeys([*earlier.get("recordings", []), *recordings]))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    folder = f"{slug(model)}-{cpus}cpu"      # named like bench_db's results
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / folder / "bench_search.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {**kept, "machine": model, "merged_from": machines, "recordings": recordings,
           "budget": kept.get("budget", args.budget),      # a row of another budget says so
           "seeds": args.seeds,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if args.provenance:
        doc["provenance"] = args.provenance
    doc.update(verdicts=verdicts(rows, doc["budget"]), rows=rows)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for v in doc["verdicts"]:
        print(json.dumps(v))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
