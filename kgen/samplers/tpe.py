"""Optuna's TPE: a multivariate tree-structured Parzen estimator over the parameters' choices."""

from __future__ import annotations

import optuna

from kgen.samplers.base import Strategy


def tpe_sampler(seed: int, n_startup: int) -> optuna.samplers.TPESampler:
    """TPE as kgen runs it: multivariate, and a constant liar for the trials in flight."""
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup, constant_liar=True,
                                      multivariate=True)


class TpeStrategy(Strategy):
    """Every proposal is TPE's."""

    name = "tpe"

    def sampler(self, seed: int, n_startup: int) -> optuna.samplers.BaseSampler:
        return tpe_sampler(seed, n_startup)
