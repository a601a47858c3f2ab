"""The softmax and rmsnorm families with no GPU: problems and their checks, the spaces'
constraints per width, the default rule, rendering, launch geometry and arguments, sampled
configs compiled for sm_90 with their SASS and resources, the float64 references, and the
user functions' checks that come before any launch."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from kgen.errors import DtypeError, FieldError, InputError, LayoutError, ShapeError
from kgen.fields import parse_args
from kgen.kernels.memory.elements import DTYPES, element, vector_widths
from kgen.kernels.memory.rownorm import (HELD_ITEMS, HOLDS, STREAM_ITEMS, RmsNorm, Softmax, edge_slots, held_budget,
                                         rmsnorm_reference, row_bytes, rownorm_problem, softmax_reference)
from kgen.problem import Problem, Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, sass_or_skip
from fakes import FakeArray

SPECS = {"softmax": Softmax(), "rmsnorm": RmsNorm()}
FAMILIES = tuple(SPECS)
WIDTHS = (1, 7, 64, 100, 1000, 4096, 4097, 8192, 32768, 50257, 65539, 262144)


@pytest.fixture(scope="module")
def target():
    t = Target.h200()
    assert t.arch == "sm_90"
    return t


# ---------------------------------------------------------------- problems

@pytest.mark.parametrize("family", FAMILIES)
def test_problem_key_and_registration(family):
    import kgen

    p = rownorm_problem(family, 3, 4097, "bfloat16")
    assert p.key == f"{family}|cols=4097|dtype=bfloat16|rows=3"
    assert Problem.from_key(p.key) == p
    assert isinstance(get_spec(family), type(SPECS[family]))
    assert family in kgen.__all__ and callable(getattr(kgen, family))


@pytest.mark.parametrize("args,error", [
    ((0, 4, "float32"), ShapeError),
    ((4, 0, "float32"), ShapeError),
    ((4, 2.5, "float32"), ShapeError),
    ((True, 4, "float32"), ShapeError),
    ((4, 1 << 31, "float32"), ShapeError),
    ((4, 4, "float64"), DtypeError),
    ((4, 4, "int8"), DtypeError),
])
def test_problem_validation(args, error):
    with pytest.raises(error) as info:
        rownorm_problem("softmax", *args)
    assert info.value.remedy


@pytest.mark.parametrize("family", FAMILIES)
def test_request_from_command_line_fields(target, family):
    spec = SPECS[family]
    values = parse_args(spec.fields(), ["--cols", "4097", "--rows", "7", "--dtype", "bfloat16"], family)
    got, problem = spec.request(target, **values)
    assert got is spec and problem == rownorm_problem(family, 7, 4097, "bfloat16")
    values = parse_args(spec.fields(), ["--cols=1000"], family)
    assert spec.request(target, **values)[1].key == f"{family}|cols=1000|dtype=float32|rows=1"
    with pytest.raises(FieldError):
        parse_args(spec.fields(), ["--rows", "8"], family)                # cols is required
    with pytest.raises(FieldError):
        parse_args(spec.fields(), ["--cols", "8", "--dtype", "float64"], family)


def test_bytes_are_one_read_and_one_write():
    assert SPECS["softmax"].bytes(rownorm_problem("softmax", 10, 100, "bfloat16")) == 2 * 10 * 100 * 2
    assert SPECS["rmsnorm"].bytes(rownorm_problem("rmsnorm", 10, 100, "float32")) == 2 * 10 * 100 * 4 + 100 * 4


# ---------------------------------------------------------------- the spaces

@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_config_fits_the_width(target, cols, dtype):
    for rows in (1, 3, 4096):
        problem = rownorm_problem("softmax", rows, cols, dtype)
        spec = SPECS["softmax"]
        configs = spec.space(problem, target).configs()
        assert configs, problem.key
        assert len({c.name for c in configs}) == len(configs)
        for c in configs:
            v = c.as_dict()
            split = v["SPLIT"]
            assert c.name == f"softmax_{v['HOLD']}_t{v['TPR']}_b{v['BLOCK']}_v{v['VEC']}_i{v['ITEMS']}" + (
                f"_s{split}" if split > 1 else "")
            assert v["VEC"] in vector_widths(dtype) and v["VEC"] <= cols
            assert v["BLOCK"] % v["TPR"] == 0 and v["BLOCK"] <= max(32, v["TPR"] * 2 * rows)
            part = math.ceil(cols // v["VEC"] / split)                 # a block's share of the row's vectors
            assert v["TPR"] <= 2 * math.ceil(cols / v["VEC"] / split)  # no thread of a row is always idle
            assert split == 1 or (v["BLOCK"] == v["TPR"] and cols // v["VEC"] // split >= v["TPR"])
            if v["HOLD"] == "regs":
                held = v["ITEMS"] * v["VEC"] + edge_slots(v["VEC"], v["TPR"])
                assert v["TPR"] * v["ITEMS"] >= part and held <= held_budget(v["BLOCK"])
                smaller = [i for i in HELD_ITEMS if i < v["ITEMS"]]
                assert not smaller or v["TPR"] * smaller[-1] < part      # the fewest that cover
            else:
                assert v["ITEMS"] in STREAM_ITEMS
                assert v["ITEMS"] == 1 or v["TPR"] * v["ITEMS"] * v["VEC"] <= cols
            if v["HOLD"] in ("smem", "bulk"):
                assert spec.launch(problem, c).shared_mem + 8 * v["BLOCK"] // 32 <= target.smem_per_block_optin
            if v["HOLD"] == "bulk":
                assert v["BLOCK"] == v["TPR"] and split == 1 and v["VEC"] * element(dtype).size == 16


def test_which_holds_exist_per_width(target):
    def holds(cols, dtype="bfloat16", rows=4096, split=1, target=target):
        return {c["HOLD"] for c in SPECS["softmax"].space(rownorm_problem("softmax", rows, cols, dtype),
                                                          target).configs() if c["SPLIT"] == split}

    assert holds(8192) == set(HOLDS)
    assert holds(32768) == set(HOLDS)                       # 1024 threads x 32 values
    assert holds(65539) == {"smem", "reread", "bulk"}       # too long for one block's registers ...
    assert holds(65539, split=2) == {"regs", "smem", "reread"}   # ... not for two blocks' (bulk: whole rows)
    assert holds(262144) == {"reread"}                      # too long for shared memory
    assert holds(262144, split=8) == {"regs", "reread"}     # an eighth of it: 4 vectors a thread
    assert holds(131072, "float32") == {"reread"}
    assert holds(1) == {"regs", "smem", "reread"}           # bulk: 16-byte vectors
    assert holds(8192, "float32") == set(HOLDS)
    assert "bulk" not in holds(8192, target=Target.h200(cc=(8, 0)))   # the bulk-copy unit is sm_90's
    assert holds(1, split=2) == set()                       # a split needs a vector a thread in every block
    sm80 = Target.h200(cc=(8, 0))
    assert {c["SPLIT"] for c in SPECS["softmax"].space(rownorm_problem("softmax", 8, 262144, "bfloat16"),
                                                       sm80).configs()} == {1}          # clusters: sm_90


def test_short_rows_take_a_few_threads_and_several_rows_a_block(target):
    problem = rownorm_problem("softmax", 65536, 64, "bfloat16")
    configs = SPECS["softmax"].space(problem, target).configs()
    assert max(c["TPR"] for c in configs if c["VEC"] == 8) == 8              # 8 vectors of 8
    assert max(c["TPR"] for c in configs) == 64                               # 64 elements one by one
    assert all(c["BLOCK"] // c["TPR"] >= 4 for c in configs if c["VEC"] == 8)
    tiny = SPECS["softmax"].space(rownorm_problem("softmax", 1, 1, "float32"), target).configs()
    assert {(c["TPR"], c["VEC"], c["BLOCK"]) for c in tiny} == {(1, 1, 32)}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_default_config_is_valid_and_uses_wide_vectors(target, family, cols, dtype):
    spec = SPECS[family]
    for rows in (1, 7, 1000, 65536):
        problem = rownorm_problem(family, rows, cols, dtype)
        config = spec.default_config(problem, target)
        assert spec.space(problem, target).is_valid(config.as_dict()), (problem.key, config.name)
        if cols >= 64:
            assert config["VEC"] * element(dtype).size == 16, config.name
        if config["HOLD"] == "regs":                          # held only where every thread has work
            assert config["TPR"] * (config["ITEMS"] - 1) * config["VEC"] < cols


def test_default_rule_picks(target):
    def pick(rows, cols, dtype="bfloat16", family="softmax", target=target):
        return SPECS[family].default_config(rownorm_problem(family, rows, cols, dtype), target).name

    assert pick(32768, 8192) == "softmax_regs_t256_b256_v8_i4"           # 64 bytes a thread, held
    assert pick(32768, 8192, family="rmsnorm") == "rmsnorm_regs_t256_b256_v8_i4"
    assert pick(8192, 8192, "float32") == "softmax_regs_t512_b512_v4_i4"
    assert pick(4096, 32768) == "softmax_regs_t1024_b1024_v8_i4"
    assert pick(65536, 128) == "softmax_regs_t4_b256_v8_i4"                # several rows a block
    assert pick(1000, 1000) == "softmax_regs_t128_b256_v8_i1"              # more threads: too few rows
    assert pick(4096, 50257) == "softmax_bulk_t512_b512_v8_i4"             # two rows fit an SM, two blocks its registers
    assert pick(200, 50257) == "softmax_bulk_t1024_b1024_v8_i4"            # too few rows for two blocks an SM
    assert pick(1024, 100000) == "softmax_bulk_t1024_b1024_v8_i4"          # one row fits a block's shared memory
    assert pick(4096, 50257, target=Target.h200(cc=(8, 0))) == "softmax_smem_t512_b512_v8_i2"   # no bulk copies
    assert pick(8, 262144) == "softmax_regs_t1024_b1024_v8_i4_s8"          # a row over a cluster of 8 blocks
    assert pick(16, 152064, family="rmsnorm") == "rmsnorm_regs_t1024_b1024_v8_i3_s8"
    assert pick(8, 4194304, "float32") == "softmax_reread_t1024_b1024_v4_i2_s8"   # too long for 8 blocks' registers
    assert pick(100, 262144) == "softmax_reread_t1024_b1024_v8_i2"         # 100 rows fill most SMs: no split
    assert pick(1000, 262144) == "softmax_reread_t1024_b1024_v8_i2"        # read twice: 1024 threads however many rows
    assert pick(7, 7, "float16") == "softmax_regs_t8_b64_v1_i1"


def test_the_bulk_barriers_fit_every_piece_and_agree_with_the_template():
    """The bytes before a bulk-copied row's slot hold one 8-byte mbarrier for each of the most
    pieces a config may ask for, and the kernel reserves the same bytes."""
    import re
    from pathlib import Path

    from kgen.kernels.memory.rownorm import BULK_BAR_BYTES

    kernel = (Path(__file__).resolve().parent.parent / "templates" / "memory" / "row_kernel.cuh").read_text()
    assert int(re.search(r"#define KGEN_BULK_BAR_BYTES (\d+)", kernel)[1]) == BULK_BAR_BYTES
    target = Target.h200(nvrtc="")
    problem = rownorm_problem("softmax", 300, 50257, "bfloat16")
    pieces = {c["ITEMS"] for c in SPECS["softmax"].space(problem, target).configs() if c["HOLD"] == "bulk"}
    assert pieces and 8 * max(pieces) <= BULK_BAR_BYTES


def test_a_row_copied_by_the_threads_needs_no_barrier_bytes():
    """Two rows the threads copy into shared memory fit an SM by their bytes and the reduction's
    alone (the bulk copy's mbarriers are not theirs): at the edge, the row is held, not reread."""
    from kgen.kernels.memory.rownorm import BULK_BAR_BYTES

    sm80 = Target.h200(cc=(8, 0))
    spec = SPECS["softmax"]
    scratch = spec._scratch_bytes({"BLOCK": 1024, "TPR": 1024})
    cols = (sm80.smem_per_sm // 2 - scratch) // 2 // 8 * 8          # bf16: two such rows fill the SM
    assert 2 * (row_bytes(cols, "bfloat16") + scratch) <= sm80.smem_per_sm
    assert 2 * (row_bytes(cols, "bfloat16") + scratch + BULK_BAR_BYTES) > sm80.smem_per_sm
    chosen = spec.default_config(rownorm_problem("softmax", 4096, cols, "bfloat16"), sm80).as_dict()
    assert (chosen["HOLD"], chosen["TPR"]) == ("smem", 512)


@pytest.mark.parametrize("family", FAMILIES)
def test_model_picks_start_with_the_default(target, family):
    spec = SPECS[family]
    problem = rownorm_problem(family, 4096, 8192, "bfloat16")
    picks = spec.model_picks(problem, target, 8)
    space = spec.space(problem, target)
    assert picks[0] == spec.default_config(problem, target) and len(picks) == 8 == len(set(picks))
    assert all(space.is_valid(c.as_dict()) for c in picks)
    assert {c["HOLD"] for c in picks} == set(HOLDS)


# ---------------------------------------------------------------- rendering, launch, arguments

def _config(family, problem, target, **values):
    return SPECS[family].space(problem, target).config(**values)


@pytest.mark.parametrize("family", FAMILIES)
def test_render_is_independent_of_the_sizes(target, family):
    a, b = rownorm_problem(family, 7, 4097, "float32"), rownorm_problem(family, 9000, 5000, "float32")
    values = dict(HOLD="reread", VEC=4, TPR=256, BLOCK=256, ITEMS=2)
    spec = SPECS[family]
    sa = render(spec, a, _config(family, a, target, **values), target)
    sb = render(spec, b, _config(family, b, target, **values), target)
    assert sa.code == sb.code and sa.digest == sb.digest           # one cubin serves every size
    assert sa.entry == f"{family}_reread_t256_b256_v4_i2"


def test_render_of_each_family_and_hold(target):
    problem = rownorm_problem("softmax", 64, 8192, "bfloat16")
    codes = {}
    for hold, items in (("regs", 4), ("smem", 2), ("reread", 2)):
        codes[hold] = render(SPECS["softmax"], problem, _config("softmax", problem, target, HOLD=hold, VEC=8,
                                                                TPR=256, BLOCK=256, ITEMS=items), target).code
    for hold, code in codes.items():
        assert f"KGEN_HOLD_{hold.upper()}, 1>" in code and "__cluster_dims__" not in code and "KgenSoftmax" in code and "kgen_bf16_to_float" in code
        assert "__launch_bounds__(256, 1)" in code and "float eps" not in code
    assert "extern __shared__" in codes["smem"] and "extern __shared__" not in codes["regs"]
    rms = rownorm_problem("rmsnorm", 64, 8192, "float16")
    code = render(SPECS["rmsnorm"], rms, _config("rmsnorm", rms, target, HOLD="regs", VEC=8, TPR=256, BLOCK=256,
                                                 ITEMS=4), target).code
    assert "KgenRmsnorm" in code and "float eps" in code and "const unsigned short* __restrict__ w" in code
    assert "kgen_float_to_half" in code and "KgenSoftmax" not in code


@pytest.mark.parametrize("family", FAMILIES)
def test_launch_geometry(target, family):
    spec = SPECS[family]
    problem = rownorm_problem(family, 1001, 100, "float32")
    config = _config(family, problem, target, HOLD="regs", VEC=4, TPR=8, BLOCK=256, ITEMS=4)
    geo = spec.launch(problem, config)
    assert geo.grid == (math.ceil(1001 / 32), 1, 1) and geo.block == (256, 1, 1) and geo.shared_mem == 0
    wide = rownorm_problem(family, 5, 50257, "bfloat16")
    config = _config(family, wide, target, HOLD="smem", VEC=8, TPR=512, BLOCK=1024, ITEMS=2)
    geo = spec.launch(wide, config)
    assert geo.grid == (3, 1, 1) and geo.shared_mem == 2 * row_bytes(50257, "bfloat16") == 2 * 100528
    long = rownorm_problem(family, 5, 262144, "bfloat16")
    config = _config(family, long, target, HOLD="regs", VEC=8, TPR=1024, BLOCK=1024, ITEMS=4, SPLIT=8)
    assert spec.launch(long, config).grid == (5 * 8, 1, 1)                 # a cluster of 8 blocks a row
    assert spec.space(long, target).full_values(config.as_dict())["SCRATCH"] == 1024 // 32 + 8 + 1                          # the reduction's slots, then the blocks'
    code = render(spec, long, config, target).code
    assert "__cluster_dims__(8, 1, 1)" in code and "KGEN_HOLD_REGS, 8>" in code


def test_arguments_and_the_exported_launch(target):
    from kgen.export import launch_recipe

    problem = rownorm_problem("rmsnorm", 3, 4097, "bfloat16")
    config = SPECS["rmsnorm"].default_config(problem, target)
    ops = {"x": "X", "weight": "W", "out": "Y", "eps": 1e-5}
    args = SPECS["rmsnorm"].args(problem, config, ops)
    assert args[:3] == ["X", "W", "Y"]
    assert isinstance(args[3], np.int64) and args[3] == 3 and isinstance(args[4], np.int32) and args[4] == 4097
    assert isinstance(args[5], np.float32) and args[5] == np.float32(1e-5)
    recipe = launch_recipe(SPECS["rmsnorm"], problem, config)
    assert recipe["args"] == [{"pointer": "x"}, {"pointer": "weight"}, {"pointer": "out"},
                              {"type": "int64", "value": 3}, {"type": "int32", "value": 4097},
                              {"scalar": "eps", "type": "float32"}]
    soft = rownorm_problem("softmax", 3, 4097, "bfloat16")
    recipe = launch_recipe(SPECS["softmax"], soft, SPECS["softmax"].default_config(soft, target))
    assert [a.get("pointer") for a in recipe["args"][:2]] == ["x", "out"] and len(recipe["args"]) == 4


# ---------------------------------------------------------------- compiling for sm_90

COMPILE_PROBLEMS = [(4096, 8192), (7, 4097), (3, 1000), (1000, 64), (2, 65539), (5, 7)]
PER_PROBLEM = 2


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, target):
    """Per family: PER_PROBLEM sampled configs of each dtype x problem (36), plus a config of
    each hold on the 8192-wide rows, compiled through one pool of 2."""
    def jobs():
        for family, spec in SPECS.items():
            for seed, dtype in enumerate(DTYPES):
                for rows, cols in COMPILE_PROBLEMS:
                    problem = rownorm_problem(family, rows, cols, dtype)
                    space = spec.space(problem, target)
                    for config in space.sample(PER_PROBLEM, seed=seed * 1000 + cols):
                        yield family, problem, config, render(spec, problem, config, target, space)
                problem = rownorm_problem(family, 4096, 8192, dtype)
                space = spec.space(problem, target)
                by_hold = {}
                for config in space.sample(60, seed=seed):
                    by_hold.setdefault(config["HOLD"], config)
                for config in by_hold.values():
                    yield family, problem, config, render(spec, problem, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "rownorm")


@pytest.mark.parametrize("family", FAMILIES)
def test_sampled_configs_compile_for_sm90_without_spills(compiled, family):
    rows = compiled[family]
    assert len(rows) >= 30
    failed = compile_failures(rows, 400)
    assert not failed, failed
    assert {c["HOLD"] for _, c, _, _ in rows} == set(HOLDS)
    for problem, config, source, result in rows:
        b = result.binary
        assert b.entry == config.name and b.arch == "sm_90" and b.cubin[:4] == b"\x7fELF"
        res = b.resources
        assert res["registers"] <= 65536 // config["BLOCK"], (config.name, res)
        assert res.get("spill_stores", 0) == 0 and res.get("stack", 0) == 0, (problem.key, config.name, res)


def _binary(family, target, problem, **values):
    from kgen.compile import compile_source

    result = compile_source(render(SPECS[family], problem, _config(family, problem, target, **values), target))
    assert result.failure is None, result.failure
    return result.binary


@pytest.mark.parametrize("family", FAMILIES)
def test_held_configs_at_the_register_budget_do_not_spill(target, family):
    """The largest held configs the budget allows, at 1024 and 512 threads a block."""
    for dtype, cols, tpr in (("bfloat16", 32768, 1024), ("float32", 32768, 1024), ("bfloat16", 32768, 512),
                             ("float32", 16384, 256)):
        problem = rownorm_problem(family, 64, cols, dtype)
        vec = 16 // element(dtype).size
        items = next(i for i in HELD_ITEMS if i * tpr >= cols // vec)
        binary = _binary(family, target, problem, HOLD="regs", VEC=vec, TPR=tpr, BLOCK=tpr, ITEMS=items)
        res = binary.resources
        assert res.get("spill_stores", 0) == 0 and res.get("stack", 0) == 0, (dtype, cols, tpr, res)


@pytest.mark.parametrize("family", FAMILIES)
def test_sass_has_128_bit_loads_and_stores_and_the_ops_instructions(target, family):
    problem = rownorm_problem(family, 4096, 8192, "bfloat16")
    sass = sass_or_skip(_binary(family, target, problem, HOLD="regs", VEC=8, TPR=256, BLOCK=256, ITEMS=4).cubin)
    assert re.search(r"LDG\.E\.128", sass) and re.search(r"STG\.E\.128", sass)
    assert "SHFL.BFLY" in sass and "BAR.SYNC" in sass
    assert ("MUFU.EX2" in sass) == (family == "softmax")
    assert ("MUFU.RSQ" in sass) == (family == "rmsnorm")
    short = rownorm_problem(family, 65536, 128, "float32")
    sass = sass_or_skip(_binary(family, target, short, HOLD="regs", VEC=4, TPR=8, BLOCK=256, ITEMS=4).cubin)
    assert re.search(r"LDG\.E\.128", sass) and "BAR.SYNC" not in sass         # a row in a warp: shuffles only

    long = rownorm_problem(family, 4096, 50257, "bfloat16")
    sass = sass_or_skip(_binary(family, target, long, HOLD="bulk", VEC=8, TPR=512, BLOCK=512, ITEMS=4).cubin)
    assert "UBLKCP" in sass and "SYNCS.PHASECHK" in sass          # the bulk copy and the waits on its pieces
    assert re.search(r"LDS\.128", sass) and re.search(r"STG\.E\.128", sass)
    assert ("LDG.E.128" in sass) == (family == "rmsnorm")             # the threads load weights, never the row
    resources = _binary(family, target, long, HOLD="bulk", VEC=8, TPR=512, BLOCK=512, ITEMS=8).resources
    assert resources.get("spill_stores", 0) == 0 and resources["registers"] <= 64   # pieces cost no registers

# ---------------------------------------------------------------- the float64 references

def test_softmax_reference_special_values():
    inf, nan = np.inf, np.nan
    x = np.array([[1.0, 2.0, -inf, 3.0], [-inf] * 4, [1.0, inf, 0.0, 2.0], [1.0, nan, 2.0, 3.0],
                  [1e4, -1e4, 1e4, 0.0]])
    y = softmax_reference(x)
    e = np.exp(np.array([1.0, 2.0, 3.0]) - 3.0)
    assert np.allclose(y[0], [e[0] / e.sum(), e[1] / e.sum(), 0.0, e[2] / e.sum()])
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all() and np.isnan(y[3]).all()
    assert np.allclose(y[4], [0.5, 0.0, 0.5, 0.0])


def test_rmsnorm_reference():
    x = np.array([[3.0, 4.0], [np.nan, 1.0], [np.inf, 1.0]])
    y = rmsnorm_reference(x, np.array([1.0, 2.0]), 0.0)
    r = 1 / math.sqrt(12.5)
    assert np.allclose(y[0], [3 * r, 8 * r]) and np.isnan(y[1]).all()
    assert np.isnan(y[2, 0]) and y[2, 1] == 0.0


# ---------------------------------------------------------------- the user functions' checks

def test_softmax_checks_before_any_launch():
    import kgen

    with pytest.raises(LayoutError) as info:
        kgen.softmax(FakeArray((8, 8)), axis=0)
    assert "last" in info.value.remedy or "permute" in info.value.remedy
    with pytest.raises(LayoutError):
        kgen.softmax(FakeArray((4, 8, 8)), axis=-2)
    with pytest.raises(InputError):
        kgen.softmax(FakeArray((8, 8)), axis=2)
    with pytest.raises(InputError):
        kgen.softmax(FakeArray((8, 8)), axis=1.0)
    with pytest.raises(LayoutError):
        kgen.softmax(FakeArray((8, 8)).T)                       # strided
    with pytest.raises(DtypeError):
        kgen.softmax(FakeArray((8, 8), "float64"))
    with pytest.raises(ShapeError):
        kgen.softmax(FakeArray((4, 8)), out=FakeArray((8, 4)))
    with pytest.raises(DtypeError):
        kgen.softmax(FakeArray((4, 8)), out=FakeArray((4, 8), "float16"))
    with pytest.raises(DtypeError):
        kgen.softmax(FakeArray((4, 8), "uint16"))               # bfloat16 bits need dtype="bfloat16"


def test_rmsnorm_checks_before_any_launch():
    import kgen

    x = FakeArray((4, 8), "float16")
    with pytest.raises(ShapeError):
        kgen.rmsnorm(x, FakeArray((4,), "float16"))
    with pytest.raises(ShapeError):
        kgen.rmsnorm(x, FakeArray((2, 4), "float16"))
    with pytest.raises(DtypeError):
        kgen.rmsnorm(x, FakeArray((8,), "float32"))
    for eps in (-1.0, float("nan"), float("inf"), "1e-6", True):
        with pytest.raises(InputError):
            kgen.rmsnorm(x, FakeArray((8,), "float16"), eps)
    with pytest.raises(ShapeError):
        kgen.rmsnorm(x, FakeArray((8,), "float16"), out=FakeArray((4, 9), "float16"))
    with pytest.raises(InputError):
        kgen.rmsnorm(x, FakeArray((8,), "float16", device=1))
