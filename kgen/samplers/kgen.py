"""kgen's own strategy: a walk from the best config so far, steered by a model of the trials.

First the nearest tuned problems' bests (the tuner's warm start), then the configs the
family's device model ranks first (``model_picks``), then, one trial at a time, the
unmeasured config the walk ranks first (``step``); TPE proposes when the walk has nothing
left to offer.
"""

from __future__ import annotations

import optuna

from kgen.knobs import knobs
from kgen.samplers.base import Strategy, TuneState, model_picks
from kgen.samplers.distance import config_distance, move_distance
from kgen.samplers.tpe import tpe_sampler
from kgen.search_model import AdditiveModel
from kgen.space import Config


class KgenStrategy(Strategy):
    """The model-guided walk (``step``), with TPE behind it."""

    name = "kgen"

    def __init__(self, tune: TuneState):
        super().__init__(tune)
        self._prior: AdditiveModel | None | bool = False    # the neighbour's model; False: not looked up yet

    def sampler(self, seed: int, n_startup: int) -> optuna.samplers.BaseSampler:
        return tpe_sampler(seed, n_startup)

    def first(self) -> list[dict]:
        return model_picks(self.tune)

    def propose(self, in_flight: set[str], wasted: int) -> list[dict] | None:
        """The walk's next config, unless a proposal of this ask was already wasted (TPE's turn)."""
        if wasted:
            return []
        step = self.step(in_flight)
        return [] if step is None else [step]

    def candidates(self) -> list[Config]:
        """Where a step may go (``Domain.around`` the best so far)."""
        best = self.tune.best()
        return self.tune.domain.around(None if best is None else best.config, self.tune.rng)

    def step(self, in_flight: set[str]) -> dict | None:
        """The next config of the walk. Until ``search_model_after`` configs have run: the
        unmeasured config nearest the best so far (ties broken at random), since good GEMM
        configs sit together; in a warm start, that distance plus ``search_prior_weight`` times
        the estimate of a model fitted to the nearest tuned problem's measurements
        (``neighbour_prior``). From then on: the lowest of the additive model's estimate
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
        tune = self.tune
        best = tune.best()
        if best is None:
            return None
        fresh = tune.unmeasured(self.candidates(), in_flight)
        if not fresh:
            return None
        ok = [(m.config, m.time_ms) for m in tune.known.values() if m.ok]
        model = AdditiveModel(tune.space, knobs.search_ridge).fit(ok) if len(ok) >= knobs.search_model_after else None
        prior = self.neighbour_prior() if model is None else None
        locality = knobs.search_locality
        # this tune's model, else the neighbour's (weighted), else the distance alone
        guide, weight = (model, 1.0) if model is not None else (prior, knobs.search_prior_weight)
        # by moves until this tune's own model guides (beside a neighbour's model too), then the span
        walk = move_distance if knobs.search_walk_distance == "moves" else config_distance
        distance_of = walk if model is None else config_distance

        def score(c: Config) -> tuple:
            distance = distance_of(tune.space, best.config, c.as_dict())
            if guide is None:
                return distance, tune.rng.random()
            return weight * guide.predict(c.as_dict()) + locality * distance, tune.rng.random()

        return min(fresh, key=score).as_dict()

    def neighbour_prior(self) -> AdditiveModel | None:
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
            tune = self.tune
            if tune.warm_start and knobs.search_prior_weight > 0:
                key = next((k for k in tune.nearest_problems("device") if k != tune.problem.key), None)
            if key is not None:
                ok = [(tune.space.complete(dict(r.measurement.config)), r.measurement.time_ms)
                      for r in tune.records(key) if r.measurement.ok]
                if len(ok) >= knobs.search_model_after:
                    self._prior = AdditiveModel(tune.space, knobs.search_ridge).fit(ok)
        return self._prior
