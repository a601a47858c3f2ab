"""Exact float32 conv2d (conv2d_simt) on the GPU: untuned picks and sampled configs (split-K
among them) on odd shapes against the float64 convolution at float32's tolerance (tf32 would
miss it), NaN-poisoned outputs; ``kgen.conv2d`` on float32 CuPy arrays (no precision given:
the CUDA-core family, exact) and on channels-last PyTorch tensors under autograd, whose
gradients (kgen's exact convolutions and GEMMs) match PyTorch's in float64."""

from __future__ import annotations

import pytest

from kgen.kernels.conv.conv2d_simt import Conv2dSimt
from kgen.kernels.conv.problem import conv2d_problem

from memory_gpu import check_config, target

pytestmark = pytest.mark.gpu

SPEC = Conv2dSimt()
ODD = [
    (3, 17, 19, 20, 24, 3, 3, 1, 2, 2),          # dilation 2, C = 20
    (2, 45, 45, 3, 64, 7, 7, 2, 3, 1),           # the stem: C = 3, 7x7 stride 2
    (5, 1, 1, 72, 40, 1, 1, 1, 0, 1),            # 1x1 image
    (1, 9, 7, 6, 9, 3, 5, (2, 1), (0, 2), 1),    # rectangular window and strides, K = 9, C = 6
    (2, 14, 14, 256, 136, 3, 3, 2, 1, 1),        # long K (2304), stride 2
]
EPILOGUES = ("bias_relu", "none", "bias_gelu", "relu", "none")


def _problem(shape, epilogue="none"):
    n, h, w, c, k, r, s, stride, padding, dilation = shape
    return conv2d_problem(n, h, w, c, k, r, s, stride=stride, padding=padding, dilation=dilation, dtype="float32",
                          epilogue=epilogue, family="conv2d_simt")


@pytest.mark.parametrize("index", range(len(ODD)))
def test_untuned_and_sampled_configs_are_exact(index):
    problem = _problem(ODD[index], EPILOGUES[index])
    space = SPEC.space(problem, target())
    configs = [SPEC.default_config(problem, target())] + space.sample(4, seed=index)
    split = [c for c in space.sample(200, seed=index) if c["SK"] > 1][:1]
    assert split or problem["epilogue"] != "none"           # split-K is sampled where it may run
    for seed, config in enumerate(configs + split):
        check, _ = check_config(SPEC, problem, config, seed=seed)
        assert check.ok, f"{config.name} on {problem.key}: {check.detail}"


def test_cupy_float32_is_exact_without_precision():
    import cupy

    import kgen
    from kgen.dispatch import default_dispatcher

    rng = cupy.random.default_rng(7)
    x = rng.random((2, 11, 13, 12), dtype=cupy.float32) - 0.5
    w = rng.random((16, 3, 3, 12), dtype=cupy.float32) - 0.5
    bias = rng.random((16,), dtype=cupy.float32) - 0.5
    y = kgen.conv2d(x, w, bias, padding=1, activation="relu")
    assert isinstance(y, cupy.ndarray) and y.shape == (2, 11, 13, 16) and y.dtype == cupy.float32
    problem = conv2d_problem(2, 11, 13, 12, 16, 3, 3, padding=1, dtype="float32", epilogue="bias_relu",
                             family="conv2d_simt")
    want = SPEC.reference(problem, {"x": x, "w": w, "bias": bias})["y"]
    err = float(cupy.abs(y.astype(cupy.float64) - want).max() / cupy.abs(want).max())
    assert err < 1e-5, err                              # tf32 inputs would be ~1e-3 off
    assert any(p == problem for p, _ in default_dispatcher().loaded("conv2d_simt"))


def test_torch_autograd_in_float32_is_exact():
    torch = pytest.importorskip("torch")
    import kgen

    gen = torch.Generator(device="cuda").manual_seed(3)
    cl = torch.channels_last
    x = (torch.rand((2, 12, 9, 11), device="cuda", generator=gen) - 0.5).to(memory_format=cl).requires_grad_()
    w = (torch.rand((8, 12, 3, 3), device="cuda", generator=gen) - 0.5).to(memory_format=cl).requires_grad_()
    bias = (torch.rand((8,), device="cuda", generator=gen) - 0.5).requires_grad_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = kgen.conv2d(x, w, bias, stride=2, padding=1)
        (y * y).sum().backward()
    side.synchronize()
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, bias))
    yd = torch.nn.functional.conv2d(xd, wd, bd, 2, 1)
    (yd * yd).sum().backward()

    def rel(a, b):
        return float((a.double() - b).abs().max() / b.abs().max())

    assert y.dtype == torch.float32 and y.is_contiguous(memory_format=cl)
    assert rel(y, yd) < 1e-5
    assert rel(x.grad, xd.grad) < 1e-5 and rel(w.grad, wd.grad) < 1e-5 and rel(bias.grad, bd.grad) < 1e-5


def test_the_exported_package_replays_the_shipped_records(tmp_path):
    """``kgen export conv2d_simt`` of this device's shipped records: each exported kernel, run by
    the package (split-K ones zero y first), matches the float64 convolution."""
    import importlib
    import json
    import sys
    from pathlib import Path

    import cupy

    from kgen.export import export_package
    from kgen.problem import Problem

    shipped = Path(__file__).resolve().parents[1] / "tuning_db" / f"{target().slug}_conv2d_simt.jsonl"
    if not shipped.exists():
        pytest.skip(f"no shipped conv2d_simt records for {target().name}")
    best = {}
    for r in map(json.loads, shipped.read_text().splitlines()):
        if r["time_ms"] is not None and (r["problem_key"] not in best or r["time_ms"] < best[r["problem_key"]][0]):
            best[r["problem_key"]] = (r["time_ms"], r["config_name"])
    names = [name for _, name in best.values()]
    shared = max(set(names), key=names.count)               # one config name, two problems: two kernels
    keys = sorted(k for k, (_, name) in best.items() if name == shared)[:2]
    keys += sorted(k for k in best if k not in keys)[:2]
    (tmp_path / "problems.txt").write_text("".join(k + "\n" for k in keys))
    export_package("conv2d_simt", tmp_path / "out", name="simt_pkg", problems=tmp_path / "problems.txt")
    sys.path.insert(0, str(tmp_path / "out"))
    try:
        package = importlib.import_module("simt_pkg")
        for key in package.problems():
            problem = Problem.from_key(key)
            operands = SPEC.inputs(problem, seed=1)
            want = SPEC.reference(problem, operands)["y"]
            package.run(key, **{name: a for name, a in operands.items() if a is not None})
            got = operands["y"].astype(cupy.float64)
            err = float(cupy.abs(got - want).max() / cupy.abs(want).max())
            assert err < 1e-5, (key, package.TABLE["problems"][key]["config"], err)
    finally:
        sys.path.remove(str(tmp_path / "out"))
