"""K-grouped GEMM with no GPU: problems (layout TN, the token count's bucket as record problem),
the space (gemm_mma's for the average group's rows, renamed), the default tile counting every
group's tiles, rendering (nothing of the shape compiled in), the launch (every group's tiles),
arguments and export recipe (the ends in the bias slot, dense leading dimensions), sampled
configs compiled for sm_90 with HMMA in their SASS, and ``kgen.gemm_kgrouped``'s checks before
any launch."""

from __future__ import annotations

import contextlib
import re
from types import SimpleNamespace

import numpy as np
import pytest

from kgen.errors import DeviceError, DtypeError, InputError, LayoutError, ShapeError
from kgen.fields import parse_args
from kgen.kernels.gemm.kgrouped import GemmKGrouped, kgrouped_problem
from kgen.problem import Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, per_case, sass_or_skip
from fakes import BASE, FakeArray

SPEC = GemmKGrouped()
FAMILY = "gemm_kgrouped"


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def test_problem_key_registration_and_record_problem():
    assert isinstance(get_spec(FAMILY), GemmKGrouped)
    p = kgrouped_problem(8, 96, 40, 1000, "float16")
    assert p["layout"] == "TN" and p["groups"] == 8 and p["k"] == 1000 and p["epilogue"] == "none"
    assert (p["align_a"], p["align_b"]) == (8, 8)                     # rows of 96 and 40 halves
    assert kgrouped_problem(8, 97, 40, 1000, "float16")["align_a"] == 1
    assert SPEC.record_problem(p) == p.replace(k=1024)                 # the token count's bucket
    assert SPEC.record_problem(p.replace(k=1024)) == p.replace(k=1024)
    assert not SPEC.vendor_supported(p)


@pytest.mark.parametrize("args", [(0, 8, 8, 8), (5000, 8, 8, 8), (True, 8, 8, 8), (4, 0, 8, 8), (4, 8, 8, 0)])
def test_problem_validation(args):
    with pytest.raises(ShapeError):
        kgrouped_problem(*args)


def test_request_from_command_line_fields(target):
    values = parse_args(SPEC.fields(), ["--groups", "16", "--m", "512", "--n", "256", "--k", "3000",
                                        "--dtype", "bfloat16"], FAMILY)
    spec, p = SPEC.request(target, **values)
    assert spec is SPEC and p == kgrouped_problem(16, 512, 256, 3000, "bfloat16")
    with pytest.raises(InputError, match="tf32"):
        SPEC.request(target, **parse_args(SPEC.fields(), ["--groups", "2", "--m", "8", "--n", "8", "--k", "8",
                                                          "--dtype", "float32"], FAMILY))
    spec, p = SPEC.request(target, **parse_args(SPEC.fields(), ["--groups", "2", "--m", "8", "--n", "8", "--k", "8",
                                                                "--dtype", "float32", "--precision", "tf32"], FAMILY))
    assert p["dtype"] == "float32" and p["precision"] == "tf32"


def test_space_and_default_count_every_groups_tiles(target):
    p = kgrouped_problem(64, 2048, 1408, 8192)
    space = SPEC.space(p, target)
    assert all(c.name.startswith(FAMILY + "_bf16_tn_") for c in space.sample(20, seed=1))
    config = SPEC.default_config(p, target)
    v = config.as_dict()
    assert SPEC.tiles(p, v["BM"], v["BN"]) >= target.sm_count
    assert SPEC.launch(p, config).grid == (64 * -(-2048 // v["BM"]) * -(-1408 // v["BN"]), 1, 1)
    # few groups of small products: a smaller tile, so that every SM has one
    small = SPEC.default_config(kgrouped_problem(2, 256, 256, 8192), target).as_dict()
    assert small["BM"] * small["BN"] < v["BM"] * v["BN"]


def test_render_takes_the_shape_as_arguments(target):
    config = SPEC.default_config(kgrouped_problem(64, 512, 512, 4096), target)
    one = render(SPEC, kgrouped_problem(64, 512, 512, 4096), config, target).code
    assert one == render(SPEC, kgrouped_problem(8, 512, 512, 4096), config, target).code    # groups: argument
    assert "group_ends" in one and "first_row" in one and "K = last_row - first_row" in one
    # the prologue's names leave the body's alone: tiles grouped GM rows at a time still call the
    # scheduler (a local named group_tiles once turned that call into comparisons)
    grouped = next(c for c in SPEC.space(kgrouped_problem(64, 512, 512, 4096), target).configs() if c["GM"] > 1)
    code = render(SPEC, kgrouped_problem(64, 512, 512, 4096), grouped, target).code
    assert re.search(r"group_tiles<\d+>\(pid,", code) and not re.search(r"\bgroup_tiles\s*=", code)


def test_launch_arguments_and_recipe(target):
    p = kgrouped_problem(6, 72, 40, 500, "bfloat16")
    config = SPEC.default_config(p, target)
    args = SPEC.args(p, config, {"a": BASE, "b": BASE + 1024, "c": BASE + 4096, "ends": BASE + 8192})
    assert [int(x) for x in args[:4]] == [BASE, BASE + 1024, BASE + 4096, BASE + 8192]
    assert [int(x) for x in args[4:10]] == [72, 40, 500, 72, 40, 40]          # M N K, lda ldb ldc
    recipe = SPEC.arg_recipe(p, config)
    assert recipe[3] == {"pointer": "ends"} and [r["value"] for r in recipe[7:10]] == [72, 40, 40]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()

    def jobs():
        for dtype in ("bfloat16", "float16", "float32"):
            for i, (groups, m, n, k) in enumerate(((8, 1024, 768, 4000), (64, 136, 72, 9000), (3, 40, 24, 61))):
                p = kgrouped_problem(groups, m, n, k, dtype, "float32" if i == 1 else None)
                space = SPEC.space(p, target)
                for config in space.sample(per_case(5, 17), seed=i):
                    yield dtype, p, config, render(SPEC, p, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), FAMILY)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_sampled_configs_compile_with_hmma(compiled, dtype):
    rows = compiled[dtype]
    assert len(rows) >= 15 and compile_failures(rows) == []
    for _, config, _, result in rows[:: max(1, len(rows) // 4)]:
        assert re.search(r"\bHMMA\.", sass_or_skip(result.binary.cubin)), config.name
        assert result.binary.resources["spill_stores"] == 0, config.name


# ---------------------------------------------------------------- kgen.gemm_kgrouped, before any launch

A = FakeArray((100, 16), "float16")
B = FakeArray((100, 8), "float16", ptr=BASE + 8192)
ENDS = FakeArray((4,), "int32", ptr=BASE + 16384)


@pytest.mark.parametrize("a, b, ends, kw, error", [
    (A, B, ENDS, {}, None),
    (A, B, [10, 20, 60, 100], {}, None),                                   # host ends
    (A, B, [10, 20, 60, 101], {}, ShapeError), (A, B, [10, 5, 60, 100], {}, ShapeError),
    (A, B, [[10, 20]], {}, ShapeError), (A, B, np.array([0.5, 1, 2, 3]), {}, ShapeError),
    (A, B, FakeArray((4,), "int64", ptr=BASE + 16384), {}, ShapeError),
    (A, B, FakeArray((4,), "int32", ptr=BASE + 16384, device=1), {}, DeviceError),
    (FakeArray((100, 16), "float16", strides=(1, 100)), B, ENDS, {}, LayoutError),    # a transposed
    (A, FakeArray((99, 8), "float16", ptr=BASE + 8192), ENDS, {}, ShapeError),        # rows differ
    (A, FakeArray((100, 8), "float32", ptr=BASE + 8192), ENDS, {}, DtypeError),
    (FakeArray((100, 16), "float32"), FakeArray((100, 8), "float32", ptr=BASE + 8192), ENDS, {}, DtypeError),
    (A, B, ENDS, {"out": FakeArray((4, 16, 9), "float16", ptr=BASE + (1 << 20))}, ShapeError),
    (A, B, ENDS, {"out": FakeArray((4, 16, 8), "float16", ptr=BASE + 64)}, InputError),     # out overlaps a
])
def test_checks_before_any_launch(a, b, ends, kw, error, monkeypatch):
    import kgen
    import kgen.ops.caller as caller
    import kgen.ops.gemm_kgrouped as kgrouped

    launched = []
    monkeypatch.setattr(kgrouped, "launch_family", lambda family, problem, device, kind, operands: launched.append(
        (family, problem, operands)))
    monkeypatch.setattr(caller, "new_array", lambda like, shape, dtype: FakeArray(shape, "float16",
                                                                                  ptr=BASE + (1 << 24)))
    monkeypatch.setattr(kgrouped, "on_caller_stream", lambda kind, device: contextlib.nullcontext())
    monkeypatch.setattr(kgrouped, "routed", lambda problem, device: (SimpleNamespace(family=problem.family), problem,
                                                                      SimpleNamespace(time_ms=0.01)))
    monkeypatch.setattr(kgrouped, "to_device", lambda host: SimpleNamespace(data=SimpleNamespace(ptr=BASE + (1 << 25))))
    if error is None:
        out = kgen.gemm_kgrouped(a, b, ends, **kw)
        (family, problem, operands), = launched
        assert family == FAMILY and out.shape == (4, 16, 8)
        assert (problem["groups"], problem["m"], problem["n"], problem["k"]) == (4, 16, 8, 100)
        assert operands["ends"] == (BASE + 16384 if isinstance(ends, FakeArray) else BASE + (1 << 25))
        assert operands["c"] == BASE + (1 << 24)
        return
    with pytest.raises(error):
        kgen.gemm_kgrouped(a, b, ends, **kw)
    assert not launched
