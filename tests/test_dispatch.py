"""kgen.gemm's call path with fake device arrays and a fake launcher (kernels really compile)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kgen
from kgen.db import MemoryStore
from kgen.dispatch import Dispatcher, set_default_dispatcher
from kgen.tune_on_miss import miss_tuner
from kgen.kernels.gemm.simt import GemmSimt
from kgen.kernels.gemm.problem import gemm_problem
from kgen.measurement import Measurement, Provenance, Record
from kgen.problem import Target

from fakes import BASE, FakeArray, FakeLauncher, fake_dispatch

SPEC = GemmSimt()
TARGET = Target.h200()



@pytest.fixture
def fake():
    with fake_dispatch(TARGET) as f:
        yield f


def _vectors(entry: str) -> tuple[int, int]:
    m = re.search(r"_va(\d+)_vb(\d+)_", entry)
    return int(m.group(1)), int(m.group(2))


def _only_launch(launcher):
    assert len(launcher.launches) == 1, launcher.launches
    return launcher.launches[0]


# ---------------------------------------------------------------- geometry and arguments

def test_row_major_operands_launch_the_chosen_config_with_spec_geometry(fake):
    m, n, k = 96, 80, 64
    a, b = FakeArray((m, k)), FakeArray((k, n), ptr=BASE + 0x100_0000)
    c = kgen.gemm(a, b)
    kernel, launch = _only_launch(fake.launcher)
    assert c is fake.launcher.allocated[0] and c.shape == (m, n) and c.dtype == np.float32

    problem = gemm_problem(m, n, k, "float32", "NN")
    choice = fake.dispatcher.choose(SPEC, problem, TARGET)
    assert choice.how == "model" and kernel.entry == choice.config.name
    geo = SPEC.launch(problem, choice.config)
    assert (launch.grid, launch.block, launch.shared_mem) == (geo.grid, geo.block, geo.shared_mem)
    args = [x.item() if hasattr(x, "item") else x for x in launch.args]
    assert args[:9] == [a.ptr, b.ptr, c.ptr, m, n, k, k, n, n]
    assert args[9:] == [1.0, 0.0]


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_layouts_are_read_from_strides_and_lds_are_passed(fake, layout):
    m, n, k = 64, 48, 32
    lda_t, ldb_t = 72, 40                     # padded storage of the transposed operands
    a = FakeArray((m, k), strides=(1, lda_t)) if layout[0] == "T" else FakeArray((m, k))
    b = FakeArray((k, n), ptr=BASE + 0x200_0000, strides=(1, ldb_t)) if layout[1] == "T" \
        else FakeArray((k, n), ptr=BASE + 0x200_0000)
    c = FakeArray((m, n), ptr=BASE + 0x400_0000)
    out = kgen.gemm(a, b, c, alpha=2.0, beta=0.5)
    assert out is c and not fake.launcher.allocated
    kernel, launch = _only_launch(fake.launcher)
    assert f"_{layout.lower()}_" in kernel.entry
    args = [x.item() for x in launch.args]
    assert args[6] == (lda_t if layout[0] == "T" else k)
    assert args[7] == (ldb_t if layout[1] == "T" else n)
    assert args[8] == n and args[9:] == [2.0, 0.5]
    problem = gemm_problem(m, n, k, "float32", layout)
    assert launch.grid == SPEC.launch(problem, fake.dispatcher.choose(SPEC, problem, TARGET).config).grid


def test_a_transposed_view_of_a_fake_array_is_layout_t(fake):
    m, n, k = 64, 64, 32
    a = FakeArray((k, m)).T                   # storage k x m, viewed as m x k
    b = FakeArray((n, k), ptr=BASE + 0x200_0000).T
    kgen.gemm(a, b)
    kernel, launch = _only_launch(fake.launcher)
    assert "_tt_" in kernel.entry
    assert int(launch.args[6]) == m and int(launch.args[7]) == k


# ---------------------------------------------------------------- alignment

@pytest.mark.parametrize("offset,expected_va", [(0, 4), (4, 1), (8, 2), (16, 4)])
def test_alignment_comes_from_the_pointer(fake, offset, expected_va):
    m, n, k = 128, 128, 64
    a = FakeArray((m, k), ptr=BASE + offset)
    b = FakeArray((k, n), ptr=BASE + 0x200_0000)
    kgen.gemm(a, b)
    kernel, launch = _only_launch(fake.launcher)
    va, vb = _vectors(kernel.entry)
    assert va == expected_va and vb == 4
    assert int(launch.args[0]) == BASE + offset
    # the same choice the dispatcher makes for the problem with that alignment
    problem = gemm_problem(m, n, k, "float32", "NN", align_a=expected_va, align_b=4)
    assert kernel.entry == fake.dispatcher.choose(SPEC, problem, TARGET).config.name


def test_an_odd_leading_dimension_limits_the_vector_width(fake):
    m, n, k = 64, 64, 62                      # lda = 62 allows 2-wide float vectors only
    kgen.gemm(FakeArray((m, k)), FakeArray((k, n), ptr=BASE + 0x200_0000))
    kernel, _ = _only_launch(fake.launcher)
    assert _vectors(kernel.entry) == (2, 4)


# ---------------------------------------------------------------- caching and edge shapes

def test_repeated_calls_reuse_the_loaded_kernel(fake):
    m, n, k = 64, 64, 64
    for i in range(3):
        kgen.gemm(FakeArray((m, k), ptr=BASE + i * 0x1000), FakeArray((k, n), ptr=BASE + 0x200_0000 + i * 0x1000))
    assert len(fake.launcher.kernels) == 1
    kernel = fake.launcher.kernels[0]
    assert len(kernel.launches) == 3
    assert [int(l.args[0]) for l in kernel.launches] == [BASE, BASE + 0x1000, BASE + 0x2000]
    # a different shape loads a second kernel
    kgen.gemm(FakeArray((m, 2 * k)), FakeArray((2 * k, n), ptr=BASE + 0x200_0000))
    assert len(fake.launcher.kernels) == 2


def test_prepare_is_cached_per_problem(fake):
    problem = gemm_problem(64, 64, 64)
    first = fake.dispatcher.prepare(SPEC, problem, 0)
    second = fake.dispatcher.prepare(SPEC, problem, 0)
    assert first is second and len(fake.launcher.kernels) == 1


def test_problems_that_render_one_binary_load_it_once(fake):
    """A grouped GEMM's token count is an argument of its kernel, not compiled in: calls of
    other counts that choose the same config share one loaded kernel (a layer whose count
    changes every step loads no module a step)."""
    from kgen.kernels.gemm.grouped import grouped_problem
    from kgen.registry import get_spec

    spec = get_spec("gemm_grouped_wgmma")
    loaded = [fake.dispatcher.prepare(spec, grouped_problem(64, rows, 1408, 2048, "bfloat16", "NT",
                                                            family=spec.family), 0)
              for rows in range(8000, 8100, 7)]
    configs = {item.choice.config.name for item in loaded}
    assert len(fake.launcher.kernels) == len(configs) < len(loaded)
    assert len({id(item.kernel) for item in loaded}) == len(configs)


@pytest.mark.parametrize("shape", [(0, 16, 8), (16, 0, 8), (0, 0, 0)])
def test_empty_outputs_do_not_launch(fake, shape):
    m, n, k = shape
    out = kgen.gemm(FakeArray((m, k)), FakeArray((k, n), ptr=BASE + 0x200_0000))
    assert out.shape == (m, n)
    assert fake.launcher.kernels == [] and fake.launcher.launches == []


def test_k_zero_still_launches_to_write_c(fake):
    m, n = 32, 64
    c = FakeArray((m, n), ptr=BASE + 0x400_0000)
    out = kgen.gemm(FakeArray((m, 0)), FakeArray((0, n), ptr=BASE + 0x200_0000), c, beta=0.25)
    assert out is c
    kernel, launch = _only_launch(fake.launcher)
    assert int(launch.args[5]) == 0 and float(launch.args[10]) == 0.25


def test_a_tuned_split_k_config_scales_c_by_beta_first(fake):
    m, n, k = 64, 64, 1024
    problem = gemm_problem(m, n, k)
    space = SPEC.space(problem, TARGET)
    split = next(c for c in space.configs() if c["SK"] == 4)
    prov = Provenance(device=TARGET.name, cc="9.0", template_digest=SPEC.template_digest())
    fake.dispatcher.db.commit([Record("gemm", Measurement(split.name, split.as_dict(), problem.key,
                                                          times_ms=(0.01,) * 3), prov)])
    c = FakeArray((m, n), ptr=BASE + 0x400_0000)
    kgen.gemm(FakeArray((m, k)), FakeArray((k, n), ptr=BASE + 0x200_0000), c, beta=0.5)
    kernel, launch = _only_launch(fake.launcher)
    assert kernel.entry == split.name
    assert launch.grid[1] == 4
    assert len(kernel.scales) == 1 and kernel.scales[0][0] is c and kernel.scales[0][1] == 0.5


# ---------------------------------------------------------------- a repeated call is checked again

def test_a_misaligned_pointer_after_an_aligned_call_gets_its_own_kernel(fake):
    m, n, k = 128, 128, 64
    b = FakeArray((k, n), ptr=BASE + 0x200_0000)
    kgen.gemm(FakeArray((m, k), ptr=BASE), b)
    kgen.gemm(FakeArray((m, k), ptr=BASE + 4), b)          # same shape, 4-byte aligned only
    kgen.gemm(FakeArray((m, k), ptr=BASE + 32), b)         # 16-byte aligned again: first kernel
    entries = [k.entry for k in fake.launcher.kernels]
    assert [_vectors(e)[0] for e in entries] == [4, 1]
    assert [len(k.launches) for k in fake.launcher.kernels] == [2, 1]
    assert int(fake.launcher.kernels[0].launches[1].args[0]) == BASE + 32


def test_new_strides_after_a_call_are_read_again(fake):
    m, n, k = 64, 64, 64
    b = FakeArray((k, n), ptr=BASE + 0x200_0000)
    kgen.gemm(FakeArray((m, k)), b)
    kgen.gemm(FakeArray((m, k), strides=(1, 80)), b)       # now a transposed view, lda 80
    assert ["_nn_" in fake.launcher.kernels[0].entry, "_tn_" in fake.launcher.kernels[1].entry] == [True, True]
    assert int(fake.launcher.kernels[1].launches[0].args[6]) == 80


def test_bad_operands_after_a_good_call_still_raise(fake):
    m, n, k = 64, 64, 64
    a, b = FakeArray((m, k)), FakeArray((k, n), ptr=BASE + 0x200_0000)
    kgen.gemm(a, b, FakeArray((m, n), ptr=BASE + 0x400_0000))
    with pytest.raises(kgen.ShapeError):
        kgen.gemm(a, b, FakeArray((m, n + 1), ptr=BASE + 0x400_0000))
    with pytest.raises(kgen.DeviceError):
        kgen.gemm(a, FakeArray((k, n), ptr=BASE + 0x200_0000, device=1))
    with pytest.raises(kgen.DtypeError):
        kgen.gemm(a, b, FakeArray((m, n), "float64", ptr=BASE + 0x400_0000))
    with pytest.raises(kgen.LayoutError):
        kgen.gemm(a, b, FakeArray((m, n), ptr=BASE + 0x400_0000, strides=(1, m)))
    assert len(fake.launcher.launches) == 1


def test_an_explicit_ldc_is_passed(fake):
    m, n, k = 32, 48, 16
    c = FakeArray((m, n), ptr=BASE + 0x400_0000, strides=(64, 1))   # a view into a wider array
    kgen.gemm(FakeArray((m, k)), FakeArray((k, n), ptr=BASE + 0x200_0000), c)
    _, launch = _only_launch(fake.launcher)
    assert int(launch.args[8]) == 64


def test_verified_only_dispatch_ignores_imported_records_until_verified(monkeypatch):
    import dataclasses

    from kgen.db import MemoryStore
    from kgen.db.verify import VERIFIED
    from kgen.dispatch import Dispatcher
    from kgen.kernels.gemm.simt import GemmSimt
    from kgen.kernels.gemm.problem import gemm_problem
    from kgen.measurement import Measurement, Provenance, Record
    from kgen.problem import Target

    spec, target = GemmSimt(), Target.h200()
    problem = gemm_problem(512, 512, 512)
    config = spec.space(problem, target).sample(1, seed=4)[0]
    prov = Provenance(device=target.name, cc="9.0", template_digest=spec.template_digest(),
                      created="2026-01-01T00:00:00+00:00", origin="import:team.jsonl")
    imported = Record("gemm", Measurement(config.name, config.as_dict(), problem.key, times_ms=(1.0,) * 5), prov)
    db = MemoryStore([imported])
    monkeypatch.setenv("KGEN_VERIFIED_ONLY", "1")
    assert Dispatcher(db=db, targets={0: target}).choose(spec, problem, target).how == "model"
    verdict = dataclasses.replace(imported, provenance=dataclasses.replace(
        prov, origin=VERIFIED, created="2026-01-02T00:00:00+00:00"))
    db.commit([verdict])
    choice = Dispatcher(db=db, targets={0: target}).choose(spec, problem, target)
    assert choice.how == "tuned" and choice.config.name == config.name
    monkeypatch.setenv("KGEN_VERIFIED_ONLY", "0")
    db2 = MemoryStore([imported])
    assert Dispatcher(db=db2, targets={0: target}).choose(spec, problem, target).how == "tuned"


def test_tune_on_miss_tunes_in_the_background_and_the_next_call_uses_it(monkeypatch):
    from pathlib import Path

    from kgen.runners import Recording

    from fakes import recorded_gpu

    recording = Recording.load(Path(__file__).parent / "data" / "h200_gemm_f32_simt.jsonl.gz")
    monkeypatch.setenv("KGEN_TUNE_ON_MISS", "6")
    dispatcher = Dispatcher(db=MemoryStore(), launcher=FakeLauncher(), targets={0: Target.h200()},
                            miss_tuner=miss_tuner(lambda device: recorded_gpu(recording)))
    old = set_default_dispatcher(dispatcher)
    try:
        a, b, c = FakeArray((1000, 1000)), FakeArray((1000, 1000), ptr=BASE + (1 << 24)), \
            FakeArray((1000, 1000), ptr=BASE + (2 << 24))
        kgen.gemm(a, b, c)
        problem = gemm_problem(1000, 1000, 1000)
        first = dispatcher.prepare(GemmSimt(), problem, 0).choice
        assert first.how == "model"
        dispatcher.background[("gemm", problem.key, 0)].join(60)
        assert len(dispatcher.db.records("gemm", problem.key)) == 6
        kgen.gemm(a, b, c)                      # the plan was dropped: this call chooses again
        again = dispatcher.prepare(GemmSimt(), problem, 0).choice
        assert again.how == "tuned"
        assert again.config.name == dispatcher.db.best("gemm", problem.key, "NVIDIA H200").measurement.config_name
    finally:
        set_default_dispatcher(old)


@pytest.mark.parametrize("overlap", ["c is a", "c inside b", "c ends in a"])
def test_an_output_that_aliases_an_input_is_refused(fake, overlap):
    from kgen.errors import InputError

    a = FakeArray((64, 64))
    b = FakeArray((64, 64), ptr=BASE + 0x100_0000)
    ptr = {"c is a": a.ptr, "c inside b": b.ptr + 64 * 4 * 8, "c ends in a": a.ptr - 64 * 4 * 8}[overlap]
    with pytest.raises(InputError, match="overlaps"):
        kgen.gemm(a, b, FakeArray((64, 64), ptr=ptr))
    kgen.gemm(a, b, FakeArray((64, 64), ptr=BASE + 0x200_0000))       # a separate c is fine


def test_load_many_compiles_side_by_side_and_loads_in_order(fake, monkeypatch):
    """A first-call race's candidates: their compiles run in threads at once, the kernels come
    back in the order asked, the vendor's without one; a config that does not compile raises
    CompileError naming it."""
    import threading
    import time

    import kgen.dispatch as dispatch
    from kgen.compile import compile_source
    from kgen.dispatch import Choice
    from kgen.errors import CompileError
    from kgen.space import Config

    threads, running, peak = set(), [0], [0]
    lock = threading.Lock()

    def slow_compile(source, use_cache=True):
        with lock:
            threads.add(threading.get_ident())
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return compile_source(source, use_cache)

    monkeypatch.setattr(dispatch, "compile_source", slow_compile)
    monkeypatch.setenv("KGEN_COMPILE_WORKERS", "4")
    problem = gemm_problem(300, 200, 100)
    configs = SPEC.space(problem, TARGET).sample(3, seed=1)
    wanted = [(SPEC, problem, Choice(config, "model")) for config in configs]
    wanted.insert(1, (SPEC, problem, Choice(Config("cublas", ()), "vendor")))
    loaded = fake.dispatcher.load_many(wanted, 0)
    assert [x.choice.config.name for x in loaded] == [c.config.name for _, _, c in wanted]
    assert loaded[1].kernel is None and all(x.kernel is not None for i, x in enumerate(loaded) if i != 1)
    assert peak[0] >= 2 and len(threads) >= 2                   # compiled side by side
    from types import SimpleNamespace

    monkeypatch.setattr(dispatch, "compile_source", lambda source, use_cache=True: SimpleNamespace(
        failure=SimpleNamespace(detail="error: no"), binary=None))
    with pytest.raises(CompileError) as info:
        fake.dispatcher.load_many(wanted[2:], 0)
    assert configs[1].name in str(info.value)
