"""The conv2d family with no GPU: problems and their checks, the front door's fields, the space
(gemm_mma's on the implicit GEMM), the untuned picks, rendering over gemm/mma.cu.j2, sampled
configs of every dtype compiled for sm_90 with HMMA and no local memory in their SASS, launch
geometry and arguments, the export recipe, and ``kgen.conv2d``'s checks before any launch."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kgen.errors import DeviceError, DtypeError, FieldError, InputError, KgenError, LayoutError, ShapeError
from kgen.fields import parse_args
from kgen.kernels.conv.conv2d import Conv2d
from kgen.kernels.conv.problem import conv2d_problem, gemm_view, geometry, output_size
from kgen.problem import Problem, Target
from kgen.registry import get_spec
from kgen.compile import compile_source
from kgen.render import render

from compiling import compile_cases, compile_failures, sass_or_skip
from fakes import BASE, FakeArray

SPEC = Conv2d()
# (n, h, w, c, k, r, s, stride, padding, dilation): ResNet layers and odd ones (C not a multiple
# of 8, a 1x1 image, 7x7 stride 2, dilation 2, a window as wide as the image)
SHAPES = [
    (2, 56, 56, 64, 64, 3, 3, 1, 1, 1),
    (2, 224, 224, 3, 64, 7, 7, 2, 3, 1),
    (3, 17, 19, 20, 24, 3, 3, 1, 2, 2),
    (5, 1, 1, 72, 40, 1, 1, 1, 0, 1),
    (1, 9, 7, 12, 9, 3, 5, (2, 1), (0, 2), 1),
    (4, 14, 14, 256, 512, 1, 1, 2, 0, 1),
]


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def problem_of(shape, dtype="bfloat16", **kw):
    n, h, w, c, k, r, s, stride, padding, dilation = shape
    return conv2d_problem(n, h, w, c, k, r, s, stride=stride, padding=padding, dilation=dilation, dtype=dtype, **kw)


# ---------------------------------------------------------------- problems

def test_problem_key_round_trip_and_registration():
    import kgen

    p = conv2d_problem(2, 56, 56, 64, 128, 3, 3, stride=2, padding=1, dtype="float16", epilogue="bias_relu")
    assert p.key == ("conv2d|c=64|dh=1|dtype=float16|dw=1|epilogue=bias_relu|h=56|k=128|n=2|out_dtype=float16"
                     "|ph=1|pw=1|r=3|s=3|sh=2|sw=2|w=56")
    assert Problem.from_key(p.key) == p
    assert isinstance(get_spec("conv2d"), Conv2d)
    assert "conv2d" in kgen.families() and "conv2d" in kgen.__all__


def _positions(size, window, stride, pad, dilation):
    """Output positions counted one by one: window starts whose last tap lies in the padded image."""
    return sum(1 for start in range(-pad, size + pad) if (start + pad) % stride == 0
               and start + dilation * (window - 1) < size + pad)


@pytest.mark.parametrize("size,window,stride,pad,dilation", [
    (56, 3, 1, 1, 1), (224, 7, 2, 3, 1), (17, 3, 1, 2, 2), (1, 1, 1, 0, 1), (9, 3, 2, 0, 1), (7, 5, 1, 2, 1),
    (10, 4, 3, 1, 2), (5, 5, 1, 0, 1)])
def test_output_size_counts_window_positions(size, window, stride, pad, dilation):
    assert output_size(size, window, stride, pad, dilation) == _positions(size, window, stride, pad, dilation)


def test_geometry_and_gemm_view():
    p = problem_of(SHAPES[2])
    g = geometry(p)
    assert g.output == (17, 19) and g.gemm == (3 * 17 * 19, 24, 3 * 3 * 20)
    view = gemm_view(p)
    assert view.family == "gemm_mma" and view["layout"] == "NT"
    assert (view["m"], view["n"], view["k"]) == g.gemm
    assert view["align_a"] == 4 and view["align_b"] == 4         # C = 20, R*S*C = 180: 4 bf16 elements
    first = gemm_view(problem_of(SHAPES[1]))
    assert first["align_a"] == 1 and first["align_b"] == 1       # C = 3, 7*7*3 = 147
    assert gemm_view(problem_of(SHAPES[0]))["align_a"] == 8


@pytest.mark.parametrize("kw,error", [
    (dict(n=0), ShapeError), (dict(c=2.5), ShapeError), (dict(k=True), ShapeError),
    (dict(stride=0), InputError), (dict(padding=-1), InputError), (dict(dilation=(1, 0)), InputError),
    (dict(stride=(1, 2, 3)), InputError), (dict(padding="1"), InputError),
    (dict(h=2, r=5), ShapeError),                                   # the window does not fit
    (dict(dtype="float64"), DtypeError), (dict(dtype="int8"), DtypeError),
    (dict(out_dtype="float16"), DtypeError),                        # bf16 inputs write bf16 or float32
    (dict(epilogue="tanh"), InputError),
    (dict(n=1 << 16, h=256, w=256, c=64), ShapeError),              # past 32-bit element offsets
])
def test_problem_validation(kw, error):
    args = dict(n=2, h=8, w=8, c=16, k=16, r=3, s=3) | {k: v for k, v in kw.items() if k in "nhwckrs"}
    rest = {k: v for k, v in kw.items() if k not in "nhwckrs"}
    with pytest.raises(error) as info:
        conv2d_problem(*args.values(), **rest)
    assert info.value.remedy


def test_a_key_not_written_by_conv2d_problem_is_refused(target):
    good = problem_of(SHAPES[0])
    tampered = Problem.from_key(good.key.replace("|sh=1|", "|sh=1|extra=1|"))
    bad_stride = Problem.from_key(good.key.replace("|sh=1|", "|sh=0|"))
    for problem in (tampered, bad_stride):
        with pytest.raises((InputError, ShapeError)):
            SPEC.space(problem, target)


def test_request_from_command_line_fields(target):
    argv = ["--n", "8", "--h", "28", "--w", "28", "--c", "128", "--k", "128", "--stride", "2", "--padding", "1"]
    values = parse_args(SPEC.fields(), argv, "conv2d")
    spec, problem = SPEC.request(target, **values)        # C = 128 on Hopper: TMA im2col loads
    assert spec.family == "conv2d_wgmma"
    assert problem == conv2d_problem(8, 28, 28, 128, 128, 3, 3, stride=2, padding=1, dtype="bfloat16",
                                     family="conv2d_wgmma")
    spec, problem = SPEC.request(target, **parse_args(SPEC.fields(), argv[:6] + ["--c", "36"] + argv[8:], "conv2d"))
    assert spec.family == "conv2d" and problem["c"] == 36
    ampere = Target("A100", (8, 0), 108, 48 * 1024, 163 * 1024, 164 * 1024, 65536)
    assert SPEC.request(ampere, **values)[0].family == "conv2d"
    with pytest.raises(FieldError):
        parse_args(SPEC.fields(), ["--n", "8"], "conv2d")                       # h, w, c, k are required
    exact, problem = SPEC.request(target, **parse_args(SPEC.fields(), argv + ["--dtype", "float32"], "conv2d"))
    assert exact.family == problem.family == "conv2d_simt"                      # float32 exact: CUDA cores
    _, tf32 = SPEC.request(target, **parse_args(SPEC.fields(), argv + ["--dtype", "float32", "--precision", "tf32"],
                                                "conv2d"))
    assert tf32["dtype"] == "float32"
    with pytest.raises(InputError):
        SPEC.request(target, **parse_args(SPEC.fields(), argv + ["--precision", "tf32"], "conv2d"))


def test_operands_do_not_give_a_problem():
    with pytest.raises(InputError) as info:
        SPEC.problem_from_operands({"x": None})
    assert "kgen.conv2d" in info.value.remedy


# ---------------------------------------------------------------- space and picks

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_space_is_gemm_mma_on_the_implicit_gemm(target, shape, dtype):
    problem = problem_of(shape, dtype)
    space = SPEC.space(problem, target)
    configs = space.sample(40, seed=1)
    assert configs
    view = gemm_view(problem)
    mma = get_spec("gemm_mma").space(view, target)
    for config in configs:
        v = config.as_dict()
        assert v["LP"] == 1 and config.name.startswith("conv2d_") and config.name.endswith("_lp1")
        assert mma.is_valid(v), config.name                          # every conv config is a valid GEMM config
        threads = 32 * (v["BM"] // v["WM"]) * (v["BN"] // v["WN"]) * v["WK"]
        assert threads % (v["BK"] // v["VA"]) == 0
        assert view["align_a"] % v["VA"] == 0 and view["align_b"] % v["VB"] == 0


@pytest.mark.parametrize("shape", SHAPES)
def test_untuned_picks_are_valid_and_deterministic(target, shape):
    problem = problem_of(shape)
    space = SPEC.space(problem, target)
    default = SPEC.default_config(problem, target)
    assert space.is_valid(default.as_dict())
    picks = SPEC.model_picks(problem, target, 3)
    assert picks and len(set(picks)) == len(picks) and all(space.is_valid(c.as_dict()) for c in picks)
    assert SPEC.model_picks(problem, target, 3) == picks
    chosen = SPEC.model_choice(problem, target)
    if chosen is not None:
        assert chosen[0] == picks[0] and chosen[1] > 0
        assert SPEC.model_version() == get_spec("gemm_mma").model_version()


# ---------------------------------------------------------------- render, launch, arguments

def test_render_compiles_in_the_image_sizes(target):
    problem = problem_of(SHAPES[4])
    config = SPEC.default_config(problem, target)
    code = render(SPEC, problem, config, target).code
    for line in ("constexpr int CONV_H = 9, CONV_W = 7, CONV_C = 12;",
                 "constexpr int CONV_P = 4, CONV_Q = 7, CONV_R = 3, CONV_S = 5;",
                 "constexpr int CONV_SH = 2, CONV_SW = 1, CONV_PH = 0, CONV_PW = 2;"):
        assert line in code
    assert "Im2colPlan<THREADS, BM, BK," in code and "plan_a.init(A, m0, M, tid);" in code
    assert "CopyPlan<THREADS, BM, BK" not in code                   # A's GEMM plan replaced, B's kept
    assert f"{config.name}(const in_t*" in code


def test_launch_and_arguments(target):
    problem = problem_of(SHAPES[2], epilogue="bias_relu")
    config = SPEC.default_config(problem, target)
    m, n, k = geometry(problem).gemm
    launch = SPEC.launch(problem, config)
    v = config.as_dict()
    assert launch.grid == (-(-m // v["BM"]) * -(-n // v["BN"]), 1, 1)
    assert launch.block[0] == 32 * (v["BM"] // v["WM"]) * (v["BN"] // v["WN"]) * v["WK"]
    ops = {"x": "X", "w": "W", "y": "Y", "bias": "B"}
    args = SPEC.args(problem, config, ops)
    assert args[:4] == ["X", "W", "Y", "B"]
    assert [int(a) for a in args[4:10]] == [m, n, k, 20, k, n]
    assert [float(a) for a in args[10:]] == [1.0, 0.0]
    no_bias = SPEC.args(problem_of(SHAPES[2]), config, {"x": "X", "w": "W", "y": "Y"})
    assert no_bias[3] == np.uint64(0)


def test_export_recipe_names_the_operands(target):
    from kgen.export import launch_recipe

    problem = problem_of(SHAPES[0], epilogue="bias_gelu")
    recipe = launch_recipe(SPEC, problem, SPEC.default_config(problem, target))
    assert [a.get("pointer") for a in recipe["args"][:4]] == ["x", "w", "y", "bias"]
    assert recipe["args"][4] == {"type": "int32", "value": 2 * 56 * 56}


# ---------------------------------------------------------------- compiled configs

SAMPLED = 20          # per (dtype, shape): 60 a dtype


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()

    def jobs():
        for dtype in ("bfloat16", "float16", "float32"):
            for i, shape in enumerate((SHAPES[1], SHAPES[2], SHAPES[5])):
                problem = problem_of(shape, dtype, epilogue=("none", "bias_gelu", "relu")[i])
                space = SPEC.space(problem, target)
                for config in space.sample(SAMPLED, seed=7 + i):
                    yield dtype, problem, config, render(SPEC, problem, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "conv2d")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_sampled_configs_compile_with_hmma_and_no_local_memory(compiled, dtype):
    rows = compiled[dtype]
    assert len(rows) >= 50
    assert compile_failures(rows) == []
    for _, config, _, result in rows[:: max(1, len(rows) // 12)]:
        sass = sass_or_skip(result.binary.cubin)
        assert re.search(r"\bHMMA\.", sass), config.name
        assert not re.search(r"\b(LDL|STL)\b", sass), f"{config.name} spills to local memory"
        if config["VA"] * (2 if dtype != "float32" else 4) == 16:
            assert "LDGSTS.E.BYPASS.128" in sass, config.name


# ---------------------------------------------------------------- kgen.conv2d before any launch

def _call(x=None, w=None, **kw):
    import kgen

    x = FakeArray((2, 8, 8, 16), "float16") if x is None else x
    w = FakeArray((32, 3, 3, 16), "float16", ptr=BASE + (1 << 20)) if w is None else w
    return kgen.conv2d(x, w, **kw)


@pytest.mark.parametrize("kw,error", [
    (dict(x=FakeArray((2, 8, 8), "float16")), ShapeError),
    (dict(w=FakeArray((32, 3, 3, 8), "float16")), ShapeError),                 # channels differ
    (dict(w=FakeArray((32, 3, 3, 16), "float32")), DtypeError),
    (dict(x=FakeArray((2, 8, 8, 16), "int32")), DtypeError),
    (dict(bias=FakeArray((31,), "float16")), ShapeError),
    (dict(bias=FakeArray((32,), "float32")), DtypeError),
    (dict(activation="tanh"), KgenError),
    (dict(stride=0), InputError),
    (dict(x=FakeArray((2, 8, 8, 16), "float16", strides=(1024, 128, 16, 2))), LayoutError),
    (dict(x=np.zeros((2, 8, 8, 16), np.float16)), DeviceError),
    (dict(out_dtype="float64"), DtypeError),
    (dict(precision="tf32"), InputError),                                       # half inputs
])
def test_call_checks_before_any_launch(kw, error):
    with pytest.raises(error):
        _call(**kw)


def test_operands_misaligned_for_the_vectors_are_refused():
    x = FakeArray((2, 8, 8, 16), "float16", ptr=BASE + 2)          # 16 channels: 16-byte loads
    with pytest.raises(LayoutError) as info:
        _call(x)
    assert "16 bytes" in str(info.value) and "copy" in info.value.remedy
    with pytest.raises(LayoutError):
        _call(w=FakeArray((32, 3, 3, 16), "float16", ptr=BASE + (1 << 20) + 8))
    from kgen.kernels.conv.problem import vector_bytes

    odd = conv2d_problem(2, 8, 8, 3, 32, 3, 3, dtype="float16")   # 3 channels: 2-byte loads, any address
    assert vector_bytes(odd) == {"x": 2, "w": 2}
    assert vector_bytes(conv2d_problem(2, 8, 8, 20, 32, 3, 3, dtype="float32", family="conv2d_simt")) == \
        {"x": 16, "w": 16}


def test_an_out_overlapping_an_input_is_refused():
    x = FakeArray((2, 8, 8, 16), "float16")
    with pytest.raises(InputError) as info:
        _call(x, out=FakeArray((2, 6, 6, 32), "float16", ptr=BASE + 64))          # inside x's memory
    assert "overlaps" in str(info.value)


def test_a_float32_call_is_exact_unless_tf32_is_asked_for():
    from kgen.kernels.conv.problem import family_for

    assert family_for("float32", None) == "conv2d_simt"
    assert family_for("float32", "tf32") == family_for("float16", None) == "conv2d"
    with pytest.raises(InputError):
        family_for("float32", "fp16")


# ---------------------------------------------------------------- the wgmma family (TMA im2col)

WGMMA_SHAPES = [
    (32, 56, 56, 64, 64, 3, 3, 1, 1, 1),
    (3, 17, 19, 64, 72, 3, 3, 1, 1, 1),
    (2, 20, 23, 64, 64, 3, 5, (1, 2), (2, 1), (2, 1)),
    (4, 14, 14, 256, 512, 1, 1, 2, 0, 1),
]


def wgmma_problem(shape, dtype="bfloat16", **kw):
    return problem_of(shape, dtype, family="conv2d_wgmma", **kw)


def test_wgmma_supports_what_an_im2col_map_expresses(target):
    from kgen.kernels.conv.conv2d_wgmma import Conv2dWgmma

    spec = Conv2dWgmma()
    assert all(spec.supports(wgmma_problem(s), target) for s in WGMMA_SHAPES)
    assert spec.supports(wgmma_problem(WGMMA_SHAPES[0], "float16"), target)
    assert spec.supports(wgmma_problem((2, 8, 8, 96, 64, 3, 3, 1, 1, 1), "float32"), target)   # tf32: C % 32
    assert not spec.supports(wgmma_problem((2, 8, 8, 96, 64, 3, 3, 1, 1, 1)), target)    # C not a multiple of 64
    assert not spec.supports(wgmma_problem((2, 8, 8, 64, 64, 3, 3, 9, 1, 1)), target)    # a stride TMA cannot walk
    assert not spec.supports(wgmma_problem((2, 300, 300, 64, 64, 3, 3, 1, 130, 1)), target)   # corner past 8 bits
    ampere = Target("A100", (8, 0), 108, 48 * 1024, 163 * 1024, 164 * 1024, 65536)
    assert not spec.supports(wgmma_problem(WGMMA_SHAPES[0]), ampere)


def test_im2col_rules_name_what_is_wrong():
    from kgen.tma import im2col_rejects

    ok = dict(ptr=0, dtype="bfloat16", nhwc=(2, 8, 8, 64), window=(3, 3), stride=(1, 1), padding=(1, 1),
              dilation=(1, 1), channels=64, pixels=128, swizzle_bytes=128)
    assert im2col_rejects(**ok) == []
    assert any("16-byte" in w for w in im2col_rejects(**(ok | dict(ptr=8))))
    assert any("channels" in w for w in im2col_rejects(**(ok | dict(nhwc=(2, 8, 8, 12)))))
    assert any("swizzle" in w for w in im2col_rejects(**(ok | dict(channels=128))))
    assert any("pixels" in w for w in im2col_rejects(**(ok | dict(pixels=512))))
    assert any("offset" in w for w in im2col_rejects(**(ok | dict(window=(3, 3), dilation=(200, 1)))))


@pytest.mark.parametrize("shape", WGMMA_SHAPES)
def test_wgmma_space_and_picks(target, shape):
    from kgen.kernels.conv.conv2d_wgmma import Conv2dWgmma

    spec, problem = Conv2dWgmma(), wgmma_problem(shape)
    space = spec.space(problem, target)
    gemm = get_spec("gemm_wgmma").space(gemm_view(problem, "gemm_wgmma"), target)
    for config in space.sample(30, seed=2):
        assert config.name.startswith("conv2d_wgmma_bf16_nt_") and gemm.is_valid(config.as_dict())
    picks = spec.model_picks(problem, target, 3)
    assert picks and all(space.is_valid(c.as_dict()) for c in picks) and len(set(picks)) == len(picks)
    assert spec.default_config(problem, target) == picks[0]
    v = picks[0].as_dict()
    m, n, _ = geometry(problem).gemm
    assert spec.launch(problem, picks[0]) == get_spec("gemm_wgmma").launch(gemm_view(problem, "gemm_wgmma"), picks[0])
    assert v["BK"] == 64 and m > 0 and n > 0


def test_wgmma_arguments_carry_the_im2col_map(target, monkeypatch):
    from kgen import tma
    from kgen.kernels.conv.conv2d_wgmma import Conv2dWgmma

    spec, problem = Conv2dWgmma(), wgmma_problem(WGMMA_SHAPES[2], epilogue="bias")
    config = spec.default_config(problem, target)
    seen = {}
    monkeypatch.setattr(tma, "encode_im2col", lambda *a: seen.setdefault("im2col", a) and "MAP_X")
    monkeypatch.setattr(tma, "encode_tiled", lambda *a: seen.setdefault("tiled", a) and "MAP_W")
    args = spec.args(problem, config, {"x": np.uint64(BASE), "w": np.uint64(BASE + 4096), "y": np.uint64(BASE + 8192),
                                       "bias": np.uint64(BASE + 16384)})
    m, n, k = geometry(problem).gemm
    assert args[:2] == ["MAP_X", "MAP_W"]
    assert [int(a) for a in args[3:13]] == [BASE, BASE + 4096, 64, k, BASE + 8192, BASE + 16384, m, n, k, n]
    assert seen["im2col"] == (BASE, "bfloat16", (2, 20, 23, 64), (3, 5), (1, 2), (2, 1), (2, 1), 64,
                              min(m, config["BM"]), 128)
    assert seen["tiled"][2:4] == ((k, n), k * 2)


@pytest.fixture(scope="module")
def compiled_wgmma(tmp_path_factory):
    from kgen.kernels.conv.conv2d_wgmma import Conv2dWgmma

    target, spec = Target.h200(), Conv2dWgmma()

    def jobs():
        for dtype in ("bfloat16", "float16", "float32"):
            for i, shape in enumerate(WGMMA_SHAPES[1:]):
                problem = wgmma_problem(shape, dtype, epilogue=("none", "bias_gelu", "relu")[i])
                space = spec.space(problem, target)
                for config in space.sample(18, seed=3 + i):
                    yield dtype, problem, config, render(spec, problem, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "conv2d_wgmma")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_wgmma_sampled_configs_compile_with_hgmma_and_im2col_loads(compiled_wgmma, dtype):
    rows = compiled_wgmma[dtype]
    assert len(rows) >= 50
    assert compile_failures(rows) == []
    for problem, config, source, result in rows[:: max(1, len(rows) // 8)]:
        assert source.arch == "sm_90a"
        sass = sass_or_skip(result.binary.cubin)
        assert re.search(r"\bHGMMA\.", sass), config.name
        assert re.search(r"UTMALDG\.4D\.IM2COL", sass), config.name
        if re.search(r"\b(LDL|STL)\b", sass):      # only where the GEMM kernel of the config spills too
            gemm, view = get_spec("gemm_wgmma"), gemm_view(problem, "gemm_wgmma")
            space = gemm.space(view, Target.h200())
            twin = compile_source(render(gemm, view, space.make(config.as_dict()), Target.h200(), space),
                                  use_cache=False)
            assert re.search(r"\b(LDL|STL)\b", sass_or_skip(twin.binary.cubin)), f"{config.name} spills"


def test_export_of_shipped_conv2d_records(tmp_path):
    """``kgen export conv2d`` packages the shipped mma.sync records (their arguments are plain:
    the generic runtime replays them); the TMA family's (maps encoded at each call) are tested
    in tests/test_export_tc.py. Two problems whose best config has one name get a kernel each:
    the image sizes are compiled in."""
    import collections
    import json

    from kgen.export import export_package

    records = [json.loads(line) for line in open("tuning_db/nvidia-h100-80gb-hbm3_conv2d.jsonl")]
    best = {}
    for r in records:
        if r["problem_key"] not in best or r["time_ms"] < best[r["problem_key"]]["time_ms"]:
            best[r["problem_key"]] = r
    shared, _ = collections.Counter(r["config_name"] for r in best.values()).most_common(1)[0]
    keys = sorted(k for k, r in best.items() if r["config_name"] == shared)[:2]
    assert len(keys) == 2
    (tmp_path / "problems.txt").write_text("".join(k + "\n" for k in keys))
    export_package("conv2d", tmp_path / "out", problems=tmp_path / "problems.txt")
    package = tmp_path / "out" / "kgen_kernels"
    table = json.loads((package / "table.json").read_text())
    assert sorted(table["problems"]) == keys
    stems = [table["problems"][k]["kernel"] for k in keys]
    assert [table["problems"][k]["config"] for k in keys] == [shared, shared] and len(set(stems)) == 2
    for key, stem in zip(keys, stems):
        entry = table["problems"][key]
        assert [a.get("pointer") for a in entry["args"][:3]] == ["x", "w", "y"]
        code = (package / "kernels" / f"{stem}.cu").read_text()
        assert f"CONV_H = {entry['problem']['h']}, CONV_W = {entry['problem']['w']}, CONV_C = {entry['problem']['c']};" in code
        assert (package / "kernels" / f"{stem}.cubin").stat().st_size > 1000


def test_a_gpu_no_family_runs_on_is_a_typed_error(monkeypatch):
    import kgen.dispatch
    from kgen.ops.conv import routed

    volta = Target("V100", (7, 0), 80, 48 * 1024, 96 * 1024, 96 * 1024, 65536)
    monkeypatch.setattr(kgen.dispatch, "default_dispatcher", lambda: kgen.dispatch.Dispatcher(targets={0: volta}))
    with pytest.raises(DeviceError) as info:
        routed(problem_of(SHAPES[0]), 0)
    assert "8.0" in info.value.remedy
