"""Kernel Tuner's search strategies on recorded measurements, in Kernel Tuner's simulation mode.

For one problem of a kgen recording this writes a Kernel Tuner cache file (the JSON a tune with
``cache=...`` writes) holding every recorded config, and runs ``kernel_tuner.tune_kernel`` with
``simulation_mode=True`` on it: Kernel Tuner compiles and runs nothing, it looks every time up
in the cache. The search space is restricted to exactly the recorded configs.

    from kernel_tuner_replay import kt_strategies, kt_trajectory
    traj = kt_trajectory(recording, problem_key, "genetic_algorithm", seed=0, budget=200, workdir=tmp)

Smoke run (first problem of the recording, every strategy, median over seeds):

    python3 scripts/kernel_tuner_replay.py --recording tests/data/h200_gemm_wgmma_bf16_space.jsonl.gz \
        --budget 100 --seeds 3
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
import random
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# kgen failure kinds -> the ErrorConfig class name Kernel Tuner stores under "__error__"
_KT_ERROR = {"constraints": "InvalidConfig", "compile": "CompilationFailedConfig",
             "runtime": "RuntimeFailedConfig", "correctness": "RuntimeFailedConfig",
             "timeout": "RuntimeFailedConfig"}
_DUMMY_SOURCE = "__global__ void kgen_replay() {}  // never compiled: simulation mode\n"


def _median(runs) -> float:
    """The recorded median, as bench_search takes it (the upper median for an even count)."""
    runs = sorted(runs)
    return runs[len(runs) // 2]


@dataclass
class _Problem:
    kernel_name: str
    problem_size: list[int]
    keys: list[str]                       # tune_params_keys, in the recording's order
    tune_params: dict[str, list]          # sorted values seen per parameter
    configs: frozenset                    # the recorded configs, as value tuples in `keys` order
    time_of: dict[tuple, float | None]    # recorded median (ms) per config; None = failed
    optimum: float                        # min recorded median over ok configs
    cache_doc: dict                       # the Kernel Tuner cache file's contents
    digest: str
    projections: dict = field(default_factory=dict)   # for _restriction, kept across tunes


_PROBLEMS: dict[tuple[int, str], tuple[object, _Problem]] = {}   # holds the recording: its id stays its own
_WRITTEN: dict[tuple[str, str], Path] = {}


def _problem(recording, problem_key: str) -> _Problem:
    memo = (id(recording), problem_key)
    if memo in _PROBLEMS and _PROBLEMS[memo][0] is recording:
        return _PROBLEMS[memo][1]
    measurements = [m for (key, _), m in sorted(recording.entries.items()) if key == problem_key]
    if not measurements:
        raise KeyError(f"problem {problem_key!r} is not in the recording")
    keys = list(measurements[0].config)
    for m in measurements:
        if list(m.config) != keys and sorted(m.config) != sorted(keys):
            raise ValueError(f"{m.config_name}: parameters {sorted(m.config)} differ from {sorted(keys)}")
    tune_params = {k: sorted({m.config[k] for m in measurements}) for k in keys}

    fields = dict(part.split("=", 1) for part in problem_key.split("|")[1:] if "=" in part)
    try:
        problem_size = [int(fields[d]) for d in ("m", "n", "k")]
    except (KeyError, ValueError):
        problem_size = [1]
    kernel_name = "kgen_" + problem_key.split("|")[0]

    cache, time_of = {}, {}
    for m in measurements:
        values = tuple(m.config[k] for k in keys)
        entry = {k: m.config[k] for k in keys}
        if m.ok:
            runs = [float(t) for t in m.times_ms]
            time_of[values] = _median(runs)
            entry.update(time=time_of[values], times=runs)
        else:
            time_of[values] = None
            entry["__error__"] = _KT_ERROR.get(m.failure.kind if m.failure else "runtime", "RuntimeFailedConfig")
        entry.update(compile_time=1e3 * float(m.compile_s or 0.0), verification_time=0,
                     benchmark_time=1e3 * float(m.measure_s or 0.0), strategy_time=0, framework_time=0,
                     timestamp="1970-01-01 00:00:00+00:00")
        cache[",".join(str(v) for v in values)] = entry
    if len(cache) != len(measurements):
        raise ValueError(f"{problem_key}: two recorded configs have the same parameter values")
    ok_times = [t for t in time_of.values() if t is not None]
    doc = {"device_name": recording.device_name() or "recorded", "kernel_name": kernel_name,
           "problem_size": problem_size, "tune_params_keys": keys, "tune_params": tune_params,
           "objective": "time", "cache": cache}
    text = json.dumps(doc, sort_keys=False)
    prob = _Problem(kernel_name, problem_size, keys, tune_params, frozenset(time_of), time_of,
                    min(ok_times) if ok_times else float("nan"), doc,
                    hashlib.sha256(text.encode()).hexdigest()[:16])
    _PROBLEMS[memo] = (recording, prob)
    return prob


def _cache_file(prob: _Problem, workdir: Path) -> Path:
    """Write the problem's Kernel Tuner cache file into workdir (once)."""
    workdir = Path(workdir).resolve()
    memo = (str(workdir), prob.digest)
    path = _WRITTEN.get(memo)
    if path is not None and path.is_file():
        return path
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"kt_cache_{prob.kernel_name}_{prob.digest}.json"
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")   # bench_search's processes share workdir
    tmp.write_text(json.dumps(prob.cache_doc, indent=0))
    tmp.replace(path)
    _WRITTEN[memo] = path
    return path


def _restriction(prob: _Problem):
    """The restriction that passes exactly the recorded configs.

    A python-constraint ``FunctionConstraint`` over all parameters (Kernel Tuner 1.x takes one
    as a restriction and hands it to its solver unchanged). With ``assigned=False`` the solver
    also asks it about partial assignments (unassigned parameters are ``constraint.Unassigned``),
    so it can reject a partial config that no recorded config extends: the space is built by
    walking the recorded configs' prefixes instead of the cartesian product (1.3M configs for
    the simt spaces: 6-7 s a tune with a plain callable, which only sees complete configs). The
    accepted set is the same: a complete config passes iff it was recorded.
    """
    from constraint import FunctionConstraint, Unassigned

    configs = prob.configs
    projections = prob.projections         # positions assigned -> their values in recorded configs

    def recorded(*values):
        if Unassigned not in values:
            return values in configs
        mask = tuple(i for i, v in enumerate(values) if v is not Unassigned)
        seen = projections.get(mask)
        if seen is None:
            seen = projections[mask] = {tuple(c[i] for i in mask) for c in configs}
        return tuple(values[i] for i in mask) in seen
    return FunctionConstraint(recorded, assigned=False)


# Kernel Tuner 1.5.0 strategies that ran, deterministically per seed, in simulation mode on every
# problem of h200_gemm_wgmma_bf16_space (687-1336 configs), h200_gemm_mma_bf16_space and
# h200_gemm_f32_simt_space (400-config samples of 0.3M-1.3M-config products), budget 200. Caveats:
#   diff_evo raises IndexError on a space smaller than its population, 16 x the number of
#     parameters with more than one value: a 75-config problem of the earlier wgmma recording
#     (80 > 75; the template of 2026-11-30), and 9 of the 10
#     problems of the older h200_gemm_f32_simt.jsonl.gz (30-150 configs, 11-12 parameters).
#   minimize, basinhopping, dual_annealing (scipy's continuous optimizers, each point snapped to
#     the nearest parameter values) mostly land on unrecorded configs, which Kernel Tuner answers
#     InvalidConfig without counting them (minimize on the first simt problem: 37 of 39 points),
#     and stop after 1-4 configs on the sparse 400-config samples.
#   nsga2, nsga3 need the stall guard (STALL_LIMITS) to end when the budget exceeds what they reach.
# Left out:
#   brute_force      - not a search: walks the space in order; rejects the max_fevals option.
#   greedy_ils       - its random walk crashes (TypeError: 'NoneType' object is not iterable) on a
#                      config with no Hamming neighbour in the space, which the sparse 400-config
#                      samples are full of: 31 of 32 tunes failed (simt and mma, 4 seeds a problem;
#                      it runs on every wgmma problem).
#   skopt            - needs scikit-optimize, not installed.
#   pyatf_strategies - needs pyATF, not installed.
_STRATEGIES = [
    "random_sample", "genetic_algorithm", "simulated_annealing", "greedy_mls", "ordered_greedy_mls",
    "mls", "pso", "firefly_algorithm", "diff_evo", "bayes_opt", "basinhopping", "dual_annealing",
    "minimize", "hybrid_vndx", "adaptive_tabu_greywolf", "nsga2", "nsga3",
]


def kt_strategies() -> list[str]:
    """Kernel Tuner strategy names that run in simulation mode on a space restricted to the
    recorded configs."""
    return list(_STRATEGIES)


# A strategy that stops finding configs it has not evaluated keeps going until the budget is
# spent, which never happens when the budget is at least what it can still reach: nsga2 and
# nsga3 loop forever at max_fevals >= the space size (every wgmma problem at budget 200). After
# this many evaluations in a row that were all repeats (cache hits, which cost no budget) the
# tune is stopped the way Kernel Tuner stops one whose budget is spent (StopCriterionReached):
# the trajectory ends there and nothing already evaluated is lost. Longest runs of repeats seen
# in tunes that end by themselves (budget 200, 2 seeds, wgmma/mma/simt problems): pso 6693,
# adaptive_tabu_greywolf 938, diff_evo 576, greedy_mls 399, basinhopping 311, nsga2 303,
# nsga3 95. The general limit is above pso's; nsga's is ~3x theirs, lower because a stalled
# nsga tune costs ~1.6 ms a repeat and stalls, finds one more config, stalls again: on the
# first wgmma problem at budget 200 a tune takes ~5 s with 1000 (108 configs found), 7-11 s with
# 2000 (108-110), 30-45 s with 20000.
STALL_LIMIT = 10000
STALL_LIMITS = {"nsga2": 1000, "nsga3": 1000}


class _StallGuard:
    """The runner Kernel Tuner built, stopping the tune after STALL_LIMIT repeats in a row."""

    def __init__(self, runner, limit: int):
        self._runner, self._limit, self.idle, self.longest_idle = runner, limit, 0, 0

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def run(self, parameter_space, tuning_options):
        from kernel_tuner.util import StopCriterionReached

        before = tuning_options.budget.get_evaluations_spent()
        results = self._runner.run(parameter_space, tuning_options)
        if tuning_options.budget.get_evaluations_spent() > before:
            self.idle = 0
        else:
            self.idle += len(parameter_space)
            self.longest_idle = max(self.longest_idle, self.idle)
            if self.idle >= self._limit:
                raise StopCriterionReached(f"{self.idle} evaluations in a row found no new config")
        return results


class _Strategy:
    """Kernel Tuner's strategy `name`, handed to tune_kernel as a user-defined strategy (an
    object with .tune) so that its runner can be wrapped in a _StallGuard. tune_kernel treats it
    as it treats the named strategy; tuning_options.strategy gets the name back (pymoo reads it)."""

    def __init__(self, name: str, stall_limit: int):
        self.name, self.stall_limit, self.guard = name, stall_limit, None

    def tune(self, searchspace, runner, tuning_options):
        from kernel_tuner.interface import strategy_map

        tuning_options["strategy"] = self.name
        self.guard = _StallGuard(runner, self.stall_limit)
        return strategy_map[self.name].tune(searchspace, self.guard, tuning_options)


@contextlib.contextmanager
def _seeded_latin_hypercube(seed: int):
    """Kernel Tuner builds scipy's LatinHypercube without a seed (Searchspace.get_LHS_sample, used
    by diff_evo, and bayes_opt's initial sample), so scipy seeds it from the OS and the tune is
    not reproducible. While this is active, a LatinHypercube made without rng/seed gets one from
    a generator seeded with `seed`."""
    import numpy as np
    from scipy.stats import qmc

    modules = [qmc]
    bayes_opt = sys.modules.get("kernel_tuner.strategies.bayes_opt")
    if bayes_opt is not None:
        modules.append(bayes_opt)
    original = qmc.LatinHypercube
    source = np.random.default_rng(seed)

    def latin_hypercube(*args, **kwargs):
        if kwargs.get("rng") is None and kwargs.get("seed") is None:
            kwargs.pop("seed", None)
            kwargs["rng"] = np.random.default_rng(int(source.integers(2**63)))
        return original(*args, **kwargs)

    saved = [(m, m.LatinHypercube) for m in modules]
    for m in modules:
        m.LatinHypercube = latin_hypercube
    try:
        yield
    finally:
        for m, value in saved:
            m.LatinHypercube = value


def kt_run(recording, problem_key: str, strategy: str, seed: int, budget: int, workdir: str | Path,
           strategy_options: dict | None = None, stall_limit: int | None = None):
    """Kernel Tuner's raw (results, env) for one simulated tune, and the stall guard."""
    import numpy as np
    import kernel_tuner
    from kernel_tuner.interface import strategy_map

    prob = _problem(recording, problem_key)
    cache = _cache_file(prob, Path(workdir))
    options = {"max_fevals": int(budget)}
    options.update(strategy_options or {})
    if strategy not in strategy_map:
        raise ValueError(f"unknown Kernel Tuner strategy {strategy!r}")
    if stall_limit is None:
        stall_limit = STALL_LIMITS.get(strategy, STALL_LIMIT)
    wrapped = _Strategy(strategy, stall_limit)
    sink = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        warnings.simplefilter("ignore")
        level = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            strategy_map[strategy].tune    # import it (lazily imported) before patching its module
            with _seeded_latin_hypercube(seed):
                random.seed(seed)
                np.random.seed(seed % 2**32)
                results, env = kernel_tuner.tune_kernel(
                    prob.kernel_name, _DUMMY_SOURCE, prob.problem_size, [], dict(prob.tune_params),
                    restrictions=[_restriction(prob)], strategy=wrapped, strategy_options=options,
                    simulation_mode=True, cache=str(cache), verbose=False, quiet=True, seed=seed)
        finally:
            logging.disable(level)
    return results, env, wrapped.guard


def kt_trajectory(recording, problem_key: str, strategy: str, seed: int, budget: int,
                  workdir: str | Path) -> list[float]:
    """Quality after each unique config Kernel Tuner's `strategy` evaluated, in evaluation order:
    the recorded optimum over the recorded median of the best config seen so far (0.0 until a
    config that did not fail has been seen)."""
    prob = _problem(recording, problem_key)
    results, _, _ = kt_run(recording, problem_key, strategy, seed, budget, workdir)
    seen, best, out = set(), float("inf"), []
    for r in results:
        values = tuple(r[k] for k in prob.keys)
        if values in seen:
            continue
        if values not in prob.configs:
            # not recorded, so not in the space: Kernel Tuner answers InvalidConfig without running
            # it or charging the budget (a constraint-aware strategy skips the space check)
            if r.get("__error__") is None:
                raise RuntimeError(f"{strategy} got a time for {values}, which is not a recorded config")
            continue
        seen.add(values)
        t = prob.time_of[values]
        if "__error__" not in r and t is not None and t < best:
            best = t
        out.append(prob.optimum / best if best < float("inf") else 0.0)
        if len(out) >= budget:
            break
    return out


def main(argv=None) -> int:
    import tempfile

    from bench_search import first_reaching as _first_reaching
    from kgen.runners import Recording

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recording", required=True)
    ap.add_argument("--problem", help="problem key (default: the first of the recording)")
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--strategies", nargs="*", help="default: kt_strategies()")
    args = ap.parse_args(argv)

    rec = Recording.load(args.recording)
    key = args.problem or sorted(rec.problems())[0]
    print(f"problem {key}: {sum(1 for k, _ in rec.entries if k == key)} recorded configs, "
          f"budget {args.budget}, seeds {args.seeds}")
    print(f"{'strategy':<24} {'to_95':>7} {'to_99':>7} {'trials':>7} {'s/call':>7}")
    with tempfile.TemporaryDirectory() as workdir:
        kt_run(rec, key, "random_sample", 0, 1, workdir)   # imports and the cache file, off the clock
        for strategy in args.strategies or kt_strategies():
            start = time.perf_counter()
            try:
                trajs = [kt_trajectory(rec, key, strategy, s, args.budget, workdir) for s in range(args.seeds)]
            except Exception as exc:  # noqa: BLE001 - a smoke run reports and goes on
                print(f"{strategy:<24} failed: {type(exc).__name__}: {exc}")
                continue
            per_call = (time.perf_counter() - start) / args.seeds

            def med(level):
                hits = [_first_reaching(t, level) for t in trajs]
                hits = [h for h in hits if h is not None]
                return statistics.median(hits) if len(hits) * 2 > len(trajs) else None
            print(f"{strategy:<24} {str(med(0.95)):>7} {str(med(0.99)):>7} "
                  f"{statistics.median(len(t) for t in trajs):>7} {per_call:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
