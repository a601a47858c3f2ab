"""The reduce family with no GPU: problems and their checks, the space's constraints, the
default rule, rendering, sampled configs compiled for sm_90 and their SASS, and the user
function's checks that come before any launch."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from kgen.errors import DtypeError, FieldError, InputError, LayoutError, ShapeError
from kgen.fields import parse_args
from kgen.kernels.memory.elements import DTYPES, vector_widths
from kgen.kernels.memory.reduce import (LANE_MAX_COLS, OPS, SLOTS, SPLITTING, STRATEGIES, Reduce, reduce_problem,
                                        reference_reduce)
from kgen.ops.reduce import reduce_layout
from kgen.problem import Problem, Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, compiled_rows, sass_or_skip
from fakes import FakeArray

SPEC = Reduce()
SHAPES = [(1, 1), (1, 31), (1, 1000003), (7, 4097), (3000, 1), (33, 1000), (4096, 4096), (100000, 64),
          (1, 1 << 28), (600, 1 << 20), (2, 129), (1 << 20, 3)]


@pytest.fixture(scope="module")
def target():
    t = Target.h200()
    assert t.arch == "sm_90"
    return t


# ---------------------------------------------------------------- problems

def test_problem_key_and_registration():
    p = reduce_problem("sum", 3, 5, "float16", deterministic=True)
    assert p.key == "reduce|cols=5|deterministic=1|dtype=float16|op=sum|rows=3"
    assert Problem.from_key(p.key) == p                  # ints and strings only: the key reads back
    assert isinstance(get_spec("reduce"), Reduce)
    import kgen

    assert kgen.reduce is not None and "reduce" in kgen.__all__


def test_deterministic_is_kept_only_where_it_changes_the_result():
    for op in ("max", "min", "argmax"):
        assert reduce_problem(op, 2, 9, "float32", deterministic=True)["deterministic"] == 0
    assert reduce_problem("mean", 2, 9, "float32", deterministic=True)["deterministic"] == 1


@pytest.mark.parametrize("args,error", [
    (("prod", 1, 4, "float32"), InputError),
    (("sum", 0, 4, "float32"), ShapeError),
    (("sum", 4, 0, "float32"), ShapeError),
    (("sum", 4, 2.5, "float32"), ShapeError),
    (("sum", 4, 4, "float64"), DtypeError),
    (("max", 4, 4, "int32"), DtypeError),
])
def test_problem_validation(args, error):
    with pytest.raises(error) as info:
        reduce_problem(*args)
    assert info.value.remedy


def test_request_from_command_line_fields(target):
    fields = SPEC.fields()
    values = parse_args(fields, ["--op", "argmax", "--cols", "4097", "--rows", "7", "--dtype", "bfloat16"], "reduce")
    spec, problem = SPEC.request(target, **values)
    assert spec is SPEC and problem == reduce_problem("argmax", 7, 4097, "bfloat16")
    values = parse_args(fields, ["--cols=1000003", "--deterministic"], "reduce")
    assert SPEC.request(target, **values)[1].key == "reduce|cols=1000003|deterministic=1|dtype=float32|op=sum|rows=1"
    with pytest.raises(FieldError):
        parse_args(fields, ["--cols", "8", "--op", "prod"], "reduce")
    with pytest.raises(FieldError):
        parse_args(fields, ["--rows", "8"], "reduce")            # cols is required


def test_output_dtypes_and_bytes():
    p = reduce_problem("argmax", 10, 100, "float16")
    assert SPEC.output_dtype(p, "out") == "int64" and SPEC.output_tolerance(p, "out") == 0.0
    assert SPEC.bytes(p) == 10 * 100 * 2 + 10 * 8
    q = reduce_problem("mean", 10, 100, "bfloat16")
    assert SPEC.output_dtype(q, "out") == "bfloat16" and SPEC.bytes(q) == 10 * 100 * 2 + 10 * 2
    assert SPEC.output_tolerance(reduce_problem("max", 1, 9, "bfloat16"), "out") == 0.0


def test_reference_has_numpys_nan_rules():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 5.0, 5.0, -np.inf], [-np.inf] * 4, [np.inf, -np.inf, 0, 1]])
    assert list(reference_reduce(np, x, "argmax")) == [1, 1, 0, 0]
    with np.errstate(invalid="ignore"):
        mx, mn, s = (reference_reduce(np, x, op) for op in ("max", "min", "sum"))
    assert np.isnan(mx[0]) and mx[1] == 5 and mx[2] == -np.inf and mx[3] == np.inf
    assert np.isnan(mn[0]) and mn[1] == -np.inf
    assert np.isnan(s[0]) and np.isnan(s[3]) and s[2] == -np.inf


# ---------------------------------------------------------------- the space

@pytest.mark.parametrize("rows,cols", SHAPES)
def test_every_config_fits_the_problem(target, rows, cols):
    for op in OPS:
        for deterministic in (False, True):
            problem = reduce_problem(op, rows, cols, "float16", deterministic)
            configs = SPEC.space(problem, target).configs()
            assert configs, problem.key
            assert len({c.name for c in configs}) == len(configs)
            for c in configs:
                v = c.as_dict()
                assert c.name.startswith(f"reduce_{op}_f16_{v['STRATEGY']}_")
                assert ("_l" in c.name) == (v["STRATEGY"] == "warp")
                assert v["VEC"] in vector_widths("float16") and v["VEC"] <= cols
                assert (v["SPLIT"] > 1) == (v["STRATEGY"] in SPLITTING)
                if v["STRATEGY"] in SPLITTING:
                    assert rows <= 4 * target.sm_count and rows * v["SPLIT"] <= SLOTS
                    assert cols >= v["SPLIT"] * v["BLOCK"] * v["VEC"] * v["ITEMS"]
                if v["STRATEGY"] == "warp":
                    assert v["LANES"] == 32 or cols <= LANE_MAX_COLS * v["LANES"]
                    assert v["LANES"] * v["VEC"] < 2 * cols
                else:
                    assert v["LANES"] == 32
                if v["STRATEGY"] == "block":
                    assert v["BLOCK"] * v["VEC"] < 2 * cols
                if v["STRATEGY"] == "split_atomic":
                    assert not problem["deterministic"]


def test_deterministic_sums_have_no_atomic_split_and_the_others_do(target):
    def strategies(op, deterministic):
        problem = reduce_problem(op, 1, 1 << 24, "float32", deterministic)
        return {c["STRATEGY"] for c in SPEC.space(problem, target).configs()}

    assert "split_atomic" not in strategies("sum", True) and "split" in strategies("sum", True)
    assert "split_atomic" not in strategies("mean", True)
    assert {"split", "split_atomic", "warp", "block"} <= strategies("sum", False)
    assert "split_atomic" in strategies("max", True)       # exact whatever the order


def test_split_only_for_few_long_rows(target):
    many = reduce_problem("sum", 4 * target.sm_count + 1, 1 << 20, "float32")
    assert not {c["STRATEGY"] for c in SPEC.space(many, target).configs()} & set(SPLITTING)
    short = reduce_problem("sum", 1, 1000, "float32")
    assert all(c["SPLIT"] * c["BLOCK"] * c["VEC"] * c["ITEMS"] <= 1000
               for c in SPEC.space(short, target).configs() if c["STRATEGY"] in SPLITTING)


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_default_config_is_valid_and_uses_wide_vectors(target, rows, cols, dtype):
    for op in OPS:
        problem = reduce_problem(op, rows, cols, dtype, deterministic=True)
        space = SPEC.space(problem, target)
        config = SPEC.default_config(problem, target)
        assert space.is_valid(config.as_dict()), config.name
        assert config["STRATEGY"] != "split_atomic"           # the default is reproducible
        if cols * 2 >= 16 * 64 and cols % max(vector_widths(dtype)) == 0:
            assert config["VEC"] == max(vector_widths(dtype)), config.name


def test_default_rule_picks(target):
    def pick(rows, cols, dtype="float32"):
        return SPEC.default_config(reduce_problem("sum", rows, cols, dtype), target).as_dict()

    assert pick(3000, 1) == {"STRATEGY": "warp", "LANES": 1, "BLOCK": 256, "VEC": 1, "ITEMS": 1, "SPLIT": 1}
    assert pick(1 << 20, 8)["LANES"] == 2 and pick(1 << 20, 8)["VEC"] == 4        # a vector a lane
    assert pick(100000, 64, "float16")["LANES"] == 8 and pick(100000, 64, "float16")["VEC"] == 8
    assert pick(100000, 1000)["STRATEGY"] == "warp" and pick(100000, 1000)["LANES"] == 32
    assert pick(4096, 4096)["STRATEGY"] == "block"
    big = pick(1, 1 << 28)
    assert big["STRATEGY"] == "split" and big["SPLIT"] * big["BLOCK"] >= target.sm_count * 1024
    few = pick(8, 1 << 24, "bfloat16")
    assert few["STRATEGY"] == "split" and few["VEC"] == 8 and 8 * few["SPLIT"] >= target.sm_count
    assert pick(1, 31)["STRATEGY"] == "warp" and pick(1, 31)["VEC"] == 1         # odd rows: element loads


def test_model_picks_start_with_the_default(target):
    problem = reduce_problem("max", 7, 4097, "float32")
    picks = SPEC.model_picks(problem, target, 6)
    space = SPEC.space(problem, target)
    assert picks[0] == SPEC.default_config(problem, target) and len(picks) == 6
    assert len(set(picks)) == 6 and all(space.is_valid(c.as_dict()) for c in picks)


# ---------------------------------------------------------------- rendering

def _config(problem, target, **values):
    return SPEC.space(problem, target).config(**values)


def test_render_is_independent_of_the_sizes(target):
    a, b = reduce_problem("sum", 7, 4097, "float32"), reduce_problem("sum", 9, 100000, "float32")
    values = dict(STRATEGY="block", LANES=32, BLOCK=256, VEC=4, ITEMS=2, SPLIT=1)
    sa, sb = render(SPEC, a, _config(a, target, **values), target), render(SPEC, b, _config(b, target, **values), target)
    assert sa.code == sb.code and sa.digest == sb.digest        # one cubin serves every size
    assert sa.entry == "reduce_sum_f32_block_b256_v4_i2"


def test_render_each_strategy(target):
    problem = reduce_problem("argmax", 2, 1 << 20, "bfloat16")
    code = {s: render(SPEC, problem, _config(problem, target, STRATEGY=s, LANES=32, BLOCK=256, VEC=8, ITEMS=2,
                                             SPLIT=16 if s in SPLITTING else 1), target).code
            for s in ("warp", "block", "split", "split_atomic")}
    assert all("__shfl_xor_sync" in c and "kgen_bf16_to_float" in c for c in code.values())
    assert "kgen_block_reduce" in code["block"] and "kgen_block_reduce" not in code["warp"]
    assert "__ldcg" in code["split"] and "atomicAdd(&counters[row], 1u)" in code["split"]
    assert "atomicMax(acc" in code["split_atomic"] and "__ldcg" not in code["split_atomic"]
    assert "long long* __restrict__ out" in code["split"]
    thread = reduce_problem("min", 100, 5, "float16")
    c = render(SPEC, thread, _config(thread, target, STRATEGY="warp", LANES=1, BLOCK=128, VEC=1, ITEMS=4,
                                     SPLIT=1), target)
    assert "kgen_group_reduce" not in c.code.split("extern \"C\"")[1] and "kgen_float_to_half" in c.code
    c = render(SPEC, thread, _config(thread, target, STRATEGY="warp", LANES=4, BLOCK=128, VEC=1, ITEMS=1,
                                     SPLIT=1), target)
    assert "kgen_group_reduce<4>" in c.code


def test_deterministic_split_has_no_float_atomics(target):
    problem = reduce_problem("sum", 1, 1 << 24, "float32", deterministic=True)
    for config in SPEC.space(problem, target).configs():
        code = render(SPEC, problem, config, target).code
        assert "atomicAdd(acc" not in code, config.name


# ---------------------------------------------------------------- compiling for sm_90

COMPILE_PROBLEMS = [(1, 1000003), (7, 4097), (3000, 33)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, target):
    """Every op x dtype: one sampled config on each of three problems, one config of every
    strategy on the long row and one of every lane count on short rows (150+ configs),
    compiled through one pool of 2."""
    def jobs():
        for seed, (op, dtype) in enumerate((o, d) for o in OPS for d in DTYPES):
            for rows, cols in COMPILE_PROBLEMS:
                problem = reduce_problem(op, rows, cols, dtype)
                space = SPEC.space(problem, target)
                for config in space.sample(1, seed=seed * 7 + rows):
                    yield (op, dtype), problem, config, render(SPEC, problem, config, target, space)
            problem = reduce_problem(op, 1, 1000003, dtype)
            space = SPEC.space(problem, target)
            by_strategy = {}
            for config in space.sample(len(STRATEGIES) * 40, seed=seed):
                by_strategy.setdefault(config["STRATEGY"], config)
            for config in by_strategy.values():
                yield (op, dtype), problem, config, render(SPEC, problem, config, target, space)
            problem = reduce_problem(op, 3000, 33, dtype)
            space = SPEC.space(problem, target)
            by_lanes = {}
            for config in space.sample(200, seed=seed):
                if config["STRATEGY"] == "warp":
                    by_lanes.setdefault(config["LANES"], config)
            for config in by_lanes.values():
                yield (op, dtype), problem, config, render(SPEC, problem, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "reduce")


def test_sampled_configs_compile_for_sm90(compiled):
    rows = compiled_rows(compiled)
    assert len(rows) >= 30
    failed = compile_failures(rows, 400)
    assert not failed, failed
    strategies = {c["STRATEGY"] for _, c, _, _ in rows}
    assert strategies >= {"warp", "block", "split", "split_atomic"}
    assert {c["LANES"] for _, c, _, _ in rows if c["STRATEGY"] == "warp"} == {1, 2, 4, 8, 16, 32}
    for problem, config, source, result in rows:
        b = result.binary
        assert b.entry == config.name and b.arch == "sm_90" and b.cubin[:4] == b"\x7fELF"
        assert config.name.encode() in b.cubin
        # ptxas may keep a few of a row loop's invariants on the stack, never the hot loop's state
        assert b.resources.get("stack", 0) <= 64, (config.name, b.resources)


def _binary(target, problem, **values):
    from kgen.compile import compile_source

    result = compile_source(render(SPEC, problem, _config(problem, target, **values), target))
    assert result.failure is None, result.failure
    return result.binary


def test_sass_has_128_bit_loads_and_warp_shuffles(target):
    problem = reduce_problem("sum", 64, 1 << 16, "float32")
    sass = sass_or_skip(_binary(target, problem, STRATEGY="block", LANES=32, BLOCK=256, VEC=4, ITEMS=4,
                                SPLIT=1).cubin)
    assert "LDG.E.128" in sass
    assert re.search(r"SHFL\.BFLY", sass)
    half = reduce_problem("argmax", 100000, 64, "float16")
    sass = sass_or_skip(_binary(target, half, STRATEGY="warp", LANES=8, BLOCK=256, VEC=8, ITEMS=1, SPLIT=1).cubin)
    assert "LDG.E.128" in sass and "SHFL.BFLY" in sass and "FMNMX.NAN" in sass    # a step's max first


def test_sass_of_the_split_forms(target):
    problem = reduce_problem("sum", 1, 1 << 24, "float32")
    ticket = sass_or_skip(_binary(target, problem, STRATEGY="split", LANES=32, BLOCK=256, VEC=4, ITEMS=4,
                                  SPLIT=64).cubin)
    assert "ADD.F32" not in " ".join(l for l in ticket.splitlines() if "ATOM" in l or "RED" in l)
    assert re.search(r"ATOMG\.E\.ADD\S*\s", ticket)        # the integer ticket
    atomic = sass_or_skip(_binary(target, problem, STRATEGY="split_atomic", LANES=32, BLOCK=256, VEC=4, ITEMS=4,
                                  SPLIT=64).cubin)
    assert re.search(r"(ATOMG|RED)\.E\.ADD\.F32", atomic)


# ---------------------------------------------------------------- the user function's checks

def test_layout_of_axes():
    assert reduce_layout((4, 5, 6), -1) == (20, 6, (4, 5))
    assert reduce_layout((4, 5, 6), 2) == (20, 6, (4, 5))
    assert reduce_layout((4, 5, 6), (-2, -1)) == (4, 30, (4,))
    assert reduce_layout((4, 5, 6), None) == (1, 120, ())
    assert reduce_layout((3, 1, 1), 0) == (1, 3, (1, 1))        # the same memory as a last-axis reduction
    assert reduce_layout((), None) == (1, 1, ()) and reduce_layout((), -1) == (1, 1, ())
    assert reduce_layout((0, 5), -1) == (0, 5, (0,))
    with pytest.raises(ShapeError) as info:
        reduce_layout((4, 5, 6), 0)
    assert "movedim" in info.value.remedy
    with pytest.raises(ShapeError):
        reduce_layout((4, 5), 2)
    with pytest.raises(InputError):
        reduce_layout((4, 5), 1.0)


def test_user_function_checks_before_any_launch():
    import kgen

    with pytest.raises(LayoutError):
        kgen.reduce(FakeArray((8, 8)).T)
    with pytest.raises(InputError):
        kgen.reduce(FakeArray((8, 8)), "median")
    with pytest.raises(ShapeError):
        kgen.reduce(FakeArray((8, 8)), axis=0)
    with pytest.raises(DtypeError):
        kgen.reduce(FakeArray((8, 8), "float64"))
    for op in ("max", "min", "argmax"):
        with pytest.raises(ShapeError):
            kgen.reduce(FakeArray((4, 0)), op)
        with pytest.raises(ShapeError):
            kgen.reduce(FakeArray((0,)), op, axis=None)
    with pytest.raises(ShapeError):
        kgen.reduce(FakeArray((4, 8)), out=FakeArray((8,)))
    with pytest.raises(DtypeError):
        kgen.reduce(FakeArray((4, 8)), "argmax", out=FakeArray((4,), "float32"))
    with pytest.raises(DtypeError):
        kgen.reduce(FakeArray((4, 8), "float16"), "sum", out=FakeArray((4,), "float32"))


def test_workspace_holds_every_split_config(target):
    from kgen.kernels.memory.reduce import COUNTERS, STATE_BYTES, WORKSPACE_BYTES

    assert WORKSPACE_BYTES == COUNTERS * 12 + SLOTS * 12 and STATE_BYTES == COUNTERS * 12
    for rows in (1, 2, 7, 100, 4 * target.sm_count):
        problem = reduce_problem("argmax", rows, 1 << 22, "float16")
        for config in SPEC.space(problem, target).configs():
            if config["STRATEGY"] in SPLITTING:
                assert rows <= COUNTERS and rows * config["SPLIT"] <= SLOTS
                assert math.prod(SPEC.launch(problem, config).grid) == rows * config["SPLIT"]
