"""The tuning driver through the replay runner (no GPU), and dispatch's choice from its results."""

from __future__ import annotations

from concurrent.futures import Future

import math
import time
import zlib
from collections import Counter

import pytest

from kgen.db import MemoryStore
from kgen.dispatch import Dispatcher
from kgen.errors import KgenError, NoConfigError
from kgen.kernels.gemm.simt import GemmSimt
from kgen.kernels.gemm.problem import gemm_problem
from kgen.measurement import Failure, Measurement, Provenance, Record
from kgen.problem import Target
from kgen.runners.base import Runner
from kgen.runners.replay import Recording, ReplayRunner
from kgen.search import Tuner, tune

from fakes import recorded_gpu

SPEC = GemmSimt()
TARGET = Target.h200()
P = gemm_problem(32, 32, 64)                      # 4308 valid configs
NEAR = gemm_problem(32, 32, 128)                  # same dtype/layout/alignment: a neighbour
TINY = gemm_problem(16, 16, 16, "float64")        # 144 valid configs: exhaustive is cheap
UNROLL_COST = {1: 0.04, 4: 0.01, 0: 0.0}


def _crc(name: str) -> int:
    return zlib.crc32(name.encode())


def model_ms(problem, config) -> float:
    """A deterministic, smooth-ish cost with a unique optimum (the crc term breaks ties)."""
    v = config.as_dict()
    lg = math.log2
    t = 0.05 + problem["k"] / 6400
    t += 0.3 * abs(lg(v["BM"]) - 4) + 0.3 * abs(lg(v["BN"]) - 5)      # best near 16x32 tiles,
    t += 0.1 * abs(lg(v["TM"]) - 1) + 0.1 * abs(lg(v["TN"]) - 1)      # 2x2 per thread: not the default
    t += 0.05 * (v["BK"] != 16) + 0.02 * (4 / v["VA"]) + 0.02 * (4 / v["VB"]) + 0.03 * (1 - v["DB"])
    t += UNROLL_COST[v["UNROLL"]] + 0.01 * (v["GM"] != 1) + 0.2 * (v["SK"] - 1) + 0.01 * (v["MINB"] - 1)
    return round(t + (_crc(config.name) % 1000) * 1e-7, 9)


def model_failure(config) -> Failure | None:
    r = _crc(config.name) % 11
    if r == 0:
        return Failure("runtime", "illegal address (synthetic)")
    if r == 1:
        return Failure("correctness", "max error 1 over tolerance (synthetic)")
    return None


def _records(problem):
    prov = Provenance(device=TARGET.name, cc="9.0", template_digest=SPEC.template_digest())
    for config in SPEC.space(problem, TARGET).configs():
        failure = model_failure(config)
        times = None if failure else (model_ms(problem, config),) * 5
        yield Record("gemm", Measurement(config.name, config.as_dict(), problem.key, times_ms=times,
                                         failure=failure, resources={"registers": 64}), prov)


@pytest.fixture(scope="module")
def recording():
    records = [r for p in (P, NEAR, TINY) for r in _records(p)]
    return Recording.from_records(records)


def optimum(recording, problem) -> tuple[str, float]:
    ok = [(m.time_ms, name) for (key, name), m in recording.entries.items() if key == problem.key and m.ok]
    t, name = min(ok)
    return name, t


def stored(db, problem):
    return db.records("gemm", problem.key, TARGET.name, SPEC.template_digest())


def run(recording, db, problem=P, trials=20, sampler="tpe", **kw):
    return tune(SPEC, problem, TARGET, ReplayRunner(recording, seed=1), db, trials=trials,
                sampler=sampler, seed=kw.pop("seed", 0), **kw)


# ---------------------------------------------------------------- one tune

@pytest.mark.parametrize("sampler", ["kgen", "tpe", "random"])
def test_tune_stores_every_trial_and_reports_the_best(recording, sampler):
    db = MemoryStore()
    result = run(recording, db, trials=30, sampler=sampler)
    assert result.measured == 30 and result.known == 0 and len(result.trials) == 30
    rows = stored(db, P)
    assert len(rows) == 30 == db.count()
    names = [r.measurement.config_name for r in rows]
    assert len(set(names)) == 30                                   # nothing measured twice
    assert set(names) == {m.config_name for m in result.trials}

    # failures are stored as failures, with the recorded kind
    want_failed = {n for n in names if model_failure(SPEC.space(P, TARGET).make(
        recording.entries[(P.key, n)].config)) is not None}
    got_failed = {r.measurement.config_name for r in rows if not r.measurement.ok}
    assert got_failed == want_failed
    kinds = Counter(r.measurement.failure.kind for r in rows if not r.measurement.ok)
    assert all(result.failures[k] == n for k, n in kinds.items())

    # the reported best is the fastest stored success, and agrees with the recording
    ok = [r.measurement for r in rows if r.measurement.ok]
    best = min(ok, key=lambda m: m.time_ms)
    assert result.best.config_name == best.config_name
    assert result.best.time_ms == recording.entries[(P.key, best.config_name)].time_ms
    assert db.best("gemm", P.key, TARGET.name).measurement.config_name == best.config_name
    assert result.best.time_ms >= optimum(recording, P)[1]


def test_exhaustive_finds_the_exact_optimum(recording):
    db = MemoryStore()
    n_valid = len(SPEC.space(TINY, TARGET).configs())
    result = run(recording, db, problem=TINY, trials=10_000, sampler="exhaustive")
    assert result.measured == n_valid == len(stored(db, TINY))
    name, t = optimum(recording, TINY)
    assert result.best.config_name == name and result.best.time_ms == t


def test_an_unknown_sampler_raises_kgen_error(recording):
    with pytest.raises(KgenError) as info:
        run(recording, MemoryStore(), sampler="simulated-annealing")
    assert "tpe" in info.value.remedy and "simulated-annealing" in info.value.message


# ---------------------------------------------------------------- resume, warm start, budgets

@pytest.mark.parametrize("sampler", ["kgen", "tpe", "random"])
def test_a_larger_budget_resumes_without_measuring_again(recording, sampler):
    db = MemoryStore()
    first = run(recording, db, trials=12, sampler=sampler)
    assert first.measured == 12
    second = run(recording, db, trials=30, sampler=sampler)
    assert second.known == 12 and second.measured == 18
    names = [r.measurement.config_name for r in stored(db, P)]
    assert len(names) == 30 == len(set(names))
    assert not {m.config_name for m in first.trials} & {m.config_name for m in second.trials}
    # the best never gets worse, and a budget already spent measures nothing
    assert second.best.time_ms <= first.best.time_ms
    third = run(recording, db, trials=30, sampler=sampler)
    assert third.measured == 0 and third.known == 30 and db.count() == 30


def test_warm_start_tries_the_neighbours_best_first(recording):
    db = MemoryStore()
    near = run(recording, db, problem=NEAR, trials=40, sampler="random")
    nb = near.best.config_name
    space = SPEC.space(P, TARGET)
    assert space.is_valid(near.best.config)
    default = SPEC.default_config(P, TARGET).name
    assert nb != default                      # else the test could not tell them apart

    warm = run(recording, db, problem=P, trials=3, sampler="kgen")
    assert warm.trials[0].config_name == nb

    cold = run(recording, MemoryStore(), problem=P, trials=3, sampler="kgen", warm_start=False)
    assert cold.trials[0].config_name == default     # the family's heuristic pick comes next
    pure = run(recording, MemoryStore(), problem=P, trials=40, sampler="random", warm_start=False)
    assert default not in [m.config_name for m in pure.trials[:3]]    # other samplers run as themselves


def test_no_warm_start_from_a_problem_farther_than_the_warm_distance(recording, monkeypatch):
    db = MemoryStore()
    near = run(recording, db, problem=NEAR, trials=40, sampler="random")
    assert P.distance(NEAR, SPEC.shape_params) == 1.0
    monkeypatch.setenv("KGEN_SEARCH_WARM_DISTANCE", "0.9")
    tuner = Tuner(SPEC, P, TARGET, ReplayRunner(recording), db, sampler="kgen", seed=0)
    assert tuner._warm_start_configs() == [] and tuner.strategy.neighbour_prior() is None
    result = tuner.run(3)
    assert result.trials[0].config_name == SPEC.default_config(P, TARGET).name != near.best.config_name
    monkeypatch.setenv("KGEN_SEARCH_WARM_DISTANCE", "1.0")
    assert Tuner(SPEC, P, TARGET, ReplayRunner(recording), db, sampler="kgen")._warm_start_configs()


def test_kgen_sampler_tries_the_device_models_picks_first_in_their_order(recording, monkeypatch):
    """A family's model_picks (gemm_wgmma: one per tile) are the first trials of a cold tune."""
    recorded = sorted(name for key, name in recording.entries if key == P.key)
    space = SPEC.space(P, TARGET)
    picks = [space.make(recording.entries[(P.key, name)].config) for name in recorded[5:8]]
    monkeypatch.setattr(SPEC, "model_picks", lambda problem, target, count: picks[:count])
    result = run(recording, MemoryStore(), trials=4, sampler="kgen", warm_start=False)
    assert [m.config_name for m in result.trials[:3]] == [c.name for c in picks]
    monkeypatch.setenv("KGEN_SEARCH_MODEL_PICKS", "1")
    result = run(recording, MemoryStore(), trials=2, sampler="kgen", warm_start=False)
    assert result.trials[0].config_name == picks[0].name and result.trials[1].config_name not in recorded[6:8]


def test_an_unrecorded_default_stands_for_the_nearest_recorded_config(recording):
    from kgen.samplers.distance import config_distance

    default = SPEC.default_config(P, TARGET)
    space = SPEC.space(P, TARGET)
    without = Recording({k: m for k, m in recording.entries.items() if k != (P.key, default.name)},
                        recording.devices)
    recorded = [space.make(m.config) for (key, _), m in without.entries.items() if key == P.key]
    nearest = min(config_distance(space, default.as_dict(), c.as_dict()) for c in recorded)
    result = run(without, MemoryStore(), trials=3, sampler="kgen", warm_start=False)
    first = result.trials[0]
    assert first.config_name != default.name
    assert config_distance(space, default.as_dict(), first.config) == nearest


def test_move_distance_puts_every_one_move_neighbour_before_any_two_moves():
    from kgen.samplers.distance import config_distance, move_distance
    from kgen.space import Param, Space

    space = Space([Param("TILE", (16, 32, 64, 128, 256)), Param("BK", (8, 16, 32)), Param("GROUP", (1, 8))])
    start = dict(TILE=64, BK=8, GROUP=8)
    tile_step, bk_step, flip = dict(start, TILE=128), dict(start, BK=16), dict(start, GROUP=1)
    two_tile_steps, tile_and_bk = dict(start, TILE=256), dict(start, TILE=32, BK=16)
    assert move_distance(space, start, start) == 0
    assert move_distance(space, start, tile_step) == pytest.approx(1.25)
    assert move_distance(space, start, tile_step) < move_distance(space, start, bk_step) \
        < move_distance(space, start, flip)
    one_move = max(move_distance(space, start, v) for v in (tile_step, bk_step, flip))
    assert one_move < min(move_distance(space, start, v) for v in (two_tile_steps, tile_and_bk))
    # the span puts a switch of the group behind two tile steps and a tile step with a k step
    assert config_distance(space, start, flip) > config_distance(space, start, two_tile_steps)
    assert config_distance(space, start, flip) > config_distance(space, start, tile_and_bk)


@pytest.mark.parametrize("walk", ["moves", "span"])
def test_kgen_sampler_steps_to_the_nearest_unmeasured_config_at_first(recording, monkeypatch, walk):
    from kgen.knobs import knobs
    from kgen.samplers.distance import config_distance, move_distance

    monkeypatch.setenv("KGEN_SEARCH_WALK_DISTANCE", walk)
    distance = move_distance if walk == "moves" else config_distance
    tuner = Tuner(SPEC, P, TARGET, ReplayRunner(recording), MemoryStore(), sampler="kgen", seed=0,
                  warm_start=False)
    result = tuner.run(4)
    assert sum(m.ok for m in tuner.known.values()) < knobs.search_model_after
    best = tuner.best()
    step = tuner.strategy.step(set())
    assert step is not None and SPEC.space(P, TARGET).make(step).name not in tuner.known
    fresh = [c.as_dict() for c in tuner.strategy.candidates() if c.name not in tuner.known]
    assert distance(tuner.space, best.config, step) == min(distance(tuner.space, best.config, v) for v in fresh)
    if walk == "moves":     # one place of one parameter away: the neighbourhood before anything farther
        changed = [p for p in tuner.space.params if step[p.name] != best.config[p.name]]
        assert len(changed) == 1
        p = changed[0]
        assert abs(p.choices.index(step[p.name]) - p.choices.index(best.config[p.name])) == 1
    assert result.measured == 4


@pytest.mark.parametrize("weight", ["0.1", "0"])
def test_a_warm_start_walks_by_the_neighbours_model_until_its_own_takes_over(recording, monkeypatch, weight):
    from kgen.knobs import knobs
    from kgen.samplers.distance import config_distance
    from kgen.search_model import AdditiveModel

    monkeypatch.setenv("KGEN_SEARCH_PRIOR_WEIGHT", weight)
    db = MemoryStore()
    run(recording, db, problem=NEAR, trials=30, sampler="kgen", warm_start=False)
    near_ok = [(r.measurement.config, r.measurement.time_ms) for r in stored(db, NEAR) if r.measurement.ok]
    tuner = Tuner(SPEC, P, TARGET, ReplayRunner(recording), db, sampler="kgen", seed=0)
    tuner.run(3)
    assert sum(m.ok for m in tuner.known.values()) < knobs.search_model_after
    best = tuner.best()
    fresh = [c.as_dict() for c in tuner.strategy.candidates() if c.name not in tuner.known]
    step = tuner.strategy.step(set())
    distance = {id(v): config_distance(tuner.space, best.config, v) for v in fresh}
    if weight == "0":      # no prior: the nearest unmeasured config
        assert tuner.strategy.neighbour_prior() is None
        assert config_distance(tuner.space, best.config, step) == min(distance.values())
        return
    prior = AdditiveModel(tuner.space, knobs.search_ridge).fit(near_ok)
    assert tuner.strategy.neighbour_prior().predict(step) == pytest.approx(prior.predict(step))

    def score(v):
        return 0.1 * prior.predict(v) + knobs.search_locality * config_distance(tuner.space, best.config, v)

    assert score(step) == pytest.approx(min(score(v) for v in fresh))
    assert config_distance(tuner.space, best.config, step) > min(distance.values())   # the prior chose
    cold = Tuner(SPEC, P, TARGET, ReplayRunner(recording), MemoryStore(), sampler="kgen", seed=0, warm_start=False)
    assert cold.strategy.neighbour_prior() is None          # nothing tuned nearby, or no warm start: no prior


def test_kgen_sampler_follows_the_model_once_trials_teach_it(recording):
    from kgen.knobs import knobs
    from kgen.samplers.distance import config_distance
    from kgen.search_model import AdditiveModel

    tuner = Tuner(SPEC, P, TARGET, ReplayRunner(recording), MemoryStore(), sampler="kgen", seed=0,
                  warm_start=False)
    tuner.run(16)
    ok = [(m.config, m.time_ms) for m in tuner.known.values() if m.ok]
    assert len(ok) >= knobs.search_model_after
    model = AdditiveModel(tuner.space, knobs.search_ridge).fit(ok)
    best = tuner.best()

    def score(values):
        return model.predict(values) + knobs.search_locality * config_distance(tuner.space, best.config, values)

    step = tuner.strategy.step(set())
    fresh = [c.as_dict() for c in tuner.strategy.candidates() if c.name not in tuner.known]
    assert score(step) == pytest.approx(min(score(v) for v in fresh))
    nearest = min(config_distance(tuner.space, best.config, v) for v in fresh)
    assert config_distance(tuner.space, best.config, step) > nearest   # the model, not the distance, chose


class SlowReplay(ReplayRunner):
    def answer(self, task):
        time.sleep(0.05)
        return super().answer(task)


def test_timeout_stops_the_tune(recording):
    db = MemoryStore()
    n_valid = len(SPEC.space(TINY, TARGET).configs())
    start = time.perf_counter()
    result = tune(SPEC, TINY, TARGET, SlowReplay(recording), db, trials=n_valid, timeout_s=1.0,
                  sampler="random")
    elapsed = time.perf_counter() - start
    assert 0 < result.measured < n_valid                 # 144 trials would take >= 7 s
    assert elapsed < 1.0 + 2.0                           # at most one trial in flight past the limit
    assert db.count() == result.measured


def test_timeout_zero_measures_nothing(recording):
    result = run(recording, MemoryStore(), trials=50, timeout_s=0)
    assert result.measured == 0 and result.best is None


# ---------------------------------------------------------------- tune -> db -> dispatch

@pytest.fixture(scope="module")
def tuned_db(recording):
    """A database a (stand-in) GPU tune filled: dispatch uses measurements, not replays."""
    db = MemoryStore()
    result = tune(SPEC, P, TARGET, recorded_gpu(recording, seed=1), db, trials=25, sampler="random", seed=5)
    return db, result


def test_replayed_trials_are_never_dispatched(recording):
    db = MemoryStore()
    run(recording, db, problem=P, trials=10, sampler="random", seed=5)
    assert len(stored(db, P)) == 10
    assert Dispatcher(db=db, targets={0: TARGET}).choose(SPEC, P, TARGET).how != "tuned"


def test_dispatch_picks_the_tuned_best(tuned_db):
    db, result = tuned_db
    choice = Dispatcher(db=db, targets={0: TARGET}).choose(SPEC, P, TARGET)
    assert choice.how == "tuned"
    assert choice.config.name == result.best.config_name
    assert choice.time_ms == result.best.time_ms


def test_dispatch_uses_the_nearest_tuned_problem(tuned_db, monkeypatch):
    monkeypatch.setenv("KGEN_UNTUNED", "nearest")
    db, result = tuned_db
    choice = Dispatcher(db=db, targets={0: TARGET}).choose(SPEC, NEAR, TARGET)
    assert choice.how == "nearest" and choice.from_problem == P.key
    assert choice.config.name == result.best.config_name


@pytest.mark.parametrize("problem", [gemm_problem(32, 32, 64, "float64"),
                                     gemm_problem(32, 32, 64, "float32", "TT"),
                                     gemm_problem(32, 32, 64, align_a=1)],
                         ids=["other-dtype", "other-layout", "other-alignment"])
def test_dispatch_falls_back_to_the_default_elsewhere(tuned_db, problem, monkeypatch):
    monkeypatch.setenv("KGEN_UNTUNED", "nearest")
    db, _ = tuned_db
    choice = Dispatcher(db=db, targets={0: TARGET}).choose(SPEC, problem, TARGET)
    assert choice.how == "default"
    assert choice.config == SPEC.default_config(problem, TARGET)


def test_strict_mode_raises_for_an_untuned_problem(tuned_db, monkeypatch):
    db, result = tuned_db
    monkeypatch.setenv("KGEN_STRICT", "1")
    d = Dispatcher(db=db, targets={0: TARGET})
    assert d.choose(SPEC, P, TARGET).config.name == result.best.config_name
    for problem in (NEAR, gemm_problem(32, 32, 64, "float64")):
        with pytest.raises(NoConfigError) as info:
            d.choose(SPEC, problem, TARGET)
        assert info.value.remedy


class InstantGPU(Runner):
    """Answers every config at once, as a GPU with no queue would: the driver's own cost shows."""

    needs_binaries = False
    slots = 2

    def submit(self, task):
        fut: Future = Future()
        fut.set_result(Measurement(config_name=task.config.name, config=task.config.as_dict(),
                                   problem_key=task.problem.key, times_ms=(1.0 + len(task.config.name) % 7,) * 5))
        return fut


def test_random_search_proposes_valid_configs_only():
    """Optuna's own random proposals are mostly rejected by the constraints (milliseconds of
    ask/tell each, which capped tuning throughput); the random sampler draws valid ones."""
    from kgen.db import MemoryStore

    result = tune(SPEC, gemm_problem(1000, 1000, 1000), TARGET, InstantGPU(), MemoryStore(), trials=40,
                  sampler="random", seed=3, warm_start=False)
    assert len(result.trials) == 40 and result.failures["constraints"] == 0
    assert len({m.config_name for m in result.trials}) == 40


def test_a_measure_task_carries_its_compile_result():
    from types import SimpleNamespace

    from kgen.compile import CompileResult
    from kgen.measure.task import MeasureTask
    from kgen.measurement import Timing
    from kgen.space import Config

    config, timing = Config("k_a", (("A", 1),)), Timing(runs=20)
    binary = SimpleNamespace(cubin=b"\x7fELF", resources={"registers": 40})
    task = MeasureTask.of("spec", "problem", config, CompileResult(binary, None, seconds=1.5), timing=timing, seed=3)
    assert (task.cubin, task.entry, task.resources, task.compile_s, task.seed) == (b"\x7fELF", "k_a", {"registers": 40},
                                                                                   1.5, 3)
    replayed = MeasureTask.of("spec", "problem", config, CompileResult(None, None), timing=timing)
    assert (replayed.cubin, replayed.resources, replayed.compile_s) == (b"", {}, 0.0)
    assert MeasureTask.of(None, "problem", config, timing=timing).cubin == b""     # nothing compiled
