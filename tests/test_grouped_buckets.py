"""A grouped GEMM's token count out of its decisions: counts within a bucket (``token_bucket``)
share the records and the dispatch decision of the bucket's top, while each call still runs on
its own count (no GPU: a fake launcher, NVRTC compiles)."""

from __future__ import annotations

import pytest

from kgen.db import MemoryStore
from kgen.dispatch import Dispatcher
from kgen.kernels.gemm.grouped import grouped_problem, token_bucket
from kgen.measurement import Measurement, Provenance, Record
from kgen.problem import Problem, Target
from kgen.registry import get_spec

from fakes import FakeLauncher

FAMILY = "gemm_grouped_wgmma"
TARGET = Target.h200()


def _problem(tokens: int) -> Problem:
    return grouped_problem(64, tokens, 1408, 2048, "bfloat16", "NT", family=FAMILY)


def test_buckets_cover_every_count_within_one_and_a_half():
    tops = [token_bucket(t) for t in range(1, 70000)]
    assert all(top >= t for t, top in enumerate(tops, 1))
    assert tops == sorted(tops)                                     # a bucket is a range of counts
    assert all(token_bucket(top) == top for top in set(tops))       # a top is its own bucket's
    firsts = {}
    for t, top in enumerate(tops, 1):
        firsts.setdefault(top, t)
    assert all(top <= 1.5 * first for top, first in firsts.items())
    assert all(token_bucket(1 << j) == 1 << j for j in range(20))   # the tuned powers of two stay tops


def test_record_problem_is_the_top_of_the_bucket_and_plain_gemm_keeps_its_own():
    spec = get_spec(FAMILY)
    assert spec.record_problem(_problem(5000)) == _problem(6144)
    assert spec.record_problem(_problem(8192)) is not None and spec.record_problem(_problem(8192)) == _problem(8192)
    from kgen.kernels.gemm.problem import tc_problem

    plain = tc_problem("gemm_wgmma", 5000, 1408, 2048)
    assert get_spec("gemm_wgmma").record_problem(plain) is plain


@pytest.fixture
def counted(monkeypatch):
    """A dispatcher over ``db`` and a fake launcher, and the problems it chose for."""
    chosen: list[str] = []
    real = Dispatcher.choose

    def choose(self, spec, problem, target):
        chosen.append(spec.record_problem(problem).key)
        return real(self, spec, problem, target)

    monkeypatch.setattr(Dispatcher, "choose", choose)

    def make(db=None):
        return Dispatcher(db=db or MemoryStore(), launcher=FakeLauncher(), targets={0: TARGET}), chosen
    return make


def test_counts_of_one_bucket_decide_once_and_load_one_kernel(counted):
    dispatcher, chosen = counted()
    spec = get_spec(FAMILY)
    loads = [dispatcher.prepare(spec, _problem(t), 0) for t in (4097, 5000, 6000, 6144, 4500)]
    assert chosen == [_problem(6144).key]
    assert [x.problem["m"] for x in loads] == [4097, 5000, 6000, 6144, 4500]   # each runs on its count
    assert len({x.choice.config.name for x in loads}) == 1
    assert len(dispatcher.launcher.kernels) == 1
    # the launch covers the call's own rows: fewer tokens, no more blocks than the top's
    grids = [spec.launch(x.problem, x.choice.config).grid[0] for x in loads]
    assert grids[0] <= grids[3]
    dispatcher.prepare(spec, _problem(6145), 0)                        # the next bucket decides anew
    assert chosen == [_problem(6144).key, _problem(8192).key]
    assert dispatcher.decide(spec, _problem(7000), 0) == dispatcher.decide(spec, _problem(8000), 0)
    assert chosen[-1] == _problem(8192).key and len(chosen) == 2


def test_a_record_of_the_top_serves_every_count_of_its_bucket(counted):
    spec = get_spec(FAMILY)
    top = _problem(6144)
    space = spec.space(top, TARGET)
    config = next(c for c in space.configs() if c.name != spec.default_config(top, TARGET).name)
    prov = Provenance(device=TARGET.name, cc="9.0", template_digest=spec.template_digest(), created="2026-01-01")
    db = MemoryStore([Record(FAMILY, Measurement(config.name, config.as_dict(), top.key, times_ms=(0.5,)), prov)])
    dispatcher, _ = counted(db)
    for tokens in (4100, 5555, 6144):
        choice = dispatcher.decide(spec, _problem(tokens), 0)
        assert (choice.how, choice.config.name, choice.from_problem) == ("tuned", config.name, top.key)
    assert dispatcher.decide(spec, _problem(6145), 0).how != "tuned"
    # forgetting the top (a tune on miss finished) drops every count it served
    dispatcher.prepare(spec, _problem(5000), 0)
    dispatcher.forget(FAMILY, top.key)
    assert not dispatcher.loaded(FAMILY)


def test_a_tune_measures_the_top_of_the_bucket():
    from kgen.search import Tuner

    class Runner:
        def measurable(self, key):
            return None

    tuner = Tuner(get_spec(FAMILY), _problem(5000), TARGET, Runner(), MemoryStore())
    assert tuner.problem == _problem(6144)
