"""Every config the runner can measure, once each: the device model's picks first."""

from __future__ import annotations

import optuna

from kgen.samplers.base import Strategy, model_picks


class ExhaustiveStrategy(Strategy):
    """Queues the whole domain up front; the search ends when it has all been proposed."""

    name = "exhaustive"

    def sampler(self, seed: int, n_startup: int) -> optuna.samplers.BaseSampler:
        return optuna.samplers.RandomSampler(seed=seed)

    def first(self) -> list[dict]:
        return model_picks(self.tune) + [c.as_dict() for c in self.tune.domain.configs()]

    def propose(self, in_flight: set[str], wasted: int) -> list[dict] | None:
        return None
