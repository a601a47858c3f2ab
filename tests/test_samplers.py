"""Search strategies (kgen.samplers): every registered one behind the one interface, the one
check of a sampler name, the domain a runner offers, and the one nearest-problem ranking."""

from __future__ import annotations

import ast
import random
import zlib
from pathlib import Path

import optuna
import pytest

from kgen.db import MemoryStore
from kgen.dispatch import Dispatcher
from kgen.errors import KgenError
from kgen import gemm_problem, get_spec
from kgen.measurement import Measurement, Provenance, Record
from kgen.nearest import nearest_problems
from kgen.problem import Target
from kgen.runners.replay import Recording, ReplayRunner
from kgen.samplers import Domain, ListedDomain, Strategy, check_sampler, domain_for, register, sampler_names
from kgen.samplers import registry
from kgen.search import SAMPLERS, Tuner, tune

KGEN = Path(__file__).resolve().parent.parent / "kgen"
SPEC = get_spec("gemm")                           # the CUDA-core family
TARGET = Target.h200()
TINY = gemm_problem(16, 16, 16, "float64")        # 144 valid configs


def _ms(name: str) -> float:
    return 0.01 + (zlib.crc32(name.encode()) % 1000) * 1e-5


def _records(problem, keep=lambda name: True):
    prov = Provenance(device=TARGET.name, cc="9.0", template_digest=SPEC.template_digest())
    for config in SPEC.space(problem, TARGET).configs():
        if keep(config.name):
            yield Record("gemm", Measurement(config.name, config.as_dict(), problem.key,
                                             times_ms=(_ms(config.name),) * 3), prov)


@pytest.fixture(scope="module")
def half():
    """A recording of every other config of TINY: proposals outside it must stand for recorded ones."""
    return Recording.from_records(_records(TINY, keep=lambda name: zlib.crc32(name.encode()) % 2 == 0))


def _sampler_or_skip(strategy: Strategy):
    try:
        return strategy.sampler(0, 10)
    except KgenError as exc:         # an optional package is missing: the error says what to install
        assert "pip install" in exc.remedy
        pytest.skip(f"{strategy.name}: {exc}")


# ---------------------------------------------------------------- the interface

@pytest.mark.parametrize("name", sampler_names())
def test_every_registered_strategy_satisfies_the_interface(half, name):
    cls = check_sampler(name)
    assert isinstance(cls, type) and issubclass(cls, Strategy) and cls.name == name
    tuner = Tuner(SPEC, TINY, TARGET, ReplayRunner(half), MemoryStore(), sampler=name, seed=0, warm_start=False)
    strategy = tuner.strategy
    assert type(strategy) is cls and strategy.tune is tuner

    first = strategy.first()
    assert isinstance(first, list) and all(isinstance(v, dict) for v in first)
    assert all(tuner.space.is_valid(tuner.space.complete(v)) for v in first)

    proposed = strategy.propose(set(), 0)
    assert proposed is None or isinstance(proposed, list)
    for values in proposed or []:
        config = tuner.space.make(values)
        assert tuner.space.is_valid(values) and tuner.domain.admits(config.name) and config.name not in tuner.known

    try:
        sampler = strategy.sampler(0, 10)
    except KgenError as exc:        # only for a missing optional package, and then with a remedy
        assert name in exc.message and "pip install" in exc.remedy
    else:
        assert isinstance(sampler, optuna.samplers.BaseSampler)


@pytest.mark.parametrize("name", sampler_names())
def test_every_registered_strategy_tunes_a_replay_within_what_it_recorded(half, name):
    _sampler_or_skip(Tuner(SPEC, TINY, TARGET, ReplayRunner(half), MemoryStore(), sampler=name).strategy)
    recorded = {n for (key, n) in half.entries if key == TINY.key}
    db = MemoryStore()
    result = tune(SPEC, TINY, TARGET, ReplayRunner(half, seed=1), db, trials=12, sampler=name, seed=0,
                  warm_start=False)
    names = [m.config_name for m in result.trials]
    assert result.measured == 12 == len(set(names)) and set(names) <= recorded
    rest = tune(SPEC, TINY, TARGET, ReplayRunner(half, seed=1), db, trials=10_000, sampler=name, seed=0,
                warm_start=False)
    assert rest.known == 12 and rest.measured == len(recorded) - 12      # ends when every recorded config ran
    assert {m.config_name for m in rest.trials} == recorded - set(names)


@pytest.mark.parametrize("name", ["kgen", "tpe", "random", "exhaustive"])
def test_the_same_seed_proposes_the_same_configs(half, name):
    def names(seed):
        result = tune(SPEC, TINY, TARGET, ReplayRunner(half, seed=1), MemoryStore(), trials=15, sampler=name,
                      seed=seed, warm_start=False)
        return [m.config_name for m in result.trials]

    assert names(0) == names(0)


# ---------------------------------------------------------------- one check of a name

def test_an_unknown_name_raises_from_the_one_check():
    with pytest.raises(KgenError) as info:
        check_sampler("annealing")
    err = info.value
    assert type(err) is KgenError and "annealing" in err.message and err.fields["sampler"] == "annealing"
    assert all(name in err.remedy for name in sampler_names())
    assert SAMPLERS == sampler_names() == ("kgen", "tpe", "random", "gp", "cmaes", "exhaustive")


def test_every_entry_point_checks_names_through_the_registry(half, monkeypatch):
    from typer.testing import CliRunner

    from kgen.cli import app
    from kgen.multi import tune_many

    recording = Path(__file__).parent / "data" / "h200_gemm_f32_simt.jsonl.gz"
    shape = ["--m", "1000", "--n", "1000", "--k", "1000", "--replay", str(recording), "--trials", "2"]
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    entry_points = {
        "tune": lambda s: tune(SPEC, TINY, TARGET, ReplayRunner(half), MemoryStore(), trials=2, sampler=s),
        "Tuner": lambda s: Tuner(SPEC, TINY, TARGET, ReplayRunner(half), MemoryStore(), sampler=s).run(2),
        "tune_many": lambda s: tune_many(SPEC, [TINY], TARGET, ReplayRunner(half), MemoryStore(), trials=2,
                                         sampler=s),
    }
    for call in entry_points.values():
        with pytest.raises(KgenError) as info:
            call("annealing")
        assert info.value.message == "unknown sampler 'annealing'"
    result = CliRunner().invoke(app, ["tune", "gemm", *shape, "--sampler", "annealing"])
    assert result.exit_code == 2 and "unknown sampler 'annealing'" in result.output

    class Steady(Strategy):
        """Proposes nothing of its own: the Optuna sampler's every proposal."""

        name = "annealing"

        def sampler(self, seed, n_startup):
            return optuna.samplers.RandomSampler(seed=seed)

    monkeypatch.setitem(registry._REGISTRY, "annealing", Steady)      # now it is known everywhere
    for call in entry_points.values():
        call("annealing")
    result = CliRunner().invoke(app, ["tune", "gemm", *shape, "--sampler", "annealing"])
    assert result.exit_code == 0, result.output


def test_no_other_module_checks_a_sampler_name():
    holders = [p.relative_to(KGEN).as_posix() for p in KGEN.rglob("*.py") if "unknown sampler" in p.read_text()]
    assert holders == ["samplers/registry.py"]


def test_register_takes_only_named_strategies():
    with pytest.raises(KgenError):
        register(dict)

    class Nameless(Strategy):
        def sampler(self, seed, n_startup):
            return optuna.samplers.RandomSampler(seed=seed)

    with pytest.raises(KgenError, match="no name"):
        register(Nameless)
    assert "" not in sampler_names()


# ---------------------------------------------------------------- the runner's domain

def test_the_domain_is_the_runners_answer(half):
    space = SPEC.space(TINY, TARGET)
    whole = domain_for(space, None)
    listed = domain_for(space, ReplayRunner(half).measurable(TINY.key))
    assert type(whole) is Domain and type(listed) is ListedDomain
    assert len(whole.configs()) == 144 and whole.budget(1000) == 1000 and whole.admits("anything")
    recorded = {n for (key, n) in half.entries if key == TINY.key}
    assert {c.name for c in listed.configs()} == recorded and listed.budget(1000) == len(recorded)
    assert all(listed.admits(n) for n in recorded) and not listed.admits("gemm_simt_not_recorded")
    drawn = listed.draw(10, random.Random(0))
    assert len({c.name for c in drawn}) == 10 and {c.name for c in drawn} <= recorded
    assert [c.name for c in listed.draw(10, random.Random(0))] == [c.name for c in drawn]
    best = listed.configs()[0]
    assert listed.around(best.as_dict(), random.Random(0)) == listed.configs()
    around = {c.name for c in whole.around(best.as_dict(), random.Random(0))}
    assert {c.name for c in space.neighbours(best.as_dict())} <= around
    assert whole.patience > listed.patience


def test_the_tuner_asks_the_runner_not_its_kind(half):
    class Listing:           # any runner that lists what it can answer is treated as a replay is
        slots, needs_binaries = 1, False

        def __init__(self):
            self.inner = ReplayRunner(half)

        def submit(self, task):
            return self.inner.submit(task)

        def measurable(self, key):
            return self.inner.measurable(key)

    a = tune(SPEC, TINY, TARGET, Listing(), MemoryStore(), trials=10, sampler="kgen", seed=2, warm_start=False)
    b = tune(SPEC, TINY, TARGET, ReplayRunner(half), MemoryStore(), trials=10, sampler="kgen", seed=2,
             warm_start=False)
    assert [m.config_name for m in a.trials] == [m.config_name for m in b.trials]


# ---------------------------------------------------------------- one nearest-problem ranking

def test_nearest_problems_ranks_comparable_problems_only():
    p = gemm_problem(1000, 1000, 1000)
    keys = [gemm_problem(4000, 1000, 1000).key, gemm_problem(2000, 1000, 1000).key, p.key,
            gemm_problem(2000, 1000, 1000, "float64").key, gemm_problem(1000, 1000, 1000, "float32", "TN").key,
            "gemm|m=", "", "conv|n=1"]
    ranked = nearest_problems(p, keys, SPEC.shape_params)
    assert ranked == [p.key, gemm_problem(2000, 1000, 1000).key, gemm_problem(4000, 1000, 1000).key]
    assert nearest_problems(p, keys, SPEC.shape_params, within=1.5) == ranked[:2]
    assert nearest_problems(p, [], SPEC.shape_params) == []


def test_warm_start_and_dispatch_rank_alike(monkeypatch):
    monkeypatch.setenv("KGEN_UNTUNED", "nearest")
    monkeypatch.setenv("KGEN_SEARCH_WARM_DISTANCE", "100")
    here = gemm_problem(64, 64, 64)
    others = [gemm_problem(64, 64, 256), gemm_problem(64, 64, 128), gemm_problem(256, 256, 256)]
    prov = Provenance(device=TARGET.name, cc="9.0", template_digest=SPEC.template_digest())
    db = MemoryStore()
    for i, problem in enumerate(others):
        config = SPEC.space(problem, TARGET).configs()[i]
        db.commit([Record("gemm", Measurement(config.name, config.as_dict(), problem.key, times_ms=(1.0,) * 3), prov)])

    class Anything:
        def measurable(self, key):
            return None

    tuner = Tuner(SPEC, here, TARGET, Anything(), db)
    ranked = tuner.nearest_problems("device")
    assert ranked == nearest_problems(here, db.problems("gemm", TARGET.name, SPEC.template_digest()),
                                      SPEC.shape_params)
    assert ranked[0] == gemm_problem(64, 64, 128).key
    choice = Dispatcher(db=db, targets={0: TARGET}).choose(SPEC, here, TARGET)
    assert choice.how == "nearest" and choice.from_problem == ranked[0]


# ---------------------------------------------------------------- layers

def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("path", sorted((KGEN / "samplers").glob("*.py")) + [KGEN / "nearest.py"],
                         ids=lambda p: p.relative_to(KGEN).as_posix())
def test_strategies_and_the_ranking_sit_below_search_dispatch_and_the_families(path):
    above = ("kgen.search", "kgen.dispatch", "kgen.kernels", "kgen.cli", "kgen.multi", "kgen.export", "kgen.ops")
    bad = {m for m in _imports(path) if any(m == a or m.startswith(a + ".") for a in above)}
    assert not bad
