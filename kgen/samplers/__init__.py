"""Search strategies: how a tune proposes configs, one module each, registered by name.

kgen (a model-guided walk, the default), tpe, random, gp (needs PyTorch), cmaes (needs
cmaes) and exhaustive. Each is a ``Strategy`` (``kgen.samplers.base``); ``check_sampler``
is the one place a sampler name is checked.

>>> from kgen.samplers import SAMPLERS, check_sampler
>>> SAMPLERS
('kgen', 'tpe', 'random', 'gp', 'cmaes', 'exhaustive')
>>> check_sampler("random").__name__
'RandomStrategy'
"""

from kgen.samplers.base import Strategy, TuneState
from kgen.samplers.cmaes import CmaEsStrategy
from kgen.samplers.domain import Domain, ListedDomain, domain_for
from kgen.samplers.exhaustive import ExhaustiveStrategy
from kgen.samplers.gp import GpStrategy
from kgen.samplers.kgen import KgenStrategy
from kgen.samplers.random import RandomStrategy
from kgen.samplers.registry import check_sampler, register, sampler_names
from kgen.samplers.tpe import TpeStrategy

for _strategy in (KgenStrategy, TpeStrategy, RandomStrategy, GpStrategy, CmaEsStrategy, ExhaustiveStrategy):
    register(_strategy)
del _strategy

SAMPLERS = sampler_names()      # the built-in strategies
DEFAULT_SAMPLER = KgenStrategy.name

__all__ = ["Strategy", "TuneState", "Domain", "ListedDomain", "domain_for", "check_sampler", "register",
           "sampler_names", "SAMPLERS", "DEFAULT_SAMPLER", "KgenStrategy", "TpeStrategy", "RandomStrategy",
           "GpStrategy", "CmaEsStrategy", "ExhaustiveStrategy"]
