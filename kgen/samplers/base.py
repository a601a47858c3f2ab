"""The strategy interface: how a tune proposes configs.

The tuner (``kgen.search.Tuner``) drives one Optuna study: it asks the study for a trial,
measures the config, and tells the study the result. A strategy shapes what the study
answers, through three calls:

- ``first()``: configs to try before any other proposal (after the warm start's);
- ``propose(in_flight, wasted)``: when nothing is queued, configs the strategy proposes
  itself (queued, then asked for in order); ``[]`` leaves the proposal to the sampler;
  ``None`` ends the search (nothing is left to propose);
- ``sampler(seed, n_startup)``: the Optuna sampler that makes every other proposal; it
  learns from every result told to the study, the strategy's own proposals included.

A strategy is made for one tune, ``Strategy(tune)``, and sees it through ``TuneState``.
"""

from __future__ import annotations

import importlib
import random
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Iterable, Protocol

import optuna

from kgen.errors import KgenError
from kgen.knobs import knobs
from kgen.measurement import Measurement, Record
from kgen.problem import Problem, Target
from kgen.samplers.domain import Domain
from kgen.space import Config, Space


class TuneState(Protocol):
    """What a strategy may read of its tune."""

    spec: Any                           # the family's KernelSpec
    problem: Problem
    target: Target
    space: Space
    domain: Domain                      # the configs the runner can measure
    rng: random.Random                  # the tune's seeded generator: every draw a strategy makes
    known: dict[str, Measurement]       # measured for this problem (stored or by this tune), by config name
    warm_start: bool

    def best(self) -> Measurement | None:
        """The fastest successful measurement so far."""

    def unmeasured(self, configs: Iterable[Config], in_flight: set[str]) -> list[Config]:
        """``configs`` neither measured nor in flight."""

    def nearest_problems(self, policy: str) -> list[str]:
        """Keys of the tuned problems near this one (``kgen.nearest``), nearest first."""

    def records(self, problem_key: str) -> list[Record]:
        """The stored records of a problem of this family on this device and template."""


class Strategy(ABC):
    """One way of proposing configs; registered by ``name`` (``kgen.samplers.register``)."""

    name: ClassVar[str] = ""

    def __init__(self, tune: TuneState):
        self.tune = tune

    @abstractmethod
    def sampler(self, seed: int, n_startup: int) -> optuna.samplers.BaseSampler:
        """The Optuna sampler behind the study; ``n_startup``: trials before it models them.
        Raises KgenError (with a remedy) when a package it needs is missing."""

    def first(self) -> list[dict]:
        """Configs to try first, after the warm start's; none by default."""
        return []

    def propose(self, in_flight: set[str], wasted: int) -> list[dict] | None:
        """Configs to try next when nothing is queued (``wasted``: proposals of this ask
        already wasted: invalid, measured or in flight); ``[]``: the sampler proposes;
        ``None``: the search is over."""
        return []


def model_picks(tune: TuneState) -> list[dict]:
    """The family's device-model picks for the tune's problem (``KGEN_SEARCH_MODEL_PICKS`` of
    them), best first; none when the family's model cannot rank this problem."""
    try:
        picks = tune.spec.model_picks(tune.problem, tune.target, knobs.search_model_picks)
    except KgenError:
        return []
    return [c.as_dict() for c in picks]


def needs(module: str, sampler: str, package: str) -> None:
    """Raise KgenError when ``module`` cannot be imported (a sampler's optional dependency)."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise KgenError(f"the {sampler} sampler needs {package}",
                        remedy=f"pip install {module}, or use --sampler tpe", sampler=sampler) from None
