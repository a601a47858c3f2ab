"""Strategies by name, and the one check of a sampler name.

>>> check_sampler("tpe").name
'tpe'
>>> check_sampler("annealing")
Traceback (most recent call last):
...
kgen.errors.KgenError: unknown sampler 'annealing' (remedy: use one of kgen, tpe, random, gp, cmaes, exhaustive)
"""

from __future__ import annotations

from kgen.errors import KgenError
from kgen.samplers.base import Strategy

_REGISTRY: dict[str, type[Strategy]] = {}


def register(strategy: type[Strategy]) -> type[Strategy]:
    """Make a strategy known by its ``name`` to ``tune``, ``tune_many`` and ``kgen tune
    --sampler``; returns the class (usable as a decorator)."""
    if not (isinstance(strategy, type) and issubclass(strategy, Strategy)):
        raise KgenError(f"{strategy!r} is not a search strategy",
                        remedy="subclass kgen.samplers.Strategy and implement sampler()")
    if not strategy.name or not isinstance(strategy.name, str):
        raise KgenError(f"the strategy {strategy.__name__} has no name", remedy="set the class attribute `name`")
    _REGISTRY[strategy.name] = strategy
    return strategy


def sampler_names() -> tuple[str, ...]:
    """The registered strategies' names, in the order they were registered."""
    return tuple(_REGISTRY)


def check_sampler(name: str) -> type[Strategy]:
    """The strategy registered as ``name``; KgenError naming every registered one otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise KgenError(f"unknown sampler {name!r}", remedy=f"use one of {', '.join(_REGISTRY)}",
                        sampler=name) from None
