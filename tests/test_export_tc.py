"""``kgen export`` of the tensor-core GEMM families (gemm_mma, gemm_wgmma): the recipe an
exported package replays gives exactly the arguments kgen's own launch builds (every layout,
swapped, split-K, TMA store, staged and register-fed configs; checked with no GPU, the driver's
encoder replaced by a recorder), the package holds cubin and PTX and imports with nothing
installed, its problem keys are kgen's, and on the GPU its results are kgen's."""

from __future__ import annotations

import collections

import json
import subprocess
import sys
import venv
from types import SimpleNamespace

import numpy as np
import pytest

from kgen import tma, tma_encode
from typer.testing import CliRunner

from kgen.cli import app
from kgen.export_runtime import replay
from kgen.kernels.gemm import wgmma as wgmma_module, workspace as workspace_module
from kgen.problem import Target
from kgen.registry import get_spec

TARGET = Target.h200()
PA, PB, PC, PBIAS, STREAM, DEVICE = 0x10000, 0x200000, 0x3000000, 0x40000000, 7, 0
WORKSPACE = (np.uint64(0x5000), np.uint64(0x6000))


def _fake_encode(ptr, dtype, dims, row_stride_bytes, box, swizzle_bytes, call=None):
    return tma_encode.words_to_desc([ptr, *dims, row_stride_bytes, *box, swizzle_bytes, len(dtype)] + [0] * 8)


@pytest.fixture
def fake_driver(monkeypatch):
    """Both encoders (kgen.tma's and the exported runtime's) record instead of calling the driver;
    split-K workspaces exist already for (DEVICE, STREAM)."""
    tma.clear_cache()
    replay._MAPS.clear()
    monkeypatch.setattr(tma, "_driver_encode", lambda *a: _fake_encode(*a))
    monkeypatch.setattr(tma_encode, "encode_tiled", _fake_encode)
    monkeypatch.setattr(workspace_module, "WORKSPACES", _FilledWorkspaces())
    monkeypatch.setattr(replay, "_WORKSPACES", _FilledWorkspaces(replay=True))
    yield
    tma.clear_cache()
    replay._MAPS.clear()


class _FilledWorkspaces(dict):
    def __init__(self, replay=False):
        super().__init__()
        self.replay = replay

    def __missing__(self, key):
        return None

    def get(self, key, default=None):
        if self.replay:
            return (None, WORKSPACE[0] if key[2] == "partials" else WORKSPACE[1])
        return (None, None, *WORKSPACE)


def _cases():
    """(family, problem, config, lds) over the configs' kinds and the layouts."""
    out = []
    for family in ("gemm_mma", "gemm_wgmma", "gemm_skinny"):
        spec = get_spec(family)
        for dtype in ("bfloat16", "float16", "float32"):
            for layout in ("NN", "NT", "TN", "TT"):
                for m, n, k, epilogue in ((1000, 520, 776, "bias"), (1, 4096, 4096, "none"), (64, 8192, 8192, "relu"),
                                          (4096, 4096, 4096, "bias_gelu"), (3000, 7, 2999, "bias_relu")):
                    problem = spec.problem(m, n, k, dtype, layout, epilogue=epilogue)
                    if not spec.supports(problem, TARGET):
                        continue
                    space = spec.space(problem, TARGET)
                    configs = [spec.default_config(problem, TARGET), *space.sample(6, seed=m + n + len(layout))]
                    lda = k if layout[0] == "N" else m
                    ldb = n if layout[1] == "N" else k
                    for config in configs:
                        for ldc in (n, n + 3):        # + 3: C's rows not 16-byte aligned, no TMA store
                            out.append((family, problem, config, (lda, ldb, ldc)))
    return out


CASES = _cases()


def _same(got, want) -> bool:
    if isinstance(want, np.void):
        return isinstance(got, np.void) and got.tobytes() == want.tobytes()
    return type(got) is type(want) and got == want


def test_the_cases_cover_every_kind_of_config():
    wgmma = [config for family, _, config, _ in CASES if family == "gemm_wgmma"]
    for flag in ("TMA_STORE", "RS", "XS", "CLUSTER", "PINGPONG"):
        assert any(config.get(flag, 0) > (1 if flag == "CLUSTER" else 0) for config in wgmma), flag
    assert any(config.get("SPLITK", 1) > 1 for config in wgmma)
    assert any(wgmma_module.swapped(problem, config) for family, problem, config, _ in CASES if family == "gemm_wgmma")


@pytest.mark.parametrize("index", range(0, len(CASES), max(1, len(CASES) // 120)))
def test_recipe_replays_kgens_own_arguments(fake_driver, index):
    family, problem, config, lds = CASES[index]
    spec = get_spec(family)
    want = spec.arg_builder(problem, config, lds)(PA, PB, PC, PBIAS, 1.5, 0.25, STREAM, DEVICE)
    recipe = json.loads(json.dumps(spec.arg_recipe(problem, config)))        # as table.json holds it
    operands = {"a": (PA, lds[0]), "b": (PB, lds[1]), "c": (PC, lds[2]), "bias": (PBIAS, 1)}
    got = replay.arguments(recipe, operands, {"alpha": 1.5, "beta": 0.25}, DEVICE, STREAM)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert _same(g, w), f"{config.name} on {problem.key}: argument {i}: {g!r} != {w!r}"
    assert all(_same(t, type(w)(0) if not isinstance(w, np.void) else tma_encode.EMPTY_DESC)
               for t, w in zip(replay.template(recipe), want))


def _conv_cases():
    from kgen.kernels.conv.problem import conv2d_problem

    spec = get_spec("conv2d_wgmma")
    out = []
    for shape, stride, padding, dilation, dtype, epilogue in [
            ((64, 56, 56, 64, 64, 3, 3), 1, 1, 1, "bfloat16", "none"), ((2, 14, 14, 256, 512, 3, 3), 2, 1, 1, "float16",
                                                                       "bias_relu"),
            ((1, 7, 7, 512, 2048, 1, 1), 1, 0, 1, "bfloat16", "bias"), ((4, 30, 20, 64, 96, 3, 3), 1, 2, 2,
                                                                      "float32", "none")]:
        problem = conv2d_problem(*shape, stride=stride, padding=padding, dilation=dilation, dtype=dtype,
                                 epilogue=epilogue, family="conv2d_wgmma")
        if spec.supports(problem, TARGET):
            for config in [spec.default_config(problem, TARGET), *spec.space(problem, TARGET).sample(8, seed=1)]:
                out.append((problem, config))
    return out


def _fake_im2col(ptr, dtype, nhwc, window, stride, padding, dilation, channels, pixels, swizzle):
    return tma_encode.words_to_desc([ptr, *nhwc, *window, *stride, *padding, *dilation, channels, pixels, swizzle])


def _assert_recipe_replays_args(monkeypatch, family: str, module, problem, configs, pointers: dict) -> None:
    """The export recipe of each config, replayed on ``pointers``, gives the arguments the
    family's ``args`` gives (its im2col maps encoded by a stand-in, its split-K workspace
    kgen's own on (DEVICE, STREAM) rather than CuPy's current ones)."""
    monkeypatch.setattr(tma_encode, "encode_im2col", _fake_im2col)
    real = wgmma_module.workspace_args
    monkeypatch.setattr(module, "workspace_args",
                        lambda *a, **k: lambda stream=None, device=None: real(*a, **k)(STREAM, DEVICE))
    monkeypatch.setattr(module, "device_pointer", lambda value, name: value)
    spec = get_spec(family)
    for config in configs:
        want = spec.args(problem, config, pointers)
        recipe = json.loads(json.dumps(spec.arg_recipe(problem, config)))
        got = replay.arguments(recipe, {name: (ptr, 0) for name, ptr in pointers.items()}, {}, DEVICE, STREAM)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert _same(g, w), f"{config.name} on {problem.key}: argument {i}: {g!r} != {w!r}"


@pytest.mark.parametrize("index", range(len(_conv_cases())))
def test_conv_recipe_replays_kgens_own_arguments(fake_driver, monkeypatch, index):
    import kgen.kernels.conv.conv2d_wgmma as conv_module

    problem, config = _conv_cases()[index]
    _assert_recipe_replays_args(monkeypatch, "conv2d_wgmma", conv_module, problem, [config],
                                {"x": PA, "w": PB, "y": PC, "bias": PBIAS})


@pytest.mark.parametrize("stride, padding", [(1, 1), (2, 1), (2, 0)])
def test_weight_gradient_recipe_replays_kgens_own_arguments(fake_driver, monkeypatch, stride, padding):
    import kgen.kernels.conv.conv2d_wgrad_wgmma as wgrad_module

    spec = get_spec("conv2d_wgrad_wgmma")
    problem = wgrad_module.wgrad_problem(64, 28, 28, 128, 128, 3 if padding else 1, 3 if padding else 1,
                                         stride=stride, padding=padding)
    configs = [spec.default_config(problem, TARGET), *spec.space(problem, TARGET).sample(6, seed=2)]
    _assert_recipe_replays_args(monkeypatch, "conv2d_wgrad_wgmma", wgrad_module, problem, configs,
                                {"x": PA, "dy": PB, "dw": PC})


def test_batched_recipe_fixes_the_leading_dimensions():
    from kgen.kernels.gemm.batched import batched_problem, leading_dims

    spec = get_spec("gemm_batched")
    problem = batched_problem(8, 100, 72, 40, "bfloat16", "NT", "b", epilogue="bias")
    config = spec.default_config(problem, TARGET)
    build = spec.arg_builder(problem, config, leading_dims(problem))
    want = build(PA, PB, PC, PBIAS, 1.0, 0.0)
    got = replay.arguments(json.loads(json.dumps(spec.arg_recipe(problem, config))),
                           {"a": (PA, 0), "b": (PB, 0), "c": (PC, 0), "bias": (PBIAS, 0)}, {})
    assert all(_same(g, w) for g, w in zip(got, want)) and len(got) == len(want)


def test_recipe_errors_name_what_is_missing():
    with pytest.raises(replay.RecipeError, match="'a'"):
        replay.arguments([{"pointer": "a"}], {}, {})
    with pytest.raises(replay.RecipeError, match="unknown"):
        replay.arguments([{"what": 1}], {}, {})
    assert replay.arguments([{"pointer": "bias", "optional": True}], {}, {}) == (np.uint64(0),)


# ---- the package -----------------------------------------------------------------------------

EXPORTED = {
    "gemm_mma": "gemm_mma|align_a=4|align_b=8|dtype=bfloat16|epilogue=none|k=700|layout=NN|m=3000|n=5000|"
                "out_dtype=bfloat16|precision=native",
    "gemm_wgmma": "gemm_wgmma|align_a=8|align_b=8|dtype=bfloat16|epilogue=none|k=8192|layout=NN|m=1|n=8192|"
                  "out_dtype=bfloat16|precision=native",
}


def _export(family: str, key: str, folder, name: str, device: str) -> str:
    """``kgen export FAMILY --problems`` of the one problem ``key`` into ``folder``/``name``
    through the CLI; its output."""
    listing = folder / f"{name}.txt"
    listing.write_text(key + "\n")
    done = CliRunner().invoke(app, ["export", family, "-o", str(folder), "--name", name, "--problems", str(listing),
                                    "--device", device])
    assert done.exit_code == 0, done.output
    return done.output


@pytest.fixture(scope="module", params=sorted(EXPORTED))
def exported(request, tmp_path_factory):
    family = request.param
    out = tmp_path_factory.mktemp(f"export-{family}")
    output = _export(family, EXPORTED[family], out, f"tc_{family}", "NVIDIA H200")
    summary = SimpleNamespace(path=out / f"tc_{family}", problems=int(output.split(": ")[1].split()[0]))
    return family, out, summary


def test_package_holds_kernels_and_recipes(exported):
    family, out, summary = exported
    table = json.loads((summary.path / "table.json").read_text())
    assert summary.problems == 1 and table["family"] == family
    entry = table["problems"][EXPORTED[family]]
    name = entry["config"]
    assert (summary.path / "kernels" / f"{name}.cubin").stat().st_size > 1000
    assert f".entry {name}" in (summary.path / "kernels" / f"{name}.ptx").read_text()
    assert entry["args"] == json.loads(json.dumps(get_spec(family).arg_recipe(
        get_spec(family).problem(**{k: v for k, v in entry["problem"].items() if k != "precision"}),
        get_spec(family).space(get_spec(family).problem(**{k: v for k, v in entry["problem"].items()
                                                           if k != "precision"}), TARGET).trusted(entry["values"]))))
    for helper in ("_replay.py", "_tma.py", "_launch.py", "_rules.py"):
        assert (summary.path / helper).is_file()
    assert ("cuda-bindings" in (out / "pyproject.toml").read_text()) == (family == "gemm_wgmma")


def test_package_imports_in_a_bare_environment(exported, tmp_path):
    family, out, _ = exported
    folder = tmp_path / "bare"
    venv.create(folder, with_pip=False, system_site_packages=False)
    code = (f"import sys, tc_{family} as m\n"
            "for mod in ('kgen', 'numpy', 'cupy', 'cuda'):\n"
            "    assert mod not in sys.modules, mod\n"
            "print(m.problems())")
    done = subprocess.run([str(folder / "bin" / "python"), "-c", code], cwd=out, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert EXPORTED[family] in done.stdout


def _fake(ptr, shape, strides, typestr="<u2"):
    size = np.dtype(typestr).itemsize
    return SimpleNamespace(device=SimpleNamespace(id=0), __cuda_array_interface__={
        "data": (ptr, False), "shape": shape, "typestr": typestr, "version": 3,
        "strides": tuple(s * size for s in strides)})


def _module(out, name):
    sys.path.insert(0, str(out))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(out))


def test_exported_keys_are_kgens(exported):
    from kgen.kernels.gemm.problem import tc_problem

    family, out, _ = exported
    module = _module(out, f"tc_{family}")
    cases = [((3000, 700), (700, 1), (700, 5000), (5000, 1), {}),
             ((1, 4096), (4096, 1), (4096, 4096), (4096, 1), {}),
             ((64, 48), (1, 64), (48, 40), (1, 48), {"activation": "relu"}),     # both transposed views
             ((33, 17), (17, 1), (17, 9), (9, 1), {"out_dtype": "float32"})]
    for shape_a, strides_a, shape_b, strides_b, options in cases:
        a, b = _fake(0x1000, shape_a, strides_a), _fake(0x2000, shape_b, strides_b)
        layout = ("N" if strides_a[1] == 1 else "T") + ("N" if strides_b[1] == 1 else "T")
        want = tc_problem(family, shape_a[0], shape_b[1], shape_a[1], "bfloat16", layout,
                          out_dtype=options.get("out_dtype"), epilogue=options.get("activation") or "none")
        got = module.problem_key(a, b, dtype="bfloat16", **options)
        assert got == want.key
    with pytest.raises(module.ExportedError, match="tf32"):
        module.problem_key(_fake(0x1000, (8, 8), (8, 1), "<f4"), _fake(0x2000, (8, 8), (8, 1), "<f4"))
    with pytest.raises(module.ExportedError, match="inner"):
        module.problem_key(_fake(0x1000, (8, 8), (8, 1)), _fake(0x2000, (9, 8), (8, 1)), dtype="bfloat16")


class _CupyLike:
    """What a call reads of a CuPy array (its own attributes); its array interface refuses."""

    __module__ = "cupy"

    def __init__(self, ptr, shape, strides):
        self.data = SimpleNamespace(ptr=ptr, device_id=0)
        self.shape, self.strides, self.dtype = shape, strides, SimpleNamespace(char="H")

    @property
    def __cuda_array_interface__(self):
        raise AssertionError("a CuPy array's interface dict is built per read: a call reads attributes")


def test_a_cupy_operand_is_read_by_its_attributes(exported):
    family, out, _ = exported
    module = _module(out, f"tc_{family}")
    view, ptr = module._view(_CupyLike(0x1008, (4, 8), (16, 2)))
    assert ptr == 0x1008 and view == ("cupy", (4, 8), (16, 2), "H", 8, 0)
    assert module._view(_CupyLike(0x1000, (4, 8), (16, 2)))[0] != view        # the alignment decides the plan


_DType = collections.namedtuple("_DType", "char")


class _CupyArray:
    """What a call reads of a CuPy array (its own attributes)."""

    __module__ = "cupy"

    def __init__(self, ptr, shape, strides):
        self.data = SimpleNamespace(ptr=ptr, device_id=0)
        self.shape, self.strides, self.dtype = shape, strides, _DType("H")


def test_a_repeated_cupy_call_is_served_by_its_lookup(exported, monkeypatch):
    family, out, _ = exported
    module = _module(out, f"tc_{family}")
    launches, plans, built = [], [], []

    def make_plan(*args):
        plans.append(args)
        return {"m": 64, "n": 64, "out_dtype": "bfloat16", "kind": "cai", "lds": (64, 64, 64), "device": 0,
                "recipe": [], "config": "k", "cached": {}, "stream": lambda: 7,
                "launch": lambda values, stream: launches.append((values, stream))}

    monkeypatch.setattr(module, "_make_plan", make_plan)
    monkeypatch.setattr(module._replay, "arguments", lambda *args: built.append(args) or ("args",))
    monkeypatch.setattr(module, "_CUPY_NDARRAY", _CupyArray)
    monkeypatch.setattr(module, "_CUPY_STREAM", lambda: SimpleNamespace(ptr=7))
    monkeypatch.setattr(module, "_PLANS", {})
    monkeypatch.setattr(module, "_SAME", {})
    a, b, c = (_CupyArray(0x1000 * i, (64, 64), (128, 2)) for i in (1, 2, 3))
    for _ in range(3):
        assert module.gemm(a, b, c, dtype="bfloat16") is c
    assert len(plans) == len(built) == 1 and len(module._SAME) == 1
    assert launches == [(("args",), 7)] * 3
    twin = _CupyArray(0x1000, (64, 64), (128, 2))             # another array with a's facts: a's plan
    module.gemm(twin, b, c, dtype="bfloat16")
    assert len(plans) == len(built) == 1 and len(module._SAME) == 2
    a.shape, a.strides = (32, 128), (256, 2)                  # reshaped in place: planned again
    module.gemm(a, b, c, dtype="bfloat16")
    assert len(plans) == 2 and len(launches) == 5
    module.gemm(a, b, c, alpha=2.0, dtype="bfloat16")         # another alpha: its own arguments
    assert len(plans) == 2 and len(built) == 3 and len(launches) == 6
    del twin                                                  # nothing of a call is kept alive
    assert sum(entry[0]() is None for entry in module._SAME.values()) == 1


@pytest.mark.gpu
def test_exported_module_gives_kgens_result(exported):
    import cupy

    import kgen
    from kgen.kernels.gemm.tc import from_bf16, to_bf16

    family, out, _ = exported
    module = _module(out, f"tc_{family}")
    entry = json.loads((out / f"tc_{family}" / "table.json").read_text())["problems"][EXPORTED[family]]
    m, n, k = (entry["problem"][x] for x in ("m", "n", "k"))
    rng = cupy.random.default_rng(1)
    a = to_bf16(rng.random((m, k), dtype=cupy.float32) - 0.5)     # fresh rows: the records' alignment
    b = to_bf16(rng.random((k, n), dtype=cupy.float32) - 0.5)
    assert module.problem_key(a, b, dtype="bfloat16") == EXPORTED[family]
    got = module.gemm(a, b, dtype="bfloat16")
    again = module.gemm(a, b, cupy.full((m, n), 0xFFFF, dtype=cupy.uint16), dtype="bfloat16")
    want = kgen.gemm(a, b, dtype="bfloat16")
    cupy.cuda.runtime.deviceSynchronize()
    exact = from_bf16(a).astype(cupy.float64) @ from_bf16(b).astype(cupy.float64)
    for result in (got, again, want):
        err = float(cupy.abs(from_bf16(result) - exact).max() / cupy.abs(exact).max())
        assert err < 1e-2
    assert bool((got == again).all())
    calls = len(module._SAME)
    again.fill(0xFFFF)                                # NaN: the repeated call must write every element
    module.gemm(a, b, again, dtype="bfloat16")        # served by the lookup of its arrays
    doubled = module.gemm(a, b, cupy.full((m, n), 0xFFFF, dtype=cupy.uint16), alpha=2.0, dtype="bfloat16")
    cupy.cuda.runtime.deviceSynchronize()
    assert len(module._SAME) == calls + 1             # the first repeated, the other new arrays
    assert bool((got == again).all())
    assert bool((from_bf16(doubled) == 2 * from_bf16(got)).all())   # alpha is part of the key
    a.shape = (k, m)                                  # the same array reshaped in place: no longer served
    with pytest.raises(module.ExportedError):
        module.gemm(a, b, again, dtype="bfloat16")


SKINNY = ("gemm_skinny|align_a=4|align_b=4|dtype=float32|epilogue=none|k=4096|layout=NT|m=4096|n=8|"
          "out_dtype=float32|precision=tf32")


def test_exported_gemm_skinny_keys_float32_as_kgen_does(tmp_path):
    _export("gemm_skinny", SKINNY, tmp_path, "tc_skinny", "NVIDIA H100 80GB HBM3")
    entry = json.loads((tmp_path / "tc_skinny" / "table.json").read_text())["problems"][SKINNY]
    assert entry["config"].startswith("gemm_skinny_f32_nt_")
    assert (tmp_path / "tc_skinny" / "kernels" / f"{entry['config']}.cubin").stat().st_size > 1000
    module = _module(tmp_path, "tc_skinny")
    a, b = _fake(0x1000, (4096, 4096), (4096, 1), "<f4"), _fake(0x2000, (4096, 8), (1, 4096), "<f4")
    assert module.problem_key(a, b, precision="tf32") == SKINNY
    sys.modules.pop("tc_skinny", None)


@pytest.mark.gpu
def test_exported_gemm_skinny_gives_the_exact_float32_product(tmp_path):
    import cupy

    _export("gemm_skinny", SKINNY, tmp_path, "gpu_skinny", "NVIDIA H100 80GB HBM3")
    module = _module(tmp_path, "gpu_skinny")
    rng = cupy.random.default_rng(4)
    a = rng.random((4096, 4096), dtype=cupy.float32) - 0.5
    b = rng.random((8, 4096), dtype=cupy.float32) - 0.5               # read transposed: layout NT
    exact = a.astype(cupy.float64) @ b.T.astype(cupy.float64)
    got = module.gemm(a, b.T, cupy.full((4096, 8), cupy.nan, dtype=cupy.float32), precision="tf32")
    cupy.cuda.runtime.deviceSynchronize()
    assert float(cupy.abs(got - exact).max() / cupy.abs(exact).max()) < 1e-5     # computed in float32
    sys.modules.pop("gpu_skinny", None)


GENERIC = {
    "conv2d_wgmma": "conv2d_wgmma|c=128|dh=1|dtype=bfloat16|dw=1|epilogue=none|h=28|k=128|n=1|out_dtype=bfloat16|"
                    "ph=1|pw=1|r=3|s=3|sh=1|sw=1|w=28",
    "conv2d_wgrad_wgmma": "conv2d_wgrad_wgmma|c=128|dh=1|dtype=bfloat16|dw=1|epilogue=none|h=28|k=128|n=64|"
                          "out_dtype=bfloat16|ph=1|pw=1|r=3|s=3|sh=1|sw=1|w=28",
    "gemm_batched": "gemm_batched|align_a=8|align_b=8|batch=64|broadcast=none|dtype=bfloat16|epilogue=none|k=64|"
                    "layout=NT|m=512|n=512|out_dtype=bfloat16|precision=native",
    "gemm_batched_wgmma": "gemm_batched_wgmma|align_a=8|align_b=8|batch=64|broadcast=none|dtype=bfloat16|"
                          "epilogue=none|k=64|layout=NT|m=512|n=512|out_dtype=bfloat16|precision=native",
    "gemm_grouped": "gemm_grouped|align_a=8|align_b=8|dtype=bfloat16|epilogue=none|groups=16|k=4096|layout=NT|m=512|"
                    "n=4096|out_dtype=bfloat16|precision=native",
    "gemm_grouped_wgmma": "gemm_grouped_wgmma|align_a=8|align_b=8|dtype=bfloat16|epilogue=none|groups=16|k=4096|"
                          "layout=NT|m=512|n=4096|out_dtype=bfloat16|precision=native",
    "gemm_kgrouped": "gemm_kgrouped|align_a=8|align_b=8|dtype=bfloat16|epilogue=none|groups=32|k=2048|layout=TN|"
                     "m=1024|n=4096|out_dtype=bfloat16|precision=native",
    "gemm_kgrouped_wgmma": "gemm_kgrouped_wgmma|align_a=8|align_b=8|dtype=bfloat16|epilogue=none|groups=32|k=2048|"
                           "layout=TN|m=1024|n=4096|out_dtype=bfloat16|precision=native",
}


@pytest.mark.parametrize("family", sorted(GENERIC))
def test_generic_runtime_exports_the_other_tensor_core_families(family, tmp_path):
    from kgen.problem import Problem

    name = f"pkg_{family}"
    _export(family, GENERIC[family], tmp_path, name, "NVIDIA H100 80GB HBM3")
    table = json.loads((tmp_path / name / "table.json").read_text())
    entry = table["problems"][GENERIC[family]]
    spec = get_spec(family)
    problem = Problem.from_key(GENERIC[family])
    config = spec.space(problem, Target.h200("NVIDIA H100 80GB HBM3")).trusted(entry["values"])
    assert entry["args"] == json.loads(json.dumps(spec.arg_recipe(problem, config)))
    assert (tmp_path / name / "kernels" / f"{entry['config']}.cubin").stat().st_size > 1000
    module = _module(tmp_path, name)
    assert module.problems() == [GENERIC[family]]
    with pytest.raises(module.ExportedError, match="was not passed"):
        module.run(GENERIC[family], **{spec.outputs[0]: _fake(0x1000, (4,), (1,))})
    sys.modules.pop(name, None)


@pytest.mark.gpu
@pytest.mark.parametrize("family", sorted(GENERIC))
def test_generic_exports_give_kgens_result(family, tmp_path):
    import cupy

    import kgen
    from kgen.kernels.gemm.grouped import split_rows
    from kgen.kernels.gemm.tc import from_bf16, to_bf16
    from kgen.problem import Problem

    name = f"gpu_{family}"
    _export(family, GENERIC[family], tmp_path, name, "NVIDIA H100 80GB HBM3")
    module = _module(tmp_path, name)
    p = Problem.from_key(GENERIC[family])
    rng = cupy.random.default_rng(3)

    def rand(*shape):
        return to_bf16(rng.random(shape, dtype=cupy.float32) - 0.5)

    if family == "conv2d_wgmma":
        x, w = rand(p["n"], p["h"], p["w"], p["c"]), rand(p["k"], p["r"], p["s"], p["c"])
        want = kgen.conv2d(x, w, padding=(p["ph"], p["pw"]), dtype="bfloat16")
        got = cupy.full(want.shape, 0xFFFF, dtype=cupy.uint16)
        module.run(GENERIC[family], x=x, w=w, y=got)
    elif family == "conv2d_wgrad_wgmma":
        x, dy = rand(p["n"], p["h"], p["w"], p["c"]), rand(p["n"], p["h"], p["w"], p["k"])     # stride 1, same padding
        want = kgen.conv2d_weight_gradient(x, dy, (p["r"], p["s"]), padding=(p["ph"], p["pw"]), dtype="bfloat16")
        got = cupy.full(want.shape, 0xFFFF, dtype=cupy.uint16)
        module.run(GENERIC[family], x=x, dy=dy, dw=got)
    elif family.startswith("gemm_grouped"):
        a, b = rand(p["m"], p["k"]), rand(p["groups"], p["n"], p["k"])                  # layout NT: b read transposed
        ends = cupy.asarray(split_rows(p["m"], p["groups"], seed=5))
        want = kgen.gemm_grouped(a, b.transpose(0, 2, 1), ends, dtype="bfloat16")
        got = cupy.full(want.shape, 0xFFFF, dtype=cupy.uint16)
        module.run(GENERIC[family], a=a, b=b, c=got, ends=ends)
    elif family in ("gemm_kgrouped", "gemm_kgrouped_wgmma"):
        a, b = rand(p["k"], p["m"]), rand(p["k"], p["n"])                              # every group's rows
        ends = cupy.asarray(split_rows(p["k"], p["groups"], seed=5))
        want = kgen.gemm_kgrouped(a, b, ends, dtype="bfloat16")
        got = cupy.full(want.shape, 0xFFFF, dtype=cupy.uint16)
        module.run(GENERIC[family], a=a, b=b, c=got, ends=ends)
    else:
        a, b = rand(p["batch"], p["m"], p["k"]), rand(p["batch"], p["n"], p["k"])       # layout NT: b read transposed
        want = kgen.gemm(a, b.transpose(0, 2, 1), dtype="bfloat16")
        got = cupy.full(want.shape, 0xFFFF, dtype=cupy.uint16)
        module.run(GENERIC[family], a=a, b=b, c=got)
    cupy.cuda.runtime.deviceSynchronize()
    err = float(cupy.abs(from_bf16(got) - from_bf16(want)).max() / cupy.abs(from_bf16(want)).max())
    assert err < 1e-2
    sys.modules.pop(name, None)
