"""Depthwise conv2d with no GPU: problems (K = C, checked), the request from ``kgen tune
conv2d_depthwise`` fields, the space (vectors dividing the channels, the weights in shared memory,
the registers bounded), the default, rendering (every size but the batch compiled in), the launch
and arguments, sampled configs compiled for sm_90 with no local memory (but gelu's call frame), and ``kgen.conv2d(...,
groups=C)``'s checks and its launch of this family."""

from __future__ import annotations

import re

import pytest

from kgen.errors import InputError, ShapeError
from kgen.fields import parse_args
from kgen.kernels.conv.depthwise import (FAMILY, REGISTER_BUDGET, SMEM_BYTES, DepthwiseConv2d, depthwise_problem,
                                         registers)
from kgen.problem import Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, per_case, sass_or_skip
from fakes import BASE, FakeArray

SPEC = DepthwiseConv2d()


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def test_problem_and_registration():
    assert isinstance(get_spec(FAMILY), DepthwiseConv2d)
    p = depthwise_problem(8, 56, 56, 144, 3, 3, stride=2, padding=1, dtype="float16", epilogue="bias_relu")
    assert p.family == FAMILY and p["k"] == p["c"] == 144 and (p["sh"], p["ph"]) == (2, 1)
    assert SPEC.shapes(p) == {"x": (8, 56, 56, 144), "w": (144, 3, 3), "y": (8, 28, 28, 144), "bias": (144,)}
    assert SPEC.flops(p) == 2.0 * 8 * 28 * 28 * 144 * 9
    assert SPEC.bytes(p) == 2.0 * (8 * 56 * 56 * 144 + 144 * 9 + 8 * 28 * 28 * 144)
    with pytest.raises(ShapeError):
        depthwise_problem(1, 4, 4, 8, 7, 7)                 # the window does not fit
    with pytest.raises(ShapeError):
        depthwise_problem(1, 4, 4, 0, 3, 3)


def test_request_from_command_line_fields(target):
    values = parse_args(SPEC.fields(), ["--n", "32", "--h", "112", "--w", "112", "--c", "96", "--stride", "2",
                                        "--padding", "1", "--dtype", "float32"], FAMILY)
    spec, p = SPEC.request(target, **values)
    assert spec is SPEC and p == depthwise_problem(32, 112, 112, 96, 3, 3, stride=2, padding=1, dtype="float32")


@pytest.mark.parametrize("c, dtype, widths", [(144, "bfloat16", (1, 2, 4, 8)), (36, "float16", (1, 2, 4)),
                                              (35, "bfloat16", (1,)), (240, "float32", (1, 2, 4))])
def test_space_vectors_divide_the_channels(target, c, dtype, widths):
    p = depthwise_problem(4, 14, 14, c, 5, 5, padding=2, dtype=dtype)
    space = SPEC.space(p, target)
    assert next(q for q in space.params if q.name == "VEC").choices == widths
    for config in space.sample(30, seed=c):
        assert c % config["VEC"] == 0 and config["THREADS"] % config["TC"] == 0
        assert 25 * config["TC"] * config["VEC"] * 4 <= SMEM_BYTES and registers(config, p) <= REGISTER_BUDGET
        assert config.name.startswith(f"{FAMILY}_")


def test_default_and_picks(target):
    p = depthwise_problem(64, 56, 56, 144, 3, 3, padding=1)
    first = SPEC.default_config(p, target)
    assert (first["VEC"], first["QT"], first["TC"], first["THREADS"]) == (8, 8, 4, 256)    # 144 = 4.5 x 32
    picks = SPEC.model_picks(p, target, 4)
    assert picks[0] == first and len(set(picks)) == len(picks) == 4
    # at stride 2, 4-element vectors and one column a thread; across 16 threads where C allows
    strided = SPEC.default_config(depthwise_problem(8, 112, 112, 256, 7, 7, stride=2, padding=3), target)
    assert (strided["VEC"], strided["QT"], strided["TC"]) == (4, 1, 16)
    assert SPEC.default_config(depthwise_problem(8, 56, 56, 64, 7, 7, padding=3), target)["QT"] == 4


def test_render_compiles_in_every_size_but_the_batch(target):
    p = depthwise_problem(64, 28, 30, 192, 3, 5, stride=(1, 2), padding=(1, 2), dilation=(2, 1),
                          epilogue="bias_gelu")
    config = SPEC.default_config(p, target)
    code = render(SPEC, p, config, target).code
    assert "constexpr int H = 28, W = 30, C = 192, R = 3, S = 5;" in code
    assert "constexpr int SH = 1, SW = 2, PH = 1, PW = 2;" in code and "DH = 2, DW = 1" in code
    assert "HAS_BIAS = true" in code and "Activation::gelu" in code
    other = depthwise_problem(3, 28, 30, 192, 3, 5, stride=(1, 2), padding=(1, 2), dilation=(2, 1),
                              epilogue="bias_gelu")
    assert render(SPEC, other, config, target).code == code            # the batch is an argument


def test_launch_and_arguments(target):
    p = depthwise_problem(5, 9, 11, 40, 3, 3, padding=1, dtype="float16")
    config = SPEC.space(p, target).make(dict(VEC=4, QT=4, TC=8, THREADS=128))
    assert SPEC.launch(p, config).grid == (-(-5 * 9 * 3 // 16), 2, 1) and SPEC.launch(p, config).block == (128, 1, 1)
    args = SPEC.args(p, config, {"x": BASE, "w": BASE + 4096, "y": BASE + 8192})
    assert [int(a) for a in args] == [BASE, BASE + 4096, BASE + 8192, 0, 5]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()
    shapes = [dict(n=8, h=56, w=56, c=144, r=3, s=3, stride=1, padding=1),
              dict(n=2, h=17, w=9, c=35, r=7, s=7, stride=2, padding=3, dilation=2, epilogue="bias_relu"),
              dict(n=4, h=14, w=14, c=240, r=5, s=5, stride=2, padding=2, epilogue="gelu")]

    def jobs():
        for dtype in ("bfloat16", "float16", "float32"):
            for i, shape in enumerate(shapes):
                p = depthwise_problem(**shape, dtype=dtype)
                space = SPEC.space(p, target)
                for config in [SPEC.default_config(p, target)] + space.sample(per_case(6, 20), seed=i):
                    yield dtype, p, config, render(SPEC, p, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), FAMILY)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_sampled_configs_compile_without_local_memory(compiled, dtype):
    rows = compiled[dtype]
    assert len(rows) >= 15 and compile_failures(rows) == []
    for problem, config, _, result in rows:
        # gelu's erff may keep a call frame of a few words (80 registers, 24 bytes of stack, at 8
        # channels and one column a thread); nothing else spills
        allowed = 32 if problem["epilogue"].endswith("gelu") else 0
        assert result.binary.resources["spill_stores"] <= allowed, config.name
    for problem, config, _, result in rows[:: max(1, len(rows) // 4)]:
        if not problem["epilogue"].endswith("gelu"):
            assert not re.search(r"\b(LDL|STL)\b", sass_or_skip(result.binary.cubin)), config.name


# ---------------------------------------------------------------- kgen.conv2d(groups=C) before any launch

def _call(monkeypatch, x=None, w=None, **kw):
    import kgen
    import kgen.ops.caller as caller
    import kgen.ops.conv as conv

    launched = []
    monkeypatch.setattr(caller, "new_array", lambda like, shape, dtype: FakeArray(shape, dtype, ptr=BASE + (1 << 24)))
    monkeypatch.setattr(conv, "launch_family", lambda family, problem, device, kind, operands: launched.append(
        (family, problem, operands)))
    x = FakeArray((2, 8, 8, 16), "float16") if x is None else x
    w = FakeArray((16, 3, 3, 1), "float16", ptr=BASE + (1 << 20)) if w is None else w
    kw.setdefault("groups", 16)
    return kgen.conv2d(x, w, **kw), launched


def test_groups_c_runs_the_depthwise_family(monkeypatch):
    bias = FakeArray((16,), "float16", ptr=BASE + (1 << 21))
    out, launched = _call(monkeypatch, bias=bias, stride=2, padding=1, activation="relu")
    (family, problem, operands), = launched
    assert family == FAMILY and problem == depthwise_problem(2, 8, 8, 16, 3, 3, stride=2, padding=1,
                                                             dtype="float16", epilogue="bias_relu")
    assert out.shape == (2, 4, 4, 16) and operands["w"] == BASE + (1 << 20) and operands["bias"] == BASE + (1 << 21)


@pytest.mark.parametrize("kw, error", [
    (dict(groups=8), ShapeError),                                                   # neither 1 nor C
    (dict(groups=0), InputError), (dict(groups=2.0), InputError),
    (dict(w=FakeArray((32, 3, 3, 1), "float16", ptr=BASE + (1 << 20))), ShapeError),   # K != C
    (dict(w=FakeArray((16, 3, 3, 2), "float16", ptr=BASE + (1 << 20))), ShapeError),   # two channels a filter
    (dict(precision="tf32", x=FakeArray((2, 8, 8, 16), "float32"),
          w=FakeArray((16, 3, 3, 1), "float32", ptr=BASE + (1 << 20))), InputError),
])
def test_depthwise_checks_before_any_launch(monkeypatch, kw, error):
    with pytest.raises(error):
        _call(monkeypatch, **kw)


def test_float32_depthwise_needs_no_tf32(monkeypatch):
    x, w = FakeArray((1, 5, 5, 8), "float32"), FakeArray((8, 3, 3, 1), "float32", ptr=BASE + 4096)
    _, launched = _call(monkeypatch, x=x, w=w, groups=8)
    (family, problem, _), = launched
    assert family == FAMILY and problem == depthwise_problem(1, 5, 5, 8, 3, 3, dtype="float32")


def test_export_recipe_names_the_operands(target):
    """``kgen export conv2d_depthwise`` records plain arguments, which the generic runtime replays."""
    from kgen.export import launch_recipe

    p = depthwise_problem(2, 56, 56, 144, 3, 3, stride=2, padding=1, epilogue="bias_relu")
    recipe = launch_recipe(SPEC, p, SPEC.default_config(p, target))
    assert [a.get("pointer") for a in recipe["args"][:4]] == ["x", "w", "y", "bias"]
    assert recipe["args"][4] == {"type": "int32", "value": 2}


def test_export_of_shipped_records(tmp_path):
    """``kgen export conv2d_depthwise`` packages the shipped records (plain arguments)."""
    import json

    from kgen.export import export_package

    records = [json.loads(line) for line in open("tuning_db/nvidia-h100-80gb-hbm3_conv2d_depthwise.jsonl")]
    keys = sorted({r["problem_key"] for r in records})[:2]
    (tmp_path / "problems.txt").write_text("".join(k + "\n" for k in keys))
    export_package(FAMILY, tmp_path / "out", problems=tmp_path / "problems.txt")
    table = json.loads((tmp_path / "out" / "kgen_kernels" / "table.json").read_text())
    assert sorted(table["problems"]) == keys
    for entry in table["problems"].values():
        assert [a.get("pointer") for a in entry["args"][:3]] == ["x", "w", "y"]
