"""The configs a tune may measure: what its runner can answer, as the strategies see it.

A runner says which configs of a problem it can answer (``Runner.measurable``): None for
any (a GPU), or the recorded ones (a replay). The tuner wraps that answer in a domain once;
strategies draw, enumerate and step through the domain, never through the runner, so no
part of the search asks what kind of runner it has.

>>> from kgen.space import Param, Space
>>> space = Space([Param("TILE", (16, 32, 64))])
>>> whole = domain_for(space, None)
>>> len(whole.configs()), whole.admits("anything"), whole.budget(100)
(3, True, 100)
>>> listed = domain_for(space, {space.make({"TILE": 32}).name: {"TILE": 32}})
>>> [c.as_dict() for c in listed.configs()], listed.budget(100)
([{'TILE': 32}], 1)
"""

from __future__ import annotations

import random
from typing import Mapping

from kgen.space import Config, Space


class Domain:
    """Every valid config of the space: a runner that can measure any config."""

    patience = 64     # wasted proposals (invalid, measured, in flight) in a row before a random valid config

    def __init__(self, space: Space):
        self.space = space
        self._configs: list[Config] | None = None

    def _enumerate(self) -> list[Config]:
        return self.space.configs()

    def configs(self) -> list[Config]:
        """Every config of the domain, in a stable order (enumerated once, when first asked)."""
        if self._configs is None:
            self._configs = self._enumerate()
        return self._configs

    def admits(self, name: str) -> bool:
        """Whether the runner can answer the config (or the vendor candidate) of this name."""
        return True

    def budget(self, trials: int) -> int:
        """How many configs a tune asked for ``trials`` can have measured."""
        return trials

    def draw(self, n: int, rng: random.Random) -> list[Config]:
        """Up to ``n`` distinct configs drawn uniformly."""
        return self.space.sample(n, seed=rng.randrange(1 << 30))

    def around(self, values: Mapping | None, rng: random.Random) -> list[Config]:
        """Where a local step from ``values`` may go: every valid config one parameter away,
        and a spread of others."""
        out: dict[str, Config] = {c.name: c for c in self.draw(64, rng)}
        if values is not None:
            for config in self.space.neighbours(values):
                out.setdefault(config.name, config)
        return list(out.values())


class ListedDomain(Domain):
    """Only the configs a runner lists (a replay: those of its recording)."""

    patience = 4

    def __init__(self, space: Space, listed: Mapping[str, Mapping]):
        super().__init__(space)
        self.listed = listed

    def _enumerate(self) -> list[Config]:
        return [self.space.make(v) for v in self.listed.values() if self.space.is_valid(v)]

    def admits(self, name: str) -> bool:
        return name in self.listed

    def budget(self, trials: int) -> int:
        return min(trials, len(self.configs()))

    def draw(self, n: int, rng: random.Random) -> list[Config]:
        return rng.sample(self.configs(), min(n, len(self.configs())))

    def around(self, values: Mapping | None, rng: random.Random) -> list[Config]:
        """Every listed config: a recording holds few enough to weigh them all."""
        return self.configs()


def domain_for(space: Space, listed: Mapping[str, Mapping] | None) -> Domain:
    """The domain of a runner's ``measurable`` answer: None for the whole space."""
    return Domain(space) if listed is None else ListedDomain(space, listed)
