"""Tensor-core GEMM on the GPU: random configs of every precision, layout and epilogue at odd
sizes; kgen.gemm on CuPy, PyTorch (bfloat16, streams, CUDA graphs) and JAX arrays.
Marked ``gpu``; scripts/gpu_check.sh runs them."""

import random

import pytest

from compiling import gpu_kernels
from kgen.kernels.gemm.dtypes import EPILOGUES, allowed_outputs
from kgen.measure.verify import verify
from kgen.render import render

pytestmark = pytest.mark.gpu

SHAPES = [(7, 7, 7), (33, 17, 1000), (1000, 520, 776), (1, 4097, 129)]
LAYOUTS = ("NN", "NT", "TN", "TT")


def _target():
    from kgen.problem import Target

    return Target.detect(0)


def _cases(spec, dtype, target, per_shape=2):
    rng = random.Random(hash(dtype) & 0xFFFF)
    for layout in LAYOUTS:
        for m, n, k in SHAPES:
            epilogue = rng.choice(EPILOGUES)
            out = rng.choice(allowed_outputs(dtype))
            problem = spec.problem(m, n, k, dtype, layout, out_dtype=out, epilogue=epilogue)
            space = spec.space(problem, target)
            for config in space.sample(per_shape, seed=rng.randrange(1 << 30)) + [spec.default_config(problem, target)]:
                yield problem, config, render(spec, problem, config, target, space)


def _check_cases(spec, cases, seed_of) -> None:
    """Compile (problem, config, source) cases and check each against the reference, on
    inputs of seed ``seed_of(index, failures so far)``."""
    failures = []
    for index, (problem, config, kernel) in enumerate(gpu_kernels(cases)):
        operands = spec.inputs(problem, seed=seed_of(index, failures))
        check = verify(spec, problem, config, kernel, operands, spec.reference(problem, operands))
        if not check.ok:
            failures.append(f"{config.name} {problem.key}: {check.detail}")
    assert not failures, "\n".join(failures[:10])


def _verify_all(spec, dtype, beta=0.0):
    cases = list(_cases(spec, dtype, _target()))
    _check_cases(spec, cases, lambda index, failures: len(failures))
    return len(cases)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_mma_random_configs_are_correct(dtype):
    from kgen.kernels.gemm.mma import GemmMma

    assert _verify_all(GemmMma(), dtype) >= 40


def test_mma_fp64_copy_and_pipeline_options_are_correct():
    """UC=1 copies tiles that lie wholly inside the matrices with no bounds; FB=2 reads each
    step's fragments during the step before (one mma step a stage, two and four: the template
    unrolls those differently); LP=1 plans each thread's copies once, LP=2 copies whole tiles
    with no bounds. Every layout, at sizes of whole tiles only, of partial ones and of both (k past
    the last tile too), with k slices and a bias."""
    from kgen.kernels.gemm.mma import GemmMma

    spec, target = GemmMma(), _target()
    tiles = [dict(BM=128, BN=64, BK=8, WM=32, WN=32, STAGES=4, WK=1),
             dict(BM=64, BN=64, BK=16, WM=32, WN=32, STAGES=3, WK=1),
             dict(BM=64, BN=64, BK=16, WM=32, WN=32, STAGES=3, WK=2),
             dict(BM=64, BN=128, BK=32, WM=32, WN=32, STAGES=3, WK=1)]
    cases = []
    for layout in LAYOUTS:
        for m, n, k in ((256, 192, 96), (1000, 520, 776), (70, 40, 40)):
            problem = spec.problem(m, n, k, "float64", layout, epilogue="bias" if m == 1000 else "none")
            space = spec.space(problem, target)
            for tile in tiles:
                for uc, fb, lp in ((1, 1, 0), (0, 2, 0), (1, 2, 0), (0, 1, 1), (0, 2, 1), (0, 2, 2)):
                    values = dict(tile, VA=problem["align_a"], VB=problem["align_b"], GM=1, MINB=1, UC=uc, FB=fb,
                                  LP=lp)
                    if space.is_valid(values):
                        config = space.make(values)
                        cases.append((problem, config, render(spec, problem, config, target, space)))
    assert len(cases) >= 150
    assert sum(c["LP"] == 1 for _, c, _ in cases) >= 40 and sum(c["LP"] == 2 for _, c, _ in cases) >= 30
    _check_cases(spec, cases, lambda index, failures: index)


def test_mma_alpha_beta():
    import cupy

    from kgen.kernels.gemm.mma import GemmMma
    from kgen.measure.launch import CupyKernel
    from kgen.compile import compile_source

    spec, target = GemmMma(), _target()
    problem = spec.problem(130, 70, 300, "float16", "TN", out_dtype="float32", epilogue="bias_relu")
    config = spec.default_config(problem, target)
    binary = compile_source(render(spec, problem, config, target)).binary
    kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
    ops = spec.inputs(problem, 5)
    ops["c"] = cupy.random.default_rng(1).random((130, 70), dtype=cupy.float32)
    ops["alpha"], ops["beta"] = 0.5, -2.0
    want = spec.reference(problem, ops)
    spec.run(kernel, problem, config, ops)
    check = spec.check(problem, ops, want)
    assert check.ok, check.detail


def _torch():
    return pytest.importorskip("torch")


def test_gemm_on_torch_bfloat16_with_fused_bias_gelu():
    torch = _torch()
    import kgen

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.rand(300, 512, device="cuda", generator=g).sub_(0.5).to(torch.bfloat16)
    bt = torch.rand(200, 512, device="cuda", generator=g).sub_(0.5).to(torch.bfloat16)
    bias = torch.rand(200, device="cuda", generator=g).to(torch.bfloat16)
    out = kgen.gemm(a, bt.T, bias=bias, activation="gelu")      # B as a transposed view
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (300, 200)
    want = torch.nn.functional.gelu(a.double() @ bt.T.double() + bias.double())
    err = ((out.double() - want).abs().max() / want.abs().max()).item()
    assert err < 1e-2, err


def test_gemm_on_cupy_uint16_bits_as_bfloat16():
    import cupy

    import kgen
    from kgen.kernels.gemm.tc import from_bf16, to_bf16

    rng = cupy.random.default_rng(3)
    a = to_bf16(rng.random((65, 129), dtype=cupy.float32) - 0.5)
    b = to_bf16(rng.random((129, 33), dtype=cupy.float32) - 0.5)
    out = kgen.gemm(a, b, dtype="bfloat16", out_dtype="float32")
    assert out.dtype == cupy.float32
    want = from_bf16(a).astype(cupy.float64) @ from_bf16(b).astype(cupy.float64)
    assert float(cupy.abs(out - want).max() / cupy.abs(want).max()) < 1e-4


def test_gemm_float16_and_float64_on_cupy_return_cupy():
    import cupy

    import kgen

    rng = cupy.random.default_rng(4)
    for dtype, tol in (("float16", 2e-3), ("float64", 1e-12)):
        a = (rng.random((257, 100)) - 0.5).astype(dtype)
        b = (rng.random((300, 100)) - 0.5).astype(dtype).T
        out = kgen.gemm(a, b)
        assert isinstance(out, cupy.ndarray) and out.dtype == dtype
        want = a.astype(cupy.float64) @ b.astype(cupy.float64)
        assert float(cupy.abs(out - want).max() / cupy.abs(want).max()) < tol


def test_gemm_tf32_is_opt_in():
    import cupy

    import kgen

    rng = cupy.random.default_rng(5)
    a = rng.random((512, 512), dtype=cupy.float32)
    b = rng.random((512, 512), dtype=cupy.float32)
    out = kgen.gemm(a, b, precision="tf32")
    want = a.astype(cupy.float64) @ b.astype(cupy.float64)
    err = float(cupy.abs(out - want).max() / cupy.abs(want).max())
    # tf32's rounding shows, within tolerance: on operands of one sign, an MMA that truncates
    # them to tf32 (wgmma) runs up to 2^-10 low in every product
    assert 1e-7 < err < 2e-3, err


def test_gemm_runs_on_the_callers_torch_stream_and_in_a_cuda_graph():
    torch = _torch()
    import kgen

    a = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 384, device="cuda", dtype=torch.float16)
    c = torch.empty(512, 384, device="cuda", dtype=torch.float16)
    want = (a.float() @ b.float())
    side = torch.cuda.Stream()
    kgen.gemm(a, b, c)               # the first call plans and loads outside the stream
    torch.cuda.synchronize()
    c.fill_(float("nan"))
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)     # keep the side stream busy: a launch elsewhere would overtake
        kgen.gemm(a, b, c)
    side.synchronize()
    assert ((c.float() - want).abs().max() / want.abs().max()).item() < 2e-3

    graph = torch.cuda.CUDAGraph()
    c.fill_(float("nan"))
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        kgen.gemm(a, b, c)
    graph.replay()
    torch.cuda.synchronize()
    assert ((c.float() - want).abs().max() / want.abs().max()).item() < 2e-3


def test_split_k_plans_keep_one_workspace_per_stream():
    """Two PyTorch streams running one split-K plan at once each sum into their own workspace."""
    torch = _torch()
    import kgen
    from kgen.kernels.gemm import workspace

    a = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    want = a.float() @ b.float()
    c1, c2 = (torch.full((64, 4096), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2))
    _split_k_plan(torch, a, b, c1)
    torch.cuda.synchronize()
    c1.fill_(float("nan"))
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(s1):
        torch.cuda._sleep(20_000_000)
        kgen.gemm(a, b, c1)
    with torch.cuda.stream(s2):
        kgen.gemm(a, b, c2)
    torch.cuda.synchronize()
    streams = {key[1] for key in workspace.WORKSPACES}
    assert {s1.cuda_stream, s2.cuda_stream} <= streams
    for c in (c1, c2):
        assert ((c.float() - want).abs().max() / want.abs().max()).item() < 1e-2


def _split_k_plan(torch, a, b, c):
    """The plan of a bfloat16 a @ b after one call (a skip when its kernel does not split K)."""
    import kgen
    from kgen.dispatch import default_dispatcher

    kgen.gemm(a, b, c)
    m, k = a.shape
    plan = next(p for p in default_dispatcher().plans.values() if getattr(p, "problem", None) is not None
                and p.problem["m"] == m and p.problem["k"] == k and p.problem["dtype"] == "bfloat16")
    if plan.config.get("SPLITK", 1) == 1:
        pytest.skip(f"the kernel for {m}x{b.shape[1]}x{k} ({plan.config.name}) does not split K")
    return plan


def test_split_k_plan_in_a_cuda_graph_captured_on_a_new_stream():
    """The first split-K launch on a stream being captured makes that stream's workspace."""
    torch = _torch()
    import kgen
    from kgen.kernels.gemm import workspace

    a = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    c = torch.full((64, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
    want = a.float() @ b.float()
    _split_k_plan(torch, a, b, c)
    torch.cuda.synchronize()
    c.fill_(float("nan"))
    stream, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        kgen.gemm(a, b, c)
    assert stream.cuda_stream in {key[1] for key in workspace.WORKSPACES}
    for _ in range(2):       # the counters are back at zero after each replay
        graph.replay()
        torch.cuda.synchronize()
        assert ((c.float() - want).abs().max() / want.abs().max()).item() < 1e-2
        c.fill_(float("nan"))


def test_gemm_on_jax_bfloat16():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    import kgen

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    key = jax.random.PRNGKey(0)
    a = jax.random.normal(key, (96, 200), dtype=jnp.bfloat16)
    b = jax.random.normal(jax.random.PRNGKey(1), (200, 72), dtype=jnp.bfloat16)
    out = kgen.gemm(a, b)
    assert isinstance(out, jax.Array) and out.dtype == jnp.bfloat16
    want = a.astype(jnp.float32) @ b.astype(jnp.float32)
    err = float(jnp.abs(out.astype(jnp.float32) - want).max() / jnp.abs(want).max())
    assert err < 1e-2, err
