"""Optuna's CMA-ES sampler (needs the cmaes package); TPE samples what CMA-ES cannot."""

from __future__ import annotations

import optuna

from kgen.samplers.base import Strategy, needs


class CmaEsStrategy(Strategy):
    """CMA-ES over the parameters it can model; an independent TPE for the rest."""

    name = "cmaes"

    def sampler(self, seed: int, n_startup: int) -> optuna.samplers.BaseSampler:
        needs("cmaes", self.name, "the cmaes package")
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup,
                                            independent_sampler=optuna.samplers.TPESampler(seed=seed),
                                            warn_independent_sampling=False)
