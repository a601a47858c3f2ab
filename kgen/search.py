"""The tuning driver: Optuna ask -> render -> compile -> measure -> tell -> database.

One driver owns the study; compiling runs ahead in a process pool while the runner
measures. Every outcome is stored, failures too. Configs already in the database for this
problem, device and template are told from there and never run again, so an interrupted
tune resumes where it stopped; the best configs of the nearest tuned problems are tried
first (warm start).

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
from kgen.errors import KgenError, TemplateError
from kgen.knobs import knobs
from kgen.measure.bench import l2_label
from kgen.measure.task import MeasureTask
from kgen.measurement import Measurement, Record, Timing
from kgen.problem import Problem, Target
from kgen.provenance import provenance_for
from kgen.render import render
from kgen.search_model import AdditiveModel
from kgen.space import Config, Space
from kgen.vendor import VENDOR_CONFIG, VENDOR_DIGEST, vendor_record, vendor_task

log = logging.getLogger("kgen.search")
SAMPLERS = ("kgen", "tpe", "random", "gp", "cmaes", "exhaustive")
DEFAULT_SAMPLER = "kgen"
_PENALTY = 10.0       # a failed trial is told as this many times the worst success
_MAX_WASTED_ASKS = 64  # invalid or repeated proposals in a row before a random valid config


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


def make_sampler(name: str, seed: int, n_startup: int) -> optuna.samplers.BaseSampler:
    if name in ("tpe", "kgen"):
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup, constant_liar=True,
                                          multivariate=True)
    if name in ("random", "exhaustive"):
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise KgenError("the gp sampler needs PyTorch", remedy="pip install torch, or use --sampler tpe") from None
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup)
    if name == "cmaes":
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise KgenError("the cmaes sampler needs the cmaes package",
                            remedy="pip install cmaes, or use --sampler tpe") from None
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup,
                                            independent_sampler=optuna.samplers.TPESampler(seed=seed),
                                            warn_independent_sampling=False)
    raise KgenError(f"unknown sampler {name!r}", remedy=f"use one of {', '.join(SAMPLERS)}")


def _summed_over_params(space: Space, a: dict, b: dict, cost) -> float:
    """``cost(places, choices)`` summed over the parameters where ``a`` and ``b`` differ:
    ``places`` apart in the parameter's ordered ``choices``."""
    total = 0.0
    for p in space.params:
        if len(p.choices) > 1 and a[p.name] != b[p.name]:
            total += cost(abs(p.choices.index(a[p.name]) - p.choices.index(b[p.name])), len(p.choices))
    return total


def config_distance(space: Space, a: dict, b: dict) -> float:
    """How far apart two configs are: per parameter, the distance of their positions in its
    ordered choices over the span (0 same .. 1 ends), summed."""
    return _summed_over_params(space, a, b, lambda places, n: places / (n - 1))


def move_distance(space: Space, a: dict, b: dict) -> float:
    """How far apart two configs are in moves: per parameter, the places apart of their values
    in its ordered choices, each place counting one plus its share of the span (1/(choices - 1)),
    summed. Every config one move away is nearer than any two moves away; among one-move
    neighbours, a step of a many-valued parameter (a tile size) comes before a switch of a
    two-valued one."""
    return _summed_over_params(space, a, b, lambda places, n: places * (1 + 1 / (n - 1)))


def _distributions(space: Space) -> dict[str, optuna.distributions.BaseDistribution]:
    return {p.name: optuna.distributions.CategoricalDistribution(p.choices) for p in space.params}


class Tuner:
    """Tunes one problem of one family on one target."""

    def __init__(self, spec, problem: Problem, target: Target, runner, db, sampler: str = DEFAULT_SAMPLER,
                 seed: int | None = None, pool: CompilePool | None = None, warm_start: bool = True,
                 timing: Timing | None = None):
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
        self._valid: list[Config] | None = None
        self._queue: list[dict] = []
        self._allowed = runner.measurable(problem.key)
        self._worst_ms = 1.0
        self._prior: AdditiveModel | None | bool = False    # the neighbour's model; False: not looked up yet

    # ---- study set-up -------------------------------------------------------------------
    def _valid_configs(self) -> list[Config]:
        if self._valid is None:
            if self._allowed is not None:   # a replay: only the recorded configs exist
                self._valid = [self.space.make(v) for v in self._allowed.values() if self.space.is_valid(v)]
            else:
                self._valid = self.space.configs()
        return self._valid

    def _measurable(self, config: Config) -> bool:
        return self._allowed is None or config.name in self._allowed

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
        if not knobs.vendor or (self._allowed is not None and VENDOR_CONFIG not in self._allowed):
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
        """Configs to try before the sampler's own proposals: the nearest tuned problems' bests
        (warm start); for the kgen sampler, then the configs the family's device model ranks
        first (``model_picks``, ``KGEN_SEARCH_MODEL_PICKS`` of them); for exhaustive, then
        everything. Other samplers run as themselves. A first config the runner cannot
        measure (a replay of a recording made before the space grew) stands for the nearest
        one it can."""
        first: list[dict] = []
        if self.warm_start:
            first.extend(self._warm_start_configs())
        if self.sampler_name in ("kgen", "exhaustive"):
            try:
                picks = self.spec.model_picks(self.problem, self.target, knobs.search_model_picks)
                first.extend(c.as_dict() for c in picks)
            except KgenError:
                pass
        if self.sampler_name == "exhaustive":
            first.extend(c.as_dict() for c in self._valid_configs())
        seen, out = set(self.known), []
        for values in map(self.space.complete, first):    # stored configs may predate a parameter
            if not self.space.is_valid(values):
                continue
            if not self._measurable(self.space.make(values)):
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

    def _nearest_problems(self, policy: str) -> list[str]:
        """Keys of the tuned problems of this family (under ``policy``) within
        ``search_warm_distance``, nearest first; this problem's own key among them (tuned on
        another device, it is the nearest). A farther problem's best and model mislead more
        than they help: on the extended SIMT recording (scripts/bench_search.py, 20 seeds, the
        model from the 6th trial), 128x4096x4096 warm-started from 1000^3 (4.1 away) reached
        95 % of the optimum in 37 trials against 12 cold."""
        shape = tuple(self.spec.shape_params)
        keys = self.db.problems(self.spec.family, self.target.name, self.digest, policy=policy, cc=self.provenance.cc)
        ranked = []
        for key in keys:
            try:
                other = Problem.from_key(key)
            except (ValueError, KgenError):
                continue
            d = self.problem.distance(other, shape)
            if d <= knobs.search_warm_distance:
                ranked.append((d, key))
        return [key for _, key in sorted(ranked)]

    def _neighbour_prior(self) -> AdditiveModel | None:
        """The additive model fitted to the nearest tuned problem's measurements on this
        device and template (at least ``search_model_after`` of them): a warm start's estimate
        of this problem's times until its own trials can fit one. None without such a problem.
        Measured (scripts/bench_search.py, 20 seeds, kgen+warm after a 50-trial kgen tune of
        the neighbour): at weight 0.1, wgmma 1000^3 reached 99 % in 4 trials instead of 7 and
        mma 128x4096x4096 95 % in 16 instead of 17, and no space took more; at 0.3 and 1, mma 1000^3
        took 85-86 instead of 18 (its one config within 95 % lies where the neighbour's model
        points away), though 1 took mma 128x4096x4096 to 8."""
        if self._prior is False:
            self._prior = None
            key = None
            if self.warm_start and knobs.search_prior_weight > 0:     # (only the kgen sampler asks)
                key = next((k for k in self._nearest_problems("device") if k != self.problem.key), None)
            if key is not None:
                ok = [(self.space.complete(dict(r.measurement.config)), r.measurement.time_ms)
                      for r in self.db.records(self.spec.family, key, self.target.name, self.digest)
                      if r.measurement.ok]
                if len(ok) >= knobs.search_model_after:
                    self._prior = AdditiveModel(self.space, knobs.search_ridge).fit(ok)
        return self._prior

    def _nearest_bests(self, policy: str, neighbours: int) -> list[dict]:
        out = []
        for key in self._nearest_problems(policy):
            best = self.db.best(self.spec.family, key, self.target.name, self.digest, policy=policy,
                                cc=self.provenance.cc)
            if best is not None and best.measurement.config_name not in self.known:
                out.append(dict(best.measurement.config))
            if len(out) >= neighbours:
                break
        return out

    # ---- proposing ----------------------------------------------------------------------
    def _unmeasured(self, configs, in_flight: set[str]) -> list[Config]:
        return [c for c in configs if c.name not in self.known and c.name not in in_flight]

    def _candidates(self) -> list[Config]:
        """Where a local step may go: the recorded configs in a replay; else every valid config
        one parameter away from the best, and a spread of others."""
        if self._allowed is not None:
            return self._valid_configs()
        best = self.best()
        out: dict[str, Config] = {c.name: c for c in self.space.sample(64, seed=self.rng.randrange(1 << 30))}
        if best is not None:
            for config in self.space.neighbours(best.config):
                out.setdefault(config.name, config)
        return list(out.values())

    def _local_step(self, in_flight: set[str]) -> dict | None:
        """The kgen sampler's move. Until ``search_model_after`` configs have run: the
        unmeasured config nearest the best so far (ties broken at random), since good GEMM
        configs sit together; in a warm start, that distance plus ``search_prior_weight`` times
        the estimate of a model fitted to the nearest tuned problem's measurements
        (``_neighbour_prior``). From then on: the lowest of the additive model's estimate
        (kgen/search_model.py) plus ``search_locality`` times the distance from the best, so
        that what the measurements taught about each parameter value steers the walk.
        Measured on the recorded spaces (scripts/bench_search.py, 20 seeds), the model took
        the median trials to 95% of the optimum on the five hardest spaces from 34.5, 50, 47,
        10 and 22 to 24, 18, 10.5, 11 and 24. Tried and lost: distances that count each
        changed parameter as one step, screening one parameter at a time before the model,
        optimism for values never measured, the model from 4 trials, Thompson sampling of its
        effects, and (on the extended recordings, 10 seeds) a locality of 0.03 or 0.3 and a
        ridge of 0.3 or 3. The model from the 10th trial, not the 6th, took the extended SIMT
        2048^3 from 34 trials to 18.5 (99 %: 50.5 to 18.5) and cost 1-2 trials on four spaces
        (simt 128x4096x4096 12 to 14, 3000x5000x700 12 to 13, mma 1000^3 13 to 15, wgmma
        3000x5000x720 9 to 11; on the uniform samples alone it had lost); it keeps the walk on
        the default's neighbours longer. The walk alone had beaten interleaving TPE's
        proposals, random jumps after steps without a new best, and a nearest-neighbours
        estimate with an exploration bonus. The walk before any model measures by
        ``move_distance`` (``search_walk_distance``): by the span, a switch of a two-valued
        parameter (1) came after two tile steps (0.5), so a best one switch away waited
        behind them; by moves every one-move neighbour comes first. Measured (20 seeds, the
        recorded spaces): wgmma 3000x5000x720 to 95 % in 6 trials instead of 11, SIMT
        128x4096x4096 in 11.5 instead of 14, the rest within a trial. Counting every move as
        one (no share of the span) had SIMT 2048^3 at 37.5 instead of 18.5 and mma
        3000x5000x700 at 20 instead of 7 (switches of parameters that matter little came
        before tile steps). A walk beside a neighbour's model (warm start) measures by moves
        too: on the recorded spaces (kgen+warm, 20 seeds, the SIMT default of dea3241) wgmma
        3000x5000x720 reached 95 % in 7 trials instead of 12 and wgmma 2048^3 99 % in 7 instead
        of 19, the rest unchanged (with the SIMT default before dea3241, moves there had taken
        SIMT 2048^3 from 15.5 trials to 71). This tune's own model keeps the span."""
        best = self.best()
        if best is None:
            return None
        fresh = self._unmeasured(self._candidates(), in_flight)
        if not fresh:
            return None
        ok = [(m.config, m.time_ms) for m in self.known.values() if m.ok]
        model = AdditiveModel(self.space, knobs.search_ridge).fit(ok) if len(ok) >= knobs.search_model_after else None
        prior = self._neighbour_prior() if model is None else None
        locality = knobs.search_locality
        # this tune's model, else the neighbour's (weighted), else the distance alone
        guide, weight = (model, 1.0) if model is not None else (prior, knobs.search_prior_weight)
        # by moves until this tune's own model guides (beside a neighbour's model too), then the span
        walk = move_distance if knobs.search_walk_distance == "moves" else config_distance
        distance_of = walk if model is None else config_distance

        def score(c: Config) -> tuple:
            distance = distance_of(self.space, best.config, c.as_dict())
            if guide is None:
                return distance, self.rng.random()
            return weight * guide.predict(c.as_dict()) + locality * distance, self.rng.random()

        return min(fresh, key=score).as_dict()

    def _nearest_fresh(self, values: dict, in_flight: set[str]) -> dict | None:
        fresh = self._unmeasured(self._valid_configs(), in_flight)
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
            if self.sampler_name == "exhaustive" and not queued:
                return None   # every valid config has been proposed
            if self.sampler_name == "kgen" and not queued and wasted == 0:
                step = self._local_step(in_flight)
                if step is not None:
                    study.enqueue_trial(step)
            if self.sampler_name == "random" and not queued:
                # draw valid configs (the recorded ones in a replay) directly: Optuna's own random
                # proposals are mostly rejected by the constraints, at milliseconds of ask/tell each
                if self._allowed is None:
                    drawn = self.space.sample(64, seed=self.rng.randrange(1 << 30))
                else:
                    drawn = self.rng.sample(self._valid_configs(), min(64, len(self._valid_configs())))
                self._queue = [c.as_dict() for c in self._unmeasured(drawn, in_flight)]
                if self._queue:
                    continue
            trial = study.ask(dists)
            values = trial.params
            config = self.space.make(values)
            broken = self.space.violations(values)
            if not broken and not self._measurable(config):
                # a replay of a sampled space: the proposal was not recorded, so measure the
                # nearest recorded config instead (the proposal itself is no evidence either way)
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
            if wasted >= (_MAX_WASTED_ASKS if self._allowed is None else 4):
                fresh = self._unmeasured(self._valid_configs(), in_flight)
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
                                    sampler=make_sampler(self.sampler_name, self.seed, max(n_startup, 10)))
        self._tell_known(study, dists)
        start = time.perf_counter()   # the time budget is the search's, set-up excluded

        budget = trials if self._allowed is None else min(trials, len(self._valid_configs()))
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


def tune(spec, problem: Problem, target: Target, runner, db, trials: int = 100, timeout_s: float | None = None,
         sampler: str = DEFAULT_SAMPLER, seed: int | None = None, on_progress=None, pool: CompilePool | None = None,
         warm_start: bool = True) -> TuneResult:
    """Tune ``problem`` until ``trials`` configs are measured for it (stored ones count)."""
    if sampler not in SAMPLERS:
        raise KgenError(f"unknown sampler {sampler!r}", remedy=f"use one of {', '.join(SAMPLERS)}")
    tuner = Tuner(spec, problem, target, runner, db, sampler=sampler, seed=seed, pool=pool, warm_start=warm_start)
    return tuner.run(trials, timeout_s, on_progress)
