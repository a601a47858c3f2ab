"""The kgen sampler's additive model of log time (kgen/search_model.py)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from kgen.search_model import AdditiveModel
from kgen.space import Param, Space

SPACE = Space([Param("TILE", (16, 32, 64, 128)), Param("VEC", (1, 2, 4)), Param("STAGES", (2, 3, 4)),
               Param("FIXED", (8,))])
EFFECT = {"TILE": {16: 0.9, 32: 0.3, 64: 0.0, 128: 0.4}, "VEC": {1: 0.5, 2: 0.2, 4: 0.0},
          "STAGES": {2: 0.3, 3: 0.0, 4: 0.1}}


def true_ms(values) -> float:
    return math.exp(sum(EFFECT[name][values[name]] for name in EFFECT))


ALL = [dict(zip(("TILE", "VEC", "STAGES"), v), FIXED=8) for v in itertools.product((16, 32, 64, 128), (1, 2, 4), (2, 3, 4))]


def test_a_sample_of_an_additive_space_ranks_the_unmeasured_configs_right():
    rng = random.Random(0)
    measured = rng.sample(ALL, 14)
    model = AdditiveModel(SPACE, ridge=0.01).fit((v, true_ms(v)) for v in measured)
    unmeasured = [v for v in ALL if v not in measured]
    by_model = sorted(unmeasured, key=model.predict)
    by_truth = sorted(unmeasured, key=true_ms)
    assert by_model[0] == by_truth[0]
    for v in unmeasured:
        assert model.predict(v) == pytest.approx(math.log(true_ms(v)), abs=0.05)


def test_a_value_never_measured_is_estimated_at_the_mean():
    measured = [v for v in ALL if v["TILE"] != 128]
    model = AdditiveModel(SPACE, ridge=1.0).fit((v, true_ms(v)) for v in measured)
    seen = [model.predict({**v, "TILE": t}) for v in measured[:1] for t in (16, 32, 64)]
    unseen = model.predict({**measured[0], "TILE": 128})
    assert min(seen) < unseen < max(seen)


def test_failed_or_no_measurements_are_refused():
    with pytest.raises(ValueError):
        AdditiveModel(SPACE).fit([])
    with pytest.raises(ValueError):
        AdditiveModel(SPACE).fit([(ALL[0], 0.0)])


def test_more_ridge_keeps_estimates_nearer_the_mean():
    pairs = [(v, true_ms(v)) for v in ALL[:10]]
    mean = sum(math.log(t) for _, t in pairs) / len(pairs)
    loose = AdditiveModel(SPACE, ridge=0.01).fit(pairs)
    tight = AdditiveModel(SPACE, ridge=100.0).fit(pairs)
    v = ALL[0]
    assert abs(tight.predict(v) - mean) < abs(loose.predict(v) - mean)
