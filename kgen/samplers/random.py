"""Uniform random search over the configs the runner can measure."""

from __future__ import annotations

import optuna

from kgen.samplers.base import Strategy


class RandomStrategy(Strategy):
    """Draws valid configs itself, 64 at a time: Optuna's own random proposals are mostly
    rejected by the constraints, at milliseconds of ask/tell each."""

    name = "random"

    def sampler(self, seed: int, n_startup: int) -> optuna.samplers.BaseSampler:
        return optuna.samplers.RandomSampler(seed=seed)

    def propose(self, in_flight: set[str], wasted: int) -> list[dict] | None:
        drawn = self.tune.domain.draw(64, self.tune.rng)
        return [c.as_dict() for c in self.tune.unmeasured(drawn, in_flight)]
