"""The tuning driver: Optuna ask -> render -> compile -> measure -> tell -> database.

One driver owns the study; compiling runs ahead in a process pool while the runner
measures. Every outcome is stored, failures too. Configs already in the database for this
problem, device and template are told from there and never run again, so an interrupted
tune resumes where it stopped; the best configs of the nearest tuned problems are tried
first (warm start). What is proposed next is the strategy's (``kgen.samplers``); which
configs exist is the runner's (``Runner.measurable``, wrapped in a ``Domain``).

>>> # tune(spec, problem, target, runner=LocalGPURunner(), db=open_default(), trials=300)
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Callable

import warnings

import optuna

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

from kgen.compile import CompilePool, CompileResult
from kgen.errors import TemplateError
from kgen.knobs import knobs
from kgen.measure.bench import l2_label
from kgen.measure.task import MeasureTask
from kgen.measurement import Measurement, Record, Timing
from kgen.nearest import nearest_problems
from kgen.problem import Problem, Target
from kgen.provenance import provenance_for
from kgen.render import render
from kgen.samplers import DEFAULT_SAMPLER, SAMPLERS, Strategy, check_sampler, domain_for
from kgen.samplers.distance import config_distance
from kgen.space import Config, Space
from kgen.vendor import VENDOR_CONFIG, VENDOR_DIGEST, vendor_record, vendor_task

__all__ = ["tune", "Tuner", "TuneResult", "TuneProgress", "SAMPLERS", "DEFAULT_SAMPLER"]

log = logging.getLogger("kgen.search")
_PENALTY = 10.0       # a failed trial is told as this many times the worst success


@dataclass
class TuneProgress:
    """What a live display shows; sent after each finished trial."""

    problem: Problem
    done: int
    budget: int
    best: Measurement | None
    last: Measurement | None
    failures: Counter
    elapsed_s: float
    in_flight: int = 0
    vendor_ms: float | None = None   # the vendor candidate's time, when measured


@dataclass
class TuneResult:
    problem: Problem
    best: Measurement | None
    measured: int                  # new measurements made by this run
    known: int                     # answered from the database
    failures: Counter
    seconds: float
    compile_s: float = 0.0
    measure_s: float = 0.0
    trials: list[Measurement] = field(default_factory=list)
    vendor: Measurement | None = None   # the vendor candidate (cuBLAS), measured or stored for this problem


def _distributions(space: Space) -> dict[str, optuna.distributions.BaseDistribution]:
    return {p.name: optuna.distributions.CategoricalDistribution(p.choices) for p in space.params}


class Tuner:
    """Tunes one problem of one family on one target."""

    def __init__(self, spec, problem: Problem, target: Target, runner, db, sampler: str = DEFAULT_SAMPLER,
                 seed: int | None = None, pool: CompilePool | None = None, warm_start: bool = True,
                 timing: Timing | None = None):
        strategy = check_sampler(sampler)
        shared = spec.record_problem(problem)
        if shared != problem:
            log.info("%s: tuning %s, whose records serve it", problem.key, shared.key)
        problem = shared
        self.spec, self.problem, self.target, self.runner, self.db = spec, problem, target, runner, db
        self.sampler_name = sampler
        self.seed = knobs.seed if seed is None else seed
        self.rng = random.Random(self.seed)
        self.pool = pool
        self.warm_start = warm_start
        self.timing = timing or Timing(warmup=knobs.bench_warmup, runs=max(20, knobs.bench_runs),
                                       l2=l2_label())
        self.space = spec.space(problem, target)
        self.digest = spec.template_digest()
        self.provenance = provenance_for(target, self.digest)
        self.known: dict[str, Measurement] = {}
        self.failures: Counter = Counter()
        self._queue: list[dict] = []
        self.domain = domain_for(self.space, runner.measurable(problem.key))   # what the runner can answer
        self._worst_ms = 1.0
        self.strategy: Strategy = strategy(self)

    # ---- study set-up -------------------------------------------------------------------
    def _load_known(self) -> None:
        for r in self.db.records(self.spec.family, self.problem.key, self.target.name, self.digest):
            if self.space.trusted(r.measurement.config) is None:   # a shared file's invalid values
                log.warning("%s: record %r is not a valid config of the space; ignored",
                            self.problem.key, r.measurement.config_name)
                continue
            self.known[r.measurement.config_name] = r.measurement
            if r.measurement.ok:
                self._worst_ms = max(self._worst_ms, r.measurement.time_ms)

    def _vendor(self) -> Measurement | None:
        """The vendor candidate of this problem: stored, else measured now and stored (once per
        problem, device and timing); None when off (KGEN_VENDOR=0), absent from a replay, or
        when the family has no library baseline."""
        if not knobs.vendor or not self.domain.admits(VENDOR_CONFIG):
            return None
        stored = self.db.best(self.spec.family, self.problem.key, self.target.name, VENDOR_DIGEST)
        if stored is not None:
            return stored.measurement
        try:
            m = self.runner.submit(vendor_task(self.spec, self.problem, self.timing, self.seed)).result()
        except Exception as exc:        # the candidate is optional: the tune goes on without it
            log.warning("the vendor candidate of %s was not measured: %s", self.problem.key, exc)
            return None
        if m.failure is not None and m.failure.kind == "constraints":
            return None                 # no library call runs this problem: nothing to store
        self.db.commit([vendor_record(self.spec.family, m, self.provenance)])
        return m if m.ok else None

    def _value(self, m: Measurement) -> float:
        return m.time_ms if m.ok else _PENALTY * self._worst_ms

    def _tell_known(self, study: optuna.Study, dists) -> None:
        for m in self.known.values():
            if set(m.config) == set(dists) and all(m.config[k] in dists[k].choices for k in dists):
                study.add_trial(optuna.trial.create_trial(params=dict(m.config), distributions=dists,
                                                          value=self._value(m)))

    def _first_configs(self) -> list[dict]:
        """Configs to try before any other proposal: the nearest tuned problems' bests (warm
        start), then the strategy's own first ones (``Strategy.first``: for kgen, the configs
        the family's device model ranks first; for exhaustive, those and then everything). A
        first config the runner cannot measure (a replay of a recording made before the space
        grew) stands for the nearest one it can."""
        first: list[dict] = []
        if self.warm_start:
            first.extend(self._warm_start_configs())
        first.extend(self.strategy.first())
        seen, out = set(self.known), []
        for values in map(self.space.complete, first):    # stored configs may predate a parameter
            if not self.space.is_valid(values):
                continue
            if not self.domain.admits(self.space.make(values).name):
                values = self._nearest_fresh(values, seen)
                if values is None:
                    continue
            name = self.space.make(values).name
            if name not in seen:
                seen.add(name)
                out.append(values)
        return out

    def _warm_start_configs(self, neighbours: int = 3) -> list[dict]:
        """Best configs of the nearest tuned problems: this compute capability's first, then
        any device's (the same problem tuned on another device counts as nearest)."""
        out: list[dict] = []
        for policy in ("arch", "any"):
            for values in self._nearest_bests(policy, neighbours):
                if values not in out:
                    out.append(values)
            if len(out) >= neighbours:
                break
        return out

    def nearest_problems(self, policy: str) -> list[str]:
        """Keys of the tuned problems of this family (under ``policy``) within
        ``search_warm_distance``, nearest first; this problem's own key among them (tuned on
        another device, it is the nearest). A farther problem's best and model mislead more
        than they help: on the extended SIMT recording (scripts/bench_search.py, 20 seeds, the
        model from the 6th trial), 128x4096x4096 warm-started from 1000^3 (4.1 away) reached
        95 % of the optimum in 37 trials against 12 cold."""
        keys = self.db.problems(self.spec.family, self.target.name, self.digest, policy=policy, cc=self.provenance.cc)
        return nearest_problems(self.problem, keys, self.spec.shape_params, within=knobs.search_warm_distance)

    def records(self, problem_key: str) -> list[Record]:
        """The stored records of ``problem_key`` of this family, device and template."""
        return self.db.records(self.spec.family, problem_key, self.target.name, self.digest)

    def _nearest_bests(self, policy: str, neighbours: int) -> list[dict]:
        out = []
        for key in self.nearest_problems(policy):
            best = self.db.best(self.spec.family, key, self.target.name, self.digest, policy=policy,
                                cc=self.provenance.cc)
            if best is not None and best.measurement.config_name not in self.known:
                out.append(dict(best.measurement.config))
            if len(out) >= neighbours:
                break
        return out

    # ---- proposing ----------------------------------------------------------------------
    def unmeasured(self, configs, in_flight: set[str]) -> list[Config]:
        return [c for c in configs if c.name not in self.known and c.name not in in_flight]

    def _nearest_fresh(self, values: dict, in_flight: set[str]) -> dict | None:
        fresh = self.unmeasured(self.domain.configs(), in_flight)
        if not fresh:
            return None
        return min(fresh, key=lambda c: (config_distance(self.space, values, c.as_dict()), c.name)).as_dict()

    def _ask(self, study: optuna.Study, dists, in_flight: set[str]) -> tuple[optuna.Trial, Config] | None:
        wasted = 0
        while True:
            queued = False
            while self._queue and not queued:
                values = self._queue.pop(0)
                name = self.space.make(values).name
                if name not in self.known and name not in in_flight:
                    study.enqueue_trial(values)
                    queued = True
            if not queued:
                proposed = self.strategy.propose(in_flight, wasted)
                if proposed is None:
                    return None   # the strategy has proposed everything it will
                if proposed:
                    self._queue = proposed
                    continue
            trial = study.ask(dists)
            values = trial.params
            config = self.space.make(values)
            broken = self.space.violations(values)
            if not broken and not self.domain.admits(config.name):
                # the runner cannot answer the proposal (a replay: it was not recorded), so measure
                # the nearest config it can instead (the proposal itself is no evidence either way)
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                snapped = self._nearest_fresh(values, in_flight)
                if snapped is None:
                    return None
                study.enqueue_trial(snapped)
                continue
            if broken:
                self.failures["constraints"] += 1
                study.tell(trial, _PENALTY * self._worst_ms)
            elif config.name in self.known:
                study.tell(trial, self._value(self.known[config.name]))
            elif config.name in in_flight:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                return trial, config
            wasted += 1
            if wasted >= self.domain.patience:
                fresh = self.unmeasured(self.domain.configs(), in_flight)
                if not fresh:
                    return None
                study.enqueue_trial(self.rng.choice(fresh).as_dict())
                wasted = 0

    # ---- the loop -----------------------------------------------------------------------
    def run(self, trials: int, timeout_s: float | None = None,
            on_progress: Callable[[TuneProgress], None] | None = None) -> TuneResult:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._load_known()
        vendor = self._vendor()
        dists = _distributions(self.space)
        self._queue = self._first_configs()
        n_startup = min(len(self._queue), 16) + len(self.known)
        study = optuna.create_study(direction="minimize",
                                    sampler=self.strategy.sampler(self.seed, max(n_startup, 10)))
        self._tell_known(study, dists)
        start = time.perf_counter()   # the time budget is the search's, set-up excluded

        budget = self.domain.budget(trials)
        done_before = len(self.known)
        new: list[Measurement] = []
        inflight: dict[Future, tuple[str, optuna.Trial, Config, float]] = {}
        window = max(2 * self.runner.slots, min(knobs.compile_workers, 16)) if self.runner.needs_binaries \
            else self.runner.slots
        own_pool = self.pool is None and self.runner.needs_binaries
        pool = self.pool or (CompilePool() if self.runner.needs_binaries else None)
        compile_s = measure_s = 0.0
        template_failures = []
        exhausted = False
        try:
            while True:
                timed_out = timeout_s is not None and time.perf_counter() - start >= timeout_s
                while (not timed_out and not exhausted and len(inflight) < window
                       and done_before + len(new) + len(inflight) < budget):
                    names = {c.name for _, _, c, _ in inflight.values()}
                    asked = self._ask(study, dists, names)
                    if asked is None:
                        exhausted = True
                        break
                    trial, config = asked
                    inflight[self._start(pool, config)] = ("compile", trial, config, time.perf_counter())
                if not inflight:
                    break
                finished, _ = wait(list(inflight), timeout=1.0, return_when=FIRST_COMPLETED)
                for fut in finished:
                    stage, trial, config, t0 = inflight.pop(fut)
                    if stage == "compile":
                        result: CompileResult = fut.result()
                        compile_s += result.seconds
                        if result.failure is None:
                            inflight[self.runner.submit(self._task(config, result))] = ("measure", trial, config, time.perf_counter())
                            continue
                        if result.failure.detail.startswith("template"):
                            template_failures.append(result.failure.detail)
                        m = Measurement(config_name=config.name, config=config.as_dict(),
                                        problem_key=self.problem.key, failure=result.failure,
                                        timing=self.timing, compile_s=result.seconds)
                    else:
                        m = fut.result()
                        measure_s += m.measure_s
                    self._finish(study, trial, m)
                    new.append(m)
                    if template_failures and len(template_failures) == len(new) >= min(4, budget):
                        raise TemplateError(f"every config of {self.spec.family} so far failed to compile: "
                                            f"{template_failures[0][:1500]}",
                                            remedy="fix the template; the source of each failure is saved "
                                                   "(path above)")
                    if on_progress:
                        on_progress(TuneProgress(self.problem, done_before + len(new), budget, self.best(),
                                                 m, self.failures, time.perf_counter() - start, len(inflight),
                                                 vendor.time_ms if vendor else None))
        finally:
            for fut in inflight:
                fut.cancel()
            if own_pool:
                pool.close()
        return TuneResult(self.problem, self.best(), len(new), done_before, self.failures,
                          time.perf_counter() - start, compile_s, measure_s, new, vendor)

    def _start(self, pool: CompilePool | None, config: Config) -> Future:
        if pool is None:   # the runner needs no binary (replay)
            fut: Future = Future()
            fut.set_result(CompileResult(None, None))
            return fut
        return pool.submit(render(self.spec, self.problem, config, self.target, self.space))

    def _task(self, config: Config, result: CompileResult) -> MeasureTask:
        return MeasureTask.of(self.spec, self.problem, config, result, timing=self.timing, seed=self.seed)

    def _finish(self, study: optuna.Study, trial: optuna.Trial, m: Measurement) -> None:
        if m.ok:
            self._worst_ms = max(self._worst_ms, m.time_ms)
        else:
            self.failures[m.failure.kind] += 1
        self.known[m.config_name] = m
        study.tell(trial, self._value(m))
        self.db.commit([Record(self.spec.family, m, self.provenance)])

    def best(self) -> Measurement | None:
        ok = [m for m in self.known.values() if m.ok]
        return min(ok, key=lambda m: (m.time_ms, m.config_name)) if ok else None


def measure_rivals(rivals, target: Target, runner, db, trials: int, sampler: str = DEFAULT_SAMPLER,
                   seed: int | None = None) -> list[TuneResult]:
    """The first ``trials`` configs of each (spec, problem) of ``rivals`` (``KernelSpec.rivals``:
    the other families a tuned request may run on), the model's picks first (no warm start), and
    the vendor candidate where it is on, measured and stored like a tune's, so that dispatch ranks
    every family by measured time and not one measured best against the others' predictions.
    Stored configs count, so measuring again adds nothing. A rival the runner can measure nothing
    of (a replay that did not record it) is left out."""
    results = []
    for spec, problem in rivals if trials >= 1 else ():
        shared = spec.record_problem(problem)
        if runner.measurable(shared.key) == {}:
            continue
        results.append(tune(spec, shared, target, runner, db, trials=trials, sampler=sampler, seed=seed,
                            warm_start=False))
    return results


def tune(spec, problem: Problem, target: Target, runner, db, trials: int = 100, timeout_s: float | None = None,
         sampler: str = DEFAULT_SAMPLER, seed: int | None = None, on_progress=None, pool: CompilePool | None = None,
         warm_start: bool = True) -> TuneResult:
    """Tune ``problem`` until ``trials`` configs are measured for it (stored ones count);
    ``sampler``: a registered strategy's name (``kgen.samplers``)."""
    tuner = Tuner(spec, problem, target, runner, db, sampler=sampler, seed=seed, pool=pool, warm_start=warm_start)
    return tuner.run(trials, timeout_s, on_progress)
