"""Grouped GEMM with no GPU: problems, the space (gemm_mma's for the average group, renamed), the
default tile counting every group, rendering (the group count and B's stride compiled in, T
never), the launch's bound on row tiles over every split of the rows, arguments and export
recipe (the ends in the bias slot), sampled configs compiled for sm_90 with HMMA in their SASS,
and ``kgen.gemm_grouped``'s checks before any launch."""

from __future__ import annotations

import contextlib
import re
from types import SimpleNamespace

import numpy as np
import pytest

from kgen.errors import DeviceError, DtypeError, FieldError, InputError, KgenError, LayoutError, ShapeError
from kgen.fields import parse_args
from kgen.kernels.gemm.grouped import (GemmGrouped, grouped_problem, leading_dims, row_tile_bound, rows_per_group,
                                       split_rows)
from kgen.problem import Problem, Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, sass_or_skip
from fakes import BASE, FakeArray

SPEC = GemmGrouped()


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def test_problem_key_and_registration():
    p = grouped_problem(8, 1000, 60, 40, "float16", "NT", epilogue="gelu")
    assert Problem.from_key(p.key) == p and isinstance(get_spec("gemm_grouped"), GemmGrouped)
    assert (p["groups"], p["m"], p["layout"], p["epilogue"]) == (8, 1000, "NT", "gelu")
    assert rows_per_group(p) == 125 and leading_dims(p) == (40, 40, 60)
    # B's groups lie k * n apart: an odd product takes narrower vectors than the leading dimension allows
    assert grouped_problem(4, 64, 24, 3, "bfloat16", "NN")["align_b"] == 8
    assert grouped_problem(4, 64, 8, 3, "bfloat16", "NN")["align_b"] == 8
    assert grouped_problem(4, 64, 12, 3, "bfloat16", "NN")["align_b"] == 4


@pytest.mark.parametrize("args,kw,error", [
    ((0, 8, 8, 8), {}, ShapeError), ((5000, 8, 8, 8), {}, ShapeError), ((True, 8, 8, 8), {}, ShapeError),
    ((2, 0, 8, 8), {}, ShapeError), ((2, 8, 8, 8), {"layout": "TN"}, LayoutError),
    ((2, 8, 8, 8), {"epilogue": "bias"}, InputError), ((2, 8, 8, 8), {"dtype": "int8"}, DtypeError),
])
def test_problem_validation(args, kw, error):
    with pytest.raises(error):
        grouped_problem(*args, **kw)


def test_request_from_command_line_fields(target):
    values = parse_args(SPEC.fields(), ["--groups", "64", "--m", "8192", "--n", "1024", "--k", "2048", "--dtype",
                                        "bfloat16", "--layout", "nt"], "gemm_grouped")
    spec, problem = SPEC.request(target, **values)
    assert spec is SPEC and problem == grouped_problem(64, 8192, 1024, 2048, "bfloat16", "NT")
    with pytest.raises(FieldError):
        parse_args(SPEC.fields(), ["--m", "8", "--n", "8", "--k", "8"], "gemm_grouped")      # groups is required
    with pytest.raises(InputError):
        SPEC.request(target, **parse_args(SPEC.fields(), ["--groups", "2", "--m", "8", "--n", "8", "--k", "8",
                                                           "--dtype", "float32"], "gemm_grouped"))


def test_default_tile_counts_every_group(target):
    few = SPEC.default_config(grouped_problem(1, 512, 512, 512), target)
    many = SPEC.default_config(grouped_problem(128, 128 * 512, 512, 512), target)
    area = lambda c: c["BM"] * c["BN"]       # noqa: E731
    assert area(many) > area(few)            # 128 groups fill the SMs with large tiles; one needs small ones
    for p in (grouped_problem(64, 100, 70, 17, "float16", "NT"), grouped_problem(3, 1, 1, 1)):
        space = SPEC.space(p, target)
        config = SPEC.default_config(p, target)
        assert space.is_valid(config.as_dict()) and config.name.startswith("gemm_grouped_")
    assert SPEC.vendor_supported(grouped_problem(8, 64, 64, 64)) is False and SPEC.model_choice(
        grouped_problem(8, 64, 64, 64), target) is None


def test_render_compiles_in_the_groups_never_the_rows(target):
    p = grouped_problem(12, 1000, 72, 40, "bfloat16", "NT", epilogue="relu")
    config = SPEC.default_config(p, target)
    code = render(SPEC, p, config, target).code
    assert "base < 12;" in code and "B += (long long)group * 2880ll;" in code
    assert "const uint3 blockIdx = make_uint3(" in code and "bias = nullptr;" in code
    other = grouped_problem(12, 7777, 72, 40, "bfloat16", "NT", epilogue="relu")
    assert render(SPEC, other, config, target).code == code         # one kernel for every number of tokens


def test_row_tile_bound_covers_every_split():
    """The grid's row tiles are at least what any split needs, and exactly that for the worst."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        groups, bm = int(rng.integers(1, 70)), int(rng.choice([16, 32, 64, 128, 256]))
        total = int(rng.integers(1, 3000))
        p = grouped_problem(groups, total, 64, 64)
        cuts = np.sort(rng.integers(0, total + 1, groups - 1))
        sizes = np.diff(np.concatenate([[0], cuts, [total]]))
        assert sum(-(-int(s) // bm) for s in sizes) <= row_tile_bound(p, bm)
        worst = [1] * (min(groups, total) - 1) + [total - min(groups, total) + 1]     # every group but one a row
        assert sum(-(-s // bm) for s in worst) == row_tile_bound(p, bm)
    ends = split_rows(1000, 7, seed=3)
    assert ends.dtype == np.int32 and ends[-1] == 1000 and (np.diff(ends) >= 0).all()


def test_launch_arguments_and_recipe(target):
    p = grouped_problem(6, 500, 72, 40, "bfloat16", "NN")
    config = SPEC.default_config(p, target)
    v = config.as_dict()
    assert SPEC.launch(p, config).grid == (row_tile_bound(p, v["BM"]) * -(-72 // v["BN"]), 1, 1)
    args = SPEC.args(p, config, {"a": BASE, "b": BASE + 1024, "c": BASE + 4096, "ends": BASE + 8192})
    assert [int(x) for x in args[:4]] == [BASE, BASE + 1024, BASE + 4096, BASE + 8192]
    assert [int(x) for x in args[4:10]] == [500, 72, 40, 40, 72, 72]
    recipe = SPEC.arg_recipe(p, config)
    assert recipe[3] == {"pointer": "ends"} and [r["value"] for r in recipe[7:10]] == [40, 72, 72]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()

    def jobs():
        for dtype in ("bfloat16", "float16"):
            for i, layout in enumerate(("NN", "NT", "NN")):
                p = grouped_problem((8, 64, 3)[i], 4000, 136, 72, dtype, layout, epilogue=("none", "relu", "gelu")[i])
                space = SPEC.space(p, target)
                for config in space.sample(17, seed=i):
                    yield dtype, p, config, render(SPEC, p, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "gemm_grouped")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sampled_configs_compile_with_hmma(compiled, dtype):
    rows = compiled[dtype]
    assert len(rows) >= 50 and compile_failures(rows) == []
    for _, config, _, result in rows[:: max(1, len(rows) // 6)]:
        assert re.search(r"\bHMMA\.", sass_or_skip(result.binary.cubin)), config.name


# ---------------------------------------------------------------- kgen.gemm_grouped, before any launch

A = FakeArray((100, 16), "float16")
B = FakeArray((4, 16, 8), "float16", ptr=BASE + 8192)
ENDS = FakeArray((4,), "int32", ptr=BASE + 16384)


@pytest.mark.parametrize("a,b,ends,kw,error", [
    (A, B, ENDS, {}, None),
    (A, FakeArray((4, 16, 8), "float16", ptr=BASE + 8192, strides=(128, 1, 16)), ENDS, {}, None),   # B as (G, N, K).T
    (A, B, [10, 20, 60, 100], {}, None),                                   # host ends
    (A, B, [10, 20, 60], {}, ShapeError), (A, B, [10, 5, 60, 100], {}, ShapeError),
    (A, B, [10, 20, 60, 101], {}, ShapeError), (A, B, [-1, 20, 60, 100], {}, ShapeError),
    (A, B, np.array([0.5, 1, 2, 3]), {}, ShapeError),
    (A, B, FakeArray((4,), "int64", ptr=BASE + 16384), {}, ShapeError),
    (A, B, FakeArray((4,), "int32", ptr=BASE + 16384, device=1), {}, DeviceError),
    (FakeArray((100, 16), "float16", strides=(1, 100)), B, ENDS, {}, LayoutError),    # a transposed
    (A, FakeArray((16, 8), "float16", ptr=BASE + 8192), ENDS, {}, ShapeError),       # b 2-D
    (A, FakeArray((4, 12, 8), "float16", ptr=BASE + 8192), ENDS, {}, ShapeError),    # K differs
    (A, FakeArray((4, 16, 8), "float32", ptr=BASE + 8192), ENDS, {}, DtypeError),
    (FakeArray((100, 16), "float32"), FakeArray((4, 16, 8), "float32", ptr=BASE + 8192), ENDS, {}, DtypeError),
    (A, B, ENDS, {"activation": "tanh"}, KgenError),
    (A, B, ENDS, {"out": FakeArray((100, 9), "float16", ptr=BASE + (1 << 20))}, ShapeError),
    (A, B, ENDS, {"out": FakeArray((100, 8), "float16", ptr=BASE + 64)}, InputError),     # out overlaps a
    (FakeArray((100, 0), "float16"), FakeArray((4, 0, 8), "float16", ptr=BASE + 8192), ENDS, {}, ShapeError),
])
def test_checks_before_any_launch(a, b, ends, kw, error, monkeypatch):
    import kgen
    import kgen.ops.caller as caller
    import kgen.ops.gemm_grouped as grouped

    launched = []
    monkeypatch.setattr(grouped, "launch_family", lambda family, problem, device, kind, operands: launched.append(
        (problem, operands)))
    monkeypatch.setattr(caller, "new_array", lambda like, shape, dtype: FakeArray(shape, "float16",
                                                                                  ptr=BASE + (1 << 24)))
    monkeypatch.setattr(grouped, "on_caller_stream", lambda kind, device: contextlib.nullcontext())
    monkeypatch.setattr(grouped, "routed", lambda problem, device: (SimpleNamespace(family=problem.family), problem,
                                                                    SimpleNamespace(time_ms=0.01)))
    monkeypatch.setattr(grouped, "to_device", lambda host: SimpleNamespace(data=SimpleNamespace(ptr=BASE + (1 << 25))))
    if error is None:
        out = kgen.gemm_grouped(a, b, ends, **kw)
        (problem, operands), = launched
        assert out.shape == (100, 8) and problem["groups"] == 4 and problem["m"] == 100
        assert problem["layout"] == ("NT" if b.elem_strides else "NN")
        assert operands["ends"] == (BASE + 16384 if isinstance(ends, FakeArray) else BASE + (1 << 25))
        return
    with pytest.raises(error):
        kgen.gemm_grouped(a, b, ends, **kw)
    assert not launched
