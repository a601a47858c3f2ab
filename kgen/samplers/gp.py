"""Optuna's Gaussian-process sampler (needs PyTorch)."""

from __future__ import annotations

import optuna

from kgen.samplers.base import Strategy, needs


class GpStrategy(Strategy):
    """Every proposal is the Gaussian process's."""

    name = "gp"

    def sampler(self, seed: int, n_startup: int) -> optuna.samplers.BaseSampler:
        needs("torch", self.name, "PyTorch")
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup)
