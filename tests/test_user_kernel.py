"""The user-kernel example (examples/vector_add_family.py, which the README points to) runs as written: a user's template, space, geometry and
reference go through the same render -> compile -> measure -> tune -> dispatch path."""

import pytest

from kgen.compile import compile_source
from kgen.problem import Target
from kgen.render import render

from user_family import EXAMPLE, as_module, with_stray_write


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The example as an importable module (spawned GPU workers unpickle its spec)."""
    with as_module(tmp_path_factory.mktemp("readme_example"), "kgen_readme_example", EXAMPLE.read_text()) as module:
        yield vars(module)


def test_example_space_renders_and_compiles(example):
    spec, problem = example["spec"], example["problem"]
    target = Target.h200()
    configs = spec.space(problem, target).configs()
    assert len(configs) == 15
    for config in configs:
        source = render(spec, problem, config, target)
        assert f"void __launch_bounds__({config['BLOCK']}) {config.name}(" in source.code
        result = compile_source(source)
        assert result.failure is None, result.failure
        assert result.binary.entry == config.name


def test_example_family_is_registered(example):
    import kgen

    assert kgen.get_spec("vadd") is example["spec"]
    assert "vadd" in kgen.families()


@pytest.mark.gpu
def test_example_tunes_and_dispatches_on_gpu(example):
    import cupy

    import kgen
    from kgen.db import MemoryStore
    from kgen.dispatch import Dispatcher, set_default_dispatcher
    from kgen.runners import LocalGPURunner
    from kgen.search import tune

    spec, problem = example["spec"], example["problem"]
    target = Target.detect(0)
    db = MemoryStore()
    with LocalGPURunner((0,), target.l2_bytes) as runner:
        result = tune(spec, problem, target, runner, db, trials=15, sampler="exhaustive")
    assert result.measured == 15 and result.best is not None
    old = set_default_dispatcher(Dispatcher(db=db))
    try:
        ops = spec.inputs(problem, seed=3)
        kgen.run(spec, problem, ops)
        assert bool(cupy.allclose(ops["out"], ops["x"] + ops["y"]))
        loaded = kgen.dispatch.default_dispatcher().prepare(spec, problem, 0)
        assert loaded.choice.how == "tuned" and loaded.choice.config.name == result.best.config_name
    finally:
        set_default_dispatcher(old)


@pytest.fixture(scope="module")
def overrunning(tmp_path_factory):
    """The example's family, renamed, whose VEC=4 configs also write one float 1 MiB past the
    end of their output (as a user's wrong bounds check would)."""
    text = with_stray_write("vadd_overrun", "out[n - 1 + (1 << 18)] = 0.f;")
    with as_module(tmp_path_factory.mktemp("overrun_example"), "kgen_overrun_example", text) as module:
        yield vars(module)


def test_an_overrunning_config_renders_its_stray_write(overrunning):
    spec, problem = overrunning["spec"], overrunning["problem"]
    codes = {c["VEC"]: render(spec, problem, c, Target.h200()).code for c in spec.space(problem, Target.h200()).configs()}
    assert "(1 << 18)" in codes[4] and "(1 << 18)" not in codes[2]


@pytest.mark.gpu
def test_a_write_past_the_output_fails_its_trial_and_the_tune_finishes(overrunning):
    from kgen.db import MemoryStore
    from kgen.runners import LocalGPURunner
    from kgen.search import tune

    spec, problem = overrunning["spec"], overrunning["problem"]
    target = Target.detect(0)
    with LocalGPURunner((0,), target.l2_bytes) as runner:
        result = tune(spec, problem, target, runner, MemoryStore(), trials=15, sampler="exhaustive")
    by_vec: dict[int, list] = {}
    for m in result.trials:
        by_vec.setdefault(m.config["VEC"], []).append(m)
    assert len(by_vec[4]) == 5 and len(result.trials) == 15
    for m in by_vec[4]:
        assert m.failure is not None and m.failure.kind == "runtime", m
        assert "out-of-bounds write" in m.failure.detail and "past output 'out'" in m.failure.detail
    assert all(m.failure is None for vec in (1, 2) for m in by_vec[vec])
    assert result.best is not None and result.best.config["VEC"] != 4
