"""gemm_skinny on the GPU: random configs of every dtype and layout, with random epilogues and
output dtypes, at odd and unaligned sizes with either side the small one, against float64;
split-K launched twice in a row (the tile counters reset), alpha and beta; kgen.gemm choosing
the family for a skinny call. Marked ``gpu``; scripts/gpu_check.sh runs them."""

import random

import pytest

from kgen.kernels.gemm.dtypes import EPILOGUES, allowed_outputs

from compiling import gpu_kernels

pytestmark = pytest.mark.gpu

SHAPES = [(1, 4097, 129), (7, 1000, 777), (16, 33, 5000), (1000, 3, 1023), (4099, 16, 64), (13, 13, 13),
          (2, 517, 16), (9, 2000, 3001)]
LAYOUTS = ("NN", "NT", "TN", "TT")


def _spec_target():
    from kgen.kernels.gemm.skinny import GemmSkinny
    from kgen.problem import Target

    return GemmSkinny(), Target.detect(0)


def _check(spec, cases, seed: int = 0, beta: float = 0.0, twice: bool = False) -> int:
    """Compile (problem, config, source) cases; each checked against float64 on fresh inputs
    (with ``beta``: C random first, alpha 0.75); ``twice``: launched a second time first."""
    import cupy

    from kgen.measure.verify import verify

    failures = []
    for index, (problem, config, kernel) in enumerate(gpu_kernels(cases)):
        operands = spec.inputs(problem, seed=seed + index)
        if twice:
            spec.run(kernel, problem, config, operands)
        if beta:            # C random first (verify would poison it): run and check here
            from kgen.kernels.gemm.tc import to_bf16

            c = operands["c"]
            x = cupy.random.default_rng(seed + index).random(c.shape, dtype=cupy.float32) * 2 - 1
            c[...] = to_bf16(x) if problem["out_dtype"] == "bfloat16" else x.astype(c.dtype)
            operands.update(alpha=0.75, beta=beta)
            expected = spec.reference(problem, operands)
            spec.run(kernel, problem, config, operands)
            cupy.cuda.get_current_stream().synchronize()
            check = spec.check(problem, operands, expected)
        else:
            check = verify(spec, problem, config, kernel, operands, spec.reference(problem, operands))
        if not check.ok:
            failures.append(f"{config.name} {problem.key}: {check.detail}")
    assert not failures, "\n".join(failures[:10])
    return len(cases)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_random_configs_are_correct(dtype):
    from kgen.render import render

    spec, target = _spec_target()
    rng = random.Random(hash(dtype) & 0xFFFF)
    cases = []
    for layout in LAYOUTS:
        for m, n, k in SHAPES:
            problem = spec.problem(m, n, k, dtype, layout, out_dtype=rng.choice(allowed_outputs(dtype)),
                                   epilogue=rng.choice(EPILOGUES))
            space = spec.space(problem, target)
            configs = space.sample(2, seed=rng.randrange(1 << 30)) + [spec.default_config(problem, target)]
            cases += [(problem, config, render(spec, problem, config, target, space)) for config in configs]
    assert _check(spec, cases) >= 90


def test_split_k_runs_twice_and_scales_by_alpha_and_beta():
    from kgen.render import render

    spec, target = _spec_target()
    cases = []
    for dtype, layout, (m, n, k) in [("bfloat16", "NN", (9, 2000, 3001)), ("float16", "NT", (3000, 5, 4099)),
                                     ("float32", "TN", (16, 777, 2049)), ("bfloat16", "TT", (1, 4100, 8191))]:
        problem = spec.problem(m, n, k, dtype, layout)
        space = spec.space(problem, target)
        split = [c for c in space.sample(40, seed=3) if c["SPLITK"] > 1][:3]
        assert split, problem.key
        cases += [(problem, config, render(spec, problem, config, target, space)) for config in split]
    _check(spec, cases, seed=100, beta=0.5, twice=True)


@pytest.mark.parametrize("dtype,layout,shape", [("bfloat16", "TN", (8, 7968, 2480)),
                                                ("float16", "NT", (13128, 16, 1253)),
                                                ("float32", "TT", (510, 8, 1636)),
                                                ("float32-exact", "NN", (4, 3001, 2000))])
def test_kgen_gemm_runs_a_skinny_call_on_gemm_skinny(dtype, layout, shape, monkeypatch):
    """An untuned skinny call (cuBLAS no candidate): dispatch ranks the families' picks and takes
    gemm_skinny; its result matches float64 (float32 asked for as tf32, computed exactly)."""
    import cupy

    import kgen
    from kgen.kernels.gemm.tc import as_float64, to_bf16

    monkeypatch.setenv("KGEN_VENDOR", "0")
    monkeypatch.setenv("KGEN_SKINNY_MAX", "16")
    monkeypatch.setenv("KGEN_SKINNY_DTYPES", "float32,float16,bfloat16")
    exact = dtype == "float32-exact"             # float32 with no tf32: the CUDA-core family's call
    dtype = "float32" if exact else dtype
    m, n, k = shape
    rng = cupy.random.default_rng(5)

    def operand(rows, cols, transposed):
        x = rng.random((cols, rows) if transposed else (rows, cols), dtype=cupy.float32) * 2 - 1
        x = to_bf16(x) if dtype == "bfloat16" else x.astype(dtype)
        return x.T if transposed else x

    a, b = operand(m, k, layout[0] == "T"), operand(k, n, layout[1] == "T")
    options = dict(dtype="bfloat16") if dtype == "bfloat16" else \
        dict(precision="tf32") if dtype == "float32" and not exact else {}
    choice = kgen.gemm_choice(a, b, **options)
    assert choice.family == "gemm_skinny", choice
    c = kgen.gemm(a, b, **options)
    want = as_float64(a, dtype) @ as_float64(b, dtype)
    got = as_float64(c, dtype)
    err = float(cupy.abs(got - want).max() / cupy.abs(want).max())
    assert err < {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}[dtype], err
