"""softmax and rmsnorm on the GPU: random configs against the float64 reference at odd widths
and row counts, rows whose starts are not aligned (and outputs aligned unlike their inputs),
softmax's stability with -Inf and large values, NaN and Inf propagation, rows split over a
cluster of blocks, the user functions
on PyTorch, CuPy and JAX arrays (their type back, n-d inputs, in place, the caller's stream).
Marked ``gpu``; scripts/gpu_check.sh runs them."""

import random
import zlib

import numpy as np
import pytest

from kgen.compile import compile_source
from kgen.kernels.memory.elements import DTYPES
from kgen.kernels.memory.family import decode, encode, poisoned
from kgen.kernels.memory.rownorm import RmsNorm, Softmax, rownorm_problem
from kgen.measure.verify import verify
from kgen.render import render

pytestmark = pytest.mark.gpu

SPECS = {"softmax": Softmax(), "rmsnorm": RmsNorm()}
SHAPES = [(1, 1), (7, 7), (3, 64), (1000, 1000), (5, 4097), (33, 8192), (2, 65536 + 3), (2, 262144)]


def _target():
    from kgen.problem import Target

    return Target.detect(0)


def _kernel(spec, problem, config, target):
    from kgen.measure.launch import CupyKernel

    result = compile_source(render(spec, problem, config, target))
    assert result.failure is None, result.failure
    return CupyKernel(result.binary.cubin, result.binary.entry, result.binary.path)


def _check(spec, problem, config, target, operands=None, seed=0):
    kernel = _kernel(spec, problem, config, target)
    operands = operands or spec.inputs(problem, seed)
    return verify(spec, problem, config, kernel, operands, spec.reference(problem, operands))


@pytest.mark.parametrize("family", sorted(SPECS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_random_configs_are_correct(family, dtype):
    spec, target = SPECS[family], _target()
    rng = random.Random(zlib.crc32(f"{family} {dtype}".encode()))     # the same configs in every process
    for rows, cols in SHAPES:
        problem = rownorm_problem(family, rows, cols, dtype)
        space = spec.space(problem, target)
        configs = space.sample(3, seed=rng.randrange(1 << 30)) + [spec.default_config(problem, target)]
        for config in configs:
            check = _check(spec, problem, config, target)
            assert check.ok, f"{config.name} on {rows} x {cols}: {check.detail}"


def _offset_operands(spec, problem, x_shift: int, out_shift: int, w_shift: int, seed: int = 3):
    """The family's operands with x, out (and rmsnorm's weight) starting ``x_shift``,
    ``out_shift`` (``w_shift``) elements into their buffers (so that no row start, or only
    some, is 16-byte aligned)."""
    ops = spec.inputs(problem, seed)
    if "weight" in ops:
        wbuf = poisoned((problem["cols"] + 8,), problem["dtype"])
        wbuf[w_shift:w_shift + problem["cols"]] = ops["weight"]
        ops["weight"] = wbuf[w_shift:w_shift + problem["cols"]]
    rows, cols, dtype = problem["rows"], problem["cols"], problem["dtype"]
    n = rows * cols
    xbuf = poisoned((n + 8,), dtype)
    xbuf[x_shift:x_shift + n] = ops["x"].reshape(-1)
    obuf = poisoned((n + 8,), dtype)
    ops["x"] = xbuf[x_shift:x_shift + n].reshape(rows, cols)
    ops["out"] = obuf[out_shift:out_shift + n].reshape(rows, cols)
    return ops


@pytest.mark.parametrize("family", sorted(SPECS))
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("hold", ["regs", "smem", "reread", "bulk"])
def test_unaligned_rows_and_outputs(family, dtype, hold):
    """Rows of odd width from an odd offset (each row's head and tail), an output aligned
    unlike the input (the element path; a bulk-copied row is then copied by the threads), a
    weight aligned unlike the rows' bodies."""
    spec, target = SPECS[family], _target()
    if hold == "bulk" and target.cc < (9, 0):
        pytest.skip("the bulk-copy unit is sm_90's")
    vec = 8 if dtype == "bfloat16" else 4
    rng = random.Random(zlib.crc32(f"{family} {dtype} {hold}".encode()))
    for rows, cols in ((9, 4097), (4, 1003), (3, 8192)):
        problem = rownorm_problem(family, rows, cols, dtype)
        configs = [c for c in spec.space(problem, target).configs() if c["HOLD"] == hold and c["VEC"] == vec]
        config = rng.choice(configs)
        for shifts in ((1, 1, 0), (3, 3, 3), (0, 0, 1), (0, 1, 0), (1, 2, 1)):
            ops = _offset_operands(spec, problem, *shifts)
            check = _check(spec, problem, config, target, ops)
            assert check.ok, f"{config.name} on {rows} x {cols}, shifts x/out/w {shifts}: {check.detail}"


@pytest.mark.parametrize("family", sorted(SPECS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_bulk_copied_rows_in_every_number_of_pieces(family, dtype):
    """Rows bulk-copied into shared memory in 1 to 8 pieces, at widths whose body a piece count
    does not divide, from aligned and unaligned starts (the threads' copy)."""
    spec, target = SPECS[family], _target()
    if target.cc < (9, 0):
        pytest.skip("the bulk-copy unit is sm_90's")
    for rows, cols in ((300, 50257), (7, 4099), (2, 100003)):
        problem = rownorm_problem(family, rows, cols, dtype)
        bulk = [c for c in spec.space(problem, target).configs() if c["HOLD"] == "bulk"]
        for items in (1, 2, 4, 8):
            for config in [c for c in bulk if c["ITEMS"] == items][-1:]:
                for shifts in ((0, 0, 0), (1, 1, 0)):
                    check = _check(spec, problem, config, target, _offset_operands(spec, problem, *shifts))
                    assert check.ok, f"{config.name} on {rows} x {cols}, shifts {shifts}: {check.detail}"


@pytest.mark.parametrize("family", sorted(SPECS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_split_over_a_cluster(family, dtype):
    """A few long rows split over 2 to 8 blocks: every block's part (the edges in block 0), unaligned
    rows and outputs, and a NaN, a +Inf and large values in one block's part reaching every block."""
    spec, target = SPECS[family], _target()
    if target.cc < (9, 0):
        pytest.skip("clusters need sm_90")
    rng = random.Random(zlib.crc32(f"split {family} {dtype}".encode()))
    for rows, cols in ((8, 262144), (3, 100003), (5, 65539), (1, 8 * 1024 * 8 + 5)):
        problem = rownorm_problem(family, rows, cols, dtype)
        split = [c for c in spec.space(problem, target).configs() if c["SPLIT"] > 1]
        configs = rng.sample(split, min(3, len(split))) + [spec.default_config(problem, target)]
        for config in configs:
            check = _check(spec, problem, config, target)
            assert check.ok, f"{config.name} on {rows} x {cols}: {check.detail}"
        ops = _offset_operands(spec, problem, 1, 2, 1)
        assert _check(spec, problem, configs[0], target, ops).ok, configs[0].name
    problem = rownorm_problem(family, 4, 65536, dtype)
    ops = spec.inputs(problem, 5)
    x = decode(ops["x"], dtype)
    x[0, 60000] = np.nan                    # in the last block's part only
    x[1, 3] = np.inf
    x[2, 40000] = 60.0                      # a max far from the other parts'
    ops["x"] = encode(x, dtype)
    vec = 4 if dtype == "float32" else 8                  # 16-byte vectors; 8 blocks of 1024 threads
    config = spec.space(problem, target).config(HOLD="regs", VEC=vec, TPR=1024, BLOCK=1024,
                                                ITEMS=65536 // vec // 8 // 1024, SPLIT=8)
    check = _check(spec, problem, config, target, dict(ops))
    assert check.ok, f"{config.name}: {check.detail}"


def _special_rows(cols: int, dtype: str):
    """Rows with -Inf elements, all -Inf, large values, +Inf, NaN; and ordinary ones."""
    import cupy

    big = {"float32": 3e4, "float16": 6e4, "bfloat16": 1e30}[dtype]
    rng = np.random.default_rng(cols)
    x = rng.uniform(-1, 1, (8, cols))
    x[0, ::3] = -np.inf                          # some -Inf: exp gives 0
    x[1, :] = -np.inf                            # all -Inf: NaN (as float64 gives)
    x[2, :] = rng.uniform(-big, big, cols)       # large values, max-subtracted
    x[3, : cols // 2] = big                      # half at the max
    x[4, cols // 3] = np.inf                     # +Inf: NaN
    x[5, cols - 1] = np.nan                      # NaN: NaN
    x[6, :] = rng.uniform(-big, -big / 2, cols)  # every value far below 0
    return encode(cupy.asarray(x, dtype=cupy.float32), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [7, 1000, 4097, 65539])
def test_softmax_is_stable_with_special_values(dtype, cols):
    spec, target = SPECS["softmax"], _target()
    problem = rownorm_problem("softmax", 8, cols, dtype)
    space = spec.space(problem, target)
    configs = [spec.default_config(problem, target)] + space.sample(4, seed=cols)
    for config in configs:
        ops = {"x": _special_rows(cols, dtype), "out": poisoned((8, cols), dtype)}
        check = _check(spec, problem, config, target, ops)
        assert check.ok, f"{config.name}: {check.detail}"
        got = decode(ops["out"], dtype)
        assert bool(np.isnan(got[1].get()).all()) and bool(np.isnan(got[5].get()).all())
        assert float(got[0, 0]) == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_propagates_nan_and_inf(dtype):
    import cupy

    spec, target = SPECS["rmsnorm"], _target()
    for cols in (7, 4097, 65539):
        problem = rownorm_problem("rmsnorm", 4, cols, dtype)
        ops = spec.inputs(problem, 1)
        x = decode(ops["x"], dtype).astype(cupy.float32)
        x[1, cols // 2] = np.nan
        x[2, 0] = np.inf
        ops["x"] = encode(x, dtype)
        for config in [spec.default_config(problem, target)] + spec.space(problem, target).sample(3, seed=cols):
            check = _check(spec, problem, config, target, dict(ops))
            assert check.ok, f"{config.name}: {check.detail}"


def test_default_of_the_headline_shapes_is_correct():
    target = _target()
    for family, rows, cols in (("softmax", 32768, 8192), ("rmsnorm", 32768, 8192), ("softmax", 4096, 50257),
                               ("softmax", 8, 262144)):
        spec = SPECS[family]
        problem = rownorm_problem(family, rows, cols, "bfloat16")
        check = _check(spec, problem, spec.default_config(problem, target), target)
        assert check.ok, f"{family} {rows} x {cols}: {check.detail}"


# ---------------------------------------------------------------- the user functions

def _torch():
    return pytest.importorskip("torch")


def test_torch_callers_get_tensors_back_n_d_and_in_place():
    torch = _torch()
    import kgen

    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(3, 5, 1000, device="cuda", dtype=dtype)
        w = torch.rand(1000, device="cuda", dtype=dtype) + 0.5
        y = kgen.softmax(x)
        assert isinstance(y, torch.Tensor) and y.dtype == dtype and y.shape == x.shape
        assert torch.allclose(y.float(), torch.softmax(x.float(), -1), atol=2e-2 if dtype != torch.float32 else 1e-5)
        r = kgen.rmsnorm(x, w, 1e-5)
        want = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()
        assert isinstance(r, torch.Tensor) and r.dtype == dtype
        assert torch.allclose(r.float(), want, rtol=2e-2 if dtype != torch.float32 else 1e-5, atol=1e-2)
        z = x.clone()
        got = kgen.softmax(z, out=z)
        assert got is z and torch.allclose(z.float(), y.float())
        all_of = kgen.softmax(x, axis=None)
        assert torch.allclose(all_of.float().reshape(-1), torch.softmax(x.float().reshape(-1), 0),
                              atol=1e-3 if dtype != torch.float32 else 1e-7)


def test_cupy_callers_get_cupy_arrays_back():
    import cupy

    import kgen

    x = cupy.random.default_rng(0).standard_normal((7, 4097), dtype=cupy.float32)
    y = kgen.softmax(x)
    assert isinstance(y, cupy.ndarray) and y.dtype == cupy.float32
    e = cupy.exp(x.astype(cupy.float64) - x.max(-1, keepdims=True))
    assert float(cupy.abs(y - e / e.sum(-1, keepdims=True)).max()) < 1e-6
    bits = encode(x, "bfloat16")
    w = encode(cupy.full((4097,), 2.0, dtype=cupy.float32), "bfloat16")
    r = kgen.rmsnorm(bits, w, eps=0.0, dtype="bfloat16")
    assert isinstance(r, cupy.ndarray) and r.dtype == cupy.uint16
    want = 2 * decode(bits, "bfloat16") / cupy.sqrt((decode(bits, "bfloat16") ** 2).mean(-1, keepdims=True))
    assert float(cupy.abs(decode(r, "bfloat16") - want).max()) < 2e-2 * float(cupy.abs(want).max())


def test_jax_callers_get_jax_arrays_back():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import kgen

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 1000), dtype=jnp.bfloat16)
    y = kgen.softmax(x)
    assert isinstance(y, jax.Array) and y.dtype == jnp.bfloat16
    assert float(jnp.abs(y.astype(jnp.float32) - jax.nn.softmax(x.astype(jnp.float32), -1)).max()) < 1e-2
    with pytest.raises(kgen.InputError):
        kgen.softmax(x, out=x)


def test_torch_stream_is_respected():
    """The kernel runs on PyTorch's current stream: it sees what that stream wrote before it,
    behind a long sleep, and never what the default stream would have seen."""
    torch = _torch()
    import kgen

    x = torch.zeros(4096, 8192, device="cuda", dtype=torch.bfloat16)
    fresh = torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(8192, device="cuda", dtype=torch.bfloat16) + 0.5
    y = torch.empty_like(x)
    r = torch.empty_like(x)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)          # ~0.1 s of GPU time on the side stream
        x.copy_(fresh)
        kgen.softmax(x, out=y)
        kgen.rmsnorm(x, w, 1e-6, out=r)
    side.synchronize()
    assert torch.allclose(y.float(), torch.softmax(fresh.float(), -1), atol=1e-2)
    want = fresh.float() * torch.rsqrt(fresh.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    assert torch.allclose(r.float(), want, rtol=2e-2, atol=2e-2)
