"""GEMM on the GPU: random configs x layouts x dtypes at odd sizes, alpha/beta, dispatch,
and planted faults during a tune. Marked ``gpu``; scripts/gpu_check.sh runs them."""

import random
import zlib

import pytest

from kgen.compile import compile_source
from kgen.kernels.gemm.dtypes import DTYPES
from kgen.kernels.gemm.problem import LAYOUTS, gemm_problem
from kgen.kernels.gemm.simt import GemmSimt
from kgen.measure.verify import verify
from kgen.render import render

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (7, 7, 7), (33, 1000, 7), (1000, 33, 4097), (4097, 1, 33), (1000, 1000, 1000)]


def _target():
    from kgen.problem import Target

    return Target.detect(0)


def _check(spec, problem, config, target, seed=0):
    from kgen.measure.launch import CupyKernel

    result = compile_source(render(spec, problem, config, target))
    assert result.failure is None, result.failure
    kernel = CupyKernel(result.binary.cubin, result.binary.entry, result.binary.path)
    operands = spec.inputs(problem, seed)
    return verify(spec, problem, config, kernel, operands, spec.reference(problem, operands))


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_random_configs_are_correct(dtype, layout):
    spec, target = GemmSimt(), _target()
    rng = random.Random(zlib.crc32(f"{dtype} {layout}".encode()))   # the same configs in every process
    for m, n, k in SHAPES:
        problem = gemm_problem(m, n, k, dtype, layout)
        space = spec.space(problem, target)
        configs = space.sample(2, seed=rng.randrange(1 << 30)) + [spec.default_config(problem, target)]
        for config in configs:
            check = _check(spec, problem, config, target)
            assert check.ok, f"{config.name} on {m}x{n}x{k}: {check.detail}"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_alpha_beta_and_split_k(dtype):
    import cupy

    from kgen.measure.launch import CupyKernel

    spec, target = GemmSimt(), _target()
    problem = gemm_problem(33, 130, 1000, dtype, "NT")
    space = spec.space(problem, target)
    configs = [spec.default_config(problem, target)]
    if dtype != "float16":
        configs += [c for c in space.sample(400, seed=3) if c["SK"] > 1][:2]
    for config in configs:
        binary = compile_source(render(spec, problem, config, target)).binary
        kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
        ops = spec.inputs(problem, 5)
        c0 = (cupy.random.default_rng(9).random(ops["c"].shape) - 0.5).astype(dtype)
        ops.update(c=c0.copy(), alpha=1.5, beta=-0.5)
        want = 1.5 * (ops["a"].astype(cupy.float64) @ ops["b"].astype(cupy.float64)) - 0.5 * c0.astype(cupy.float64)
        spec.run(kernel, problem, config, ops)
        got = ops["c"].astype(cupy.float64)
        err = float(cupy.abs(got - want).max() / cupy.abs(want).max())
        assert err <= spec.tolerance(problem), f"{config.name}: {err}"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_exchanging_epilogue_on_rows_without_vector_stores(dtype):
    """N no multiple of the thread's column vector (C_TRANSPOSE): configs whose row groups fill a
    warp and configs with several rows to a warp, each layout, alpha and beta, against float64."""
    import cupy

    from kgen.kernels.gemm.simt import transposed_stores
    from kgen.measure.launch import CupyKernel

    spec, target = GemmSimt(), _target()
    groups = set()
    for i, layout in enumerate(LAYOUTS):
        problem = gemm_problem(77, 301 + 2 * i, 45, dtype, layout)
        space = spec.space(problem, target)
        configs = [c for c in space.sample(400, seed=20 + i) if c["MINB"] == 1
                   and transposed_stores(problem["n"], space.full_values(c.as_dict()))][:3]
        assert configs, layout
        for config in configs:
            groups.add(min(32, config["BN"] // config["TN"]))
            binary = compile_source(render(spec, problem, config, target, space)).binary
            kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
            ops = spec.inputs(problem, 7)
            c0 = (cupy.random.default_rng(9).random(ops["c"].shape) - 0.5).astype(dtype)
            ops.update(c=c0.copy(), alpha=0.75, beta=1.25)
            want = 0.75 * (ops["a"].astype(cupy.float64) @ ops["b"].astype(cupy.float64)) + 1.25 * c0.astype(cupy.float64)
            spec.run(kernel, problem, config, ops)
            err = float(cupy.abs(ops["c"].astype(cupy.float64) - want).max() / cupy.abs(want).max())
            assert err <= spec.tolerance(problem), f"{config.name} {layout}: {err}"
    assert len(groups) >= 2, groups


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_dispatch_matches_cublas_for_every_layout(dtype):
    import cupy

    import kgen

    rng = cupy.random.default_rng(0)
    m, n, k = 300, 257, 129
    for ta in (False, True):
        for tb in (False, True):
            a = (rng.random((k, m) if ta else (m, k)) - 0.5).astype(dtype)
            b = (rng.random((n, k) if tb else (k, n)) - 0.5).astype(dtype)
            a, b = (a.T if ta else a), (b.T if tb else b)
            got = kgen.gemm(a, b)
            want = a.astype(cupy.float64) @ b.astype(cupy.float64)
            err = float(cupy.abs(got.astype(cupy.float64) - want).max() / cupy.abs(want).max())
            assert err <= DTYPES[dtype][5], (ta, tb, err)


def test_dispatch_empty_and_errors():
    import cupy
    import numpy as np

    import kgen

    a = cupy.ones((0, 5), dtype=cupy.float32)
    b = cupy.ones((5, 3), dtype=cupy.float32)
    assert kgen.gemm(a, b).shape == (0, 3)
    c = cupy.full((4, 3), 7.0, dtype=cupy.float32)
    out = kgen.gemm(cupy.ones((4, 0), dtype=cupy.float32), cupy.ones((0, 3), dtype=cupy.float32), c, beta=0.5)
    assert bool((out == 3.5).all())
    with pytest.raises(kgen.DeviceError):
        kgen.gemm(np.ones((2, 2), np.float32), b[:2, :2])
    with pytest.raises(kgen.DtypeError):
        kgen.gemm(cupy.ones((2, 2), cupy.int32), cupy.ones((2, 2), cupy.int32))
    with pytest.raises(kgen.ShapeError):
        kgen.gemm(cupy.ones((2, 3), cupy.float32), cupy.ones((2, 3), cupy.float32))
    with pytest.raises(kgen.LayoutError):
        kgen.gemm(cupy.ones((8, 8), cupy.float32)[::2, ::2], cupy.ones((4, 4), cupy.float32))


def test_planted_faults_fail_their_trials_and_the_tune_completes():
    from kgen.db import MemoryStore
    from kgen.runners import LocalGPURunner
    from kgen.search import Tuner

    spec, target = GemmSimt(), _target()
    problem = gemm_problem(256, 256, 256, "float32", "NN")
    configs = spec.space(problem, target).sample(4, seed=11)
    planted = {configs[0].name: "crash", configs[1].name: "hang", configs[2].name: "wrong",
               configs[3].name: "overrun"}
    db = MemoryStore()
    with LocalGPURunner((0,), target.l2_bytes, timeout_s=20, planted=planted) as runner:
        tuner = Tuner(spec, problem, target, runner, db, sampler="random", seed=1, warm_start=False)
        tuner._first_configs = lambda: [c.as_dict() for c in configs]   # planted ones first
        result = tuner.run(trials=10)
    kinds = {m.config_name: (m.failure.kind if m.failure else None) for m in result.trials}
    assert kinds[configs[0].name] == "runtime"
    assert kinds[configs[1].name] == "timeout"
    assert kinds[configs[2].name] == "correctness"
    overrun = next(m for m in result.trials if m.config_name == configs[3].name)
    assert overrun.failure.kind == "runtime" and "out-of-bounds write" in overrun.failure.detail
    assert result.best is not None and result.measured == 10
    assert len(db.records("gemm", problem.key)) == 10
