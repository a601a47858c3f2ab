"""The reduce family on the GPU: configs of every strategy against a float64 reference at odd
sizes, NaN and Inf, bitwise reproducible deterministic sums, the workspace left zeroed, and
``kgen.reduce`` on CuPy, PyTorch and JAX arrays (their type back, their stream, empty arrays,
indices past 2^31). Marked ``gpu``; scripts/gpu_check.sh runs them."""

from __future__ import annotations

import math
import random
import zlib

import numpy as np
import pytest

from kgen.compile import CompilePool
from kgen.kernels.memory.elements import DTYPES
from kgen.kernels.memory.family import decode, encode
from kgen.kernels.memory.reduce import OPS, SPLITTING, STATE_BYTES, Reduce, reduce_problem, reference_reduce
from kgen.measure.verify import verify
from kgen.render import render

pytestmark = pytest.mark.gpu

SPEC = Reduce()
SHAPES = [(1, 1), (1, 31), (1, 1000003), (7, 4097), (3000, 1), (33, 1000), (5000, 67), (3, 3), (2, 300007)]


def _target():
    from kgen.problem import Target

    return Target.detect(0)


def _kernels(pairs):
    """{config name: loaded kernel} of (problem, config) pairs, compiled in parallel."""
    from kgen.measure.launch import CupyKernel

    target = _target()
    with CompilePool(8) as pool:
        futures = {c.name: pool.submit(render(SPEC, p, c, target)) for p, c in pairs}
        results = {name: f.result() for name, f in futures.items()}
    failed = {n: r.failure.detail[:300] for n, r in results.items() if r.failure is not None}
    assert not failed, failed
    return {n: CupyKernel(r.binary.cubin, r.binary.entry, r.binary.path) for n, r in results.items()}


def _configs(problem, rng):
    """The default, and one random config of each strategy (a warp of one row, and a warp of
    several rows, count as two)."""
    target = _target()
    groups: dict[tuple, list] = {}
    for c in SPEC.space(problem, target).configs():
        groups.setdefault((c["STRATEGY"], c["LANES"] == 32), []).append(c)
    picked = [SPEC.default_config(problem, target)] + [rng.choice(g) for _, g in sorted(groups.items())]
    return list({c.name: c for c in picked}.values())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_configs_of_every_strategy_are_correct(op, dtype):
    rng = random.Random(zlib.crc32(f"{op} {dtype}".encode()))      # the same configs in every process
    pairs = [(p, c) for rows, cols in SHAPES for p in [reduce_problem(op, rows, cols, dtype)]
             for c in _configs(p, rng)]
    kernels = _kernels(pairs)
    by_problem: dict = {}
    for problem, config in pairs:
        by_problem.setdefault(problem, []).append(config)
    for problem, configs in by_problem.items():
        operands = SPEC.inputs(problem, seed=len(configs))
        expected = SPEC.reference(problem, operands)
        for config in configs:
            check = verify(SPEC, problem, config, kernels[config.name], operands, expected)
            assert check.ok, f"{config.name} on {problem.key}: {check.detail}"
        assert not bool(operands["workspace"][:STATE_BYTES].any()), f"{problem.key}: counters left dirty"


def _plant_specials(x, dtype: str):
    """Rows of x: a NaN early and late; +inf; -inf then +inf; all -inf; NaN last; all equal."""
    import cupy

    rows, cols = x.shape
    special = encode(cupy.asarray([math.nan, math.inf, -math.inf, 0.25], dtype=cupy.float32), dtype)
    nan, inf, ninf, quarter = (special[i] for i in range(4))
    x[0, min(3, cols - 1)] = nan
    x[0, cols - 2] = nan
    x[1, cols // 2] = inf
    x[2, 1] = ninf
    x[2, cols - 1] = inf
    x[3, :] = ninf
    x[4, cols - 1] = nan
    x[5, :] = quarter


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_nan_and_inf_propagate(op, dtype):
    rng = random.Random(zlib.crc32(f"special {op} {dtype}".encode()))
    pairs = [(p, c) for cols in (33, 70001) for p in [reduce_problem(op, 8, cols, dtype)] for c in _configs(p, rng)]
    kernels = _kernels(pairs)
    for problem, config in pairs:
        operands = SPEC.inputs(problem, seed=3)
        _plant_specials(operands["x"], dtype)
        expected = SPEC.reference(problem, operands)
        check = verify(SPEC, problem, config, kernels[config.name], operands, expected)
        assert check.ok, f"{config.name} on {problem.key}: {check.detail}"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_deterministic_sums_give_the_same_bits_every_run(dtype):
    import cupy

    target = _target()
    pairs = []
    for rows, cols in ((1, 4000037), (3, 3000017), (200, 100003)):
        problem = reduce_problem("sum", rows, cols, dtype, deterministic=True)
        space = SPEC.space(problem, target)
        assert all(c["STRATEGY"] != "split_atomic" for c in space.configs())
        splits = [c for c in space.configs() if c["STRATEGY"] == "split"]
        chosen = [SPEC.default_config(problem, target)] + random.Random(rows).sample(splits, min(3, len(splits)))
        pairs += [(problem, c) for c in {c.name: c for c in chosen}.values()]
    kernels = _kernels(pairs)
    for problem, config in pairs:
        ops = SPEC.inputs(problem, seed=9)
        SPEC.run(kernels[config.name], problem, config, ops)
        first = ops["out"].copy()
        for _ in range(20):
            ops["out"].fill(0)
            SPEC.run(kernels[config.name], problem, config, ops)
            assert bool(cupy.array_equal(ops["out"].view(cupy.uint8), first.view(cupy.uint8))), config.name
        check = SPEC.check(problem, ops, SPEC.reference(problem, ops))
        assert check.ok, f"{config.name}: {check.detail}"


def test_user_function_deterministic_repeats_bitwise():
    import cupy

    import kgen

    x = cupy.random.default_rng(4).random(5_000_011, dtype=cupy.float32)
    first = kgen.reduce(x, "sum", axis=None, deterministic=True)
    for _ in range(20):
        again = kgen.reduce(x, "sum", axis=None, deterministic=True)
        assert again.view(cupy.uint32) == first.view(cupy.uint32)
    assert abs(float(first) - float(x.astype(cupy.float64).sum())) <= 1e-5 * float(first)


# ---------------------------------------------------------------- kgen.reduce on the caller's arrays

def _close(got, want, dtype):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[dtype]
    scale = max(1.0, float(np.nanmax(np.abs(want))) if want.size else 1.0)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert float(np.nanmax(np.abs(got - want), initial=0.0)) <= tol * scale


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_torch_caller_gets_torch_back(op, dtype):
    torch = pytest.importorskip("torch")
    import kgen

    tdtype = getattr(torch, dtype)
    x = torch.rand(37, 1001, device="cuda").to(tdtype)
    fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin, "argmax": torch.argmax}[op]
    for axis, dim in ((-1, -1), (None, None)):
        got = kgen.reduce(x, op, axis=axis)
        want = fn(x.float(), dim=dim) if dim is not None else (fn(x.float()) if op != "argmax" else torch.argmax(x.float()))
        assert isinstance(got, torch.Tensor) and got.device == x.device
        assert got.dtype == (torch.int64 if op == "argmax" else tdtype)
        assert tuple(got.shape) == tuple(want.shape)
        if op == "argmax":
            assert torch.equal(got, want)            # ties: the first index, as PyTorch
        else:
            _close(got.float().cpu().numpy(), want.double().cpu().numpy(), dtype)
    out = torch.empty(37, dtype=torch.int64 if op == "argmax" else tdtype, device="cuda")
    assert kgen.reduce(x, op, out=out) is out


@pytest.mark.parametrize("op", OPS)
def test_cupy_caller_gets_cupy_back(op):
    import cupy

    import kgen

    x = cupy.random.default_rng(1).standard_normal((4, 5, 301), dtype=cupy.float32)
    x64 = x.astype(cupy.float64)
    for axis, rows_shape in ((-1, (4, 5)), ((1, 2), (4,)), (None, ())):
        got = kgen.reduce(x, op, axis=axis)
        assert isinstance(got, cupy.ndarray) and got.shape == rows_shape
        flat = x64.reshape(math.prod(rows_shape) if rows_shape else 1, -1)
        want = reference_reduce(cupy, flat, op).reshape(rows_shape)
        if op == "argmax":
            assert got.dtype == cupy.int64 and bool((got == want).all())
        else:
            assert got.dtype == cupy.float32
            _close(cupy.asnumpy(got), cupy.asnumpy(want), "float32")
    bits = encode(x, "bfloat16")                   # uint16 holding bfloat16
    got = kgen.reduce(bits, op, dtype="bfloat16")
    want = reference_reduce(cupy, decode(bits, "bfloat16"), op)
    if op == "argmax":
        assert bool((got == want).all())
    else:
        assert got.dtype == cupy.uint16
        _close(cupy.asnumpy(decode(got, "bfloat16")), cupy.asnumpy(want), "bfloat16")


def test_jax_caller_gets_jax_back():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    if jax.default_backend() != "gpu":
        pytest.skip("this JAX has no GPU backend")

    import kgen

    x = jnp.arange(3 * 1000, dtype=jnp.float32).reshape(3, 1000)
    got = kgen.reduce(x, "max")
    assert isinstance(got, jax.Array) and got.shape == (3,)
    assert np.array_equal(np.asarray(got), np.asarray(x).max(axis=-1))
    assert np.asarray(kgen.reduce(x, "argmax")).tolist() == [999, 999, 999]


def test_torch_current_stream_is_used():
    torch = pytest.importorskip("torch")
    import kgen

    x = torch.empty(64, 1 << 20, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)                 # the fill comes late on the side stream
        x.fill_(1.0)
        y = kgen.reduce(x, "sum")
    side.synchronize()
    assert torch.equal(y, torch.full((64,), float(1 << 20), device="cuda"))


def test_empty_arrays():
    import cupy

    import kgen

    assert float(kgen.reduce(cupy.zeros((0,), cupy.float32), "sum", axis=None)) == 0.0
    assert math.isnan(float(kgen.reduce(cupy.zeros((0,), cupy.float32), "mean", axis=None)))
    assert kgen.reduce(cupy.zeros((3, 0), cupy.float16), "sum").tolist() == [0.0, 0.0, 0.0]
    assert kgen.reduce(cupy.zeros((0, 5), cupy.float32), "max").shape == (0,)
    assert kgen.reduce(cupy.zeros((0, 5), cupy.float32), "argmax").dtype == cupy.int64
    for op in ("max", "min", "argmax"):
        with pytest.raises(kgen.ShapeError):
            kgen.reduce(cupy.zeros((0,), cupy.float32), op, axis=None)
    mean = kgen.reduce(cupy.zeros((2, 0), cupy.uint16), "mean", dtype="bfloat16")
    assert bool(cupy.isnan(decode(mean, "bfloat16")).all())
    torch = pytest.importorskip("torch")
    t = kgen.reduce(torch.zeros(4, 0, device="cuda"), "mean")
    assert isinstance(t, torch.Tensor) and t.shape == (4,) and bool(t.isnan().all())
    with pytest.raises(kgen.ShapeError):
        kgen.reduce(torch.zeros(4, 0, device="cuda"), "argmax")


def test_layout_errors_on_real_arrays():
    import cupy

    import kgen

    with pytest.raises(kgen.LayoutError):
        kgen.reduce(cupy.ones((8, 6), cupy.float32).T)
    with pytest.raises(kgen.ShapeError):
        kgen.reduce(cupy.ones((8, 6), cupy.float32), axis=0)
    assert kgen.reduce(cupy.ones((8, 1), cupy.float32), axis=0).tolist() == [8.0]


def test_indices_past_two_to_the_31():
    import cupy

    import kgen

    free, _ = cupy.cuda.runtime.memGetInfo()
    n = (1 << 31) + (1 << 20)
    if free < 3 * n:
        pytest.skip(f"needs {3 * n / 1e9:.1f} GB free on the GPU")
    x = cupy.zeros(n, dtype=cupy.float16)
    x[n - 7] = 1.0
    assert int(kgen.reduce(x, "argmax", axis=None)) == n - 7
    assert float(kgen.reduce(x, "sum", axis=None)) == 1.0
    rows = x[: 2 * ((1 << 30) + 3)].reshape(2, (1 << 30) + 3)
    rows[1, 1 << 30] = 2.0
    assert kgen.reduce(rows, "argmax").tolist() == [0, 1 << 30]
    assert kgen.reduce(rows, "max").tolist() == [0.0, 2.0]
    del x, rows


def test_torch_baseline_matches_the_reference():
    pytest.importorskip("torch")
    import cupy

    for op in OPS:
        problem = reduce_problem(op, 33, 1000, "float32")
        operands = SPEC.inputs(problem, seed=2)
        expected = SPEC.reference(problem, operands)["out"]
        got = cupy.asarray(SPEC.baseline(problem, operands)())
        if op == "argmax":
            assert bool((got == expected).all())
        else:
            assert float(cupy.abs(got - expected).max()) <= 1e-5 * float(cupy.abs(expected).max())


def test_a_short_tune_measures_every_trial():
    from kgen.db import MemoryStore
    from kgen.runners import LocalGPURunner
    from kgen.search import Tuner

    target = _target()
    db = MemoryStore()
    with LocalGPURunner((0,), target.l2_bytes, timeout_s=30) as runner:
        for op in ("sum", "argmax"):
            problem = reduce_problem(op, 3, 3_000_017, "bfloat16")
            result = Tuner(SPEC, problem, target, runner, db, sampler="random", seed=5).run(trials=12)
            failed = [(m.config_name, m.failure.detail) for m in result.trials if m.failure is not None]
            assert not failed, failed
            assert result.best is not None
            assert {m.config["STRATEGY"] for m in result.trials} & set(SPLITTING)
