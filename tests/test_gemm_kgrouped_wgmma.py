"""K-grouped GEMM on wgmma with no GPU: what it runs (16-bit, TMA-readable rows, at most
MAX_GROUPS groups), the route of ``kgen.gemm_kgrouped``, its space (gemm_wgmma's for the average
group's rows, without split-K, the groups' table counted in shared memory), the launch bound,
rendering (the table, each unit's k-blocks from its group's first row, the last block's steps
and rows past the group skipped and zeroed, C by group), the arguments (the ends in the bias
slot; A and B a batch of one, C the groups' matrices) and the exported recipe, and sampled
configs compiled for sm_90a with HGMMA in their SASS and no spills."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kgen.errors import DtypeError
from kgen.export_runtime import replay
from kgen.fields import parse_args
from kgen.kernels.gemm.kgrouped import kgrouped_problem, route
from kgen.kernels.gemm.grouped_wgmma import MAX_GROUPS, TABLE_BYTES
from kgen.kernels.gemm.kgrouped_wgmma import GemmKGroupedWgmma
from kgen.kernels.gemm.wgmma_geometry import smem_bytes
from kgen.problem import Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, hopper_sass_faults, per_case
from fakes import BASE, differing_arguments

SPEC = GemmKGroupedWgmma()
FAMILY = "gemm_kgrouped_wgmma"


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def _problem(*args, **kw):
    return kgrouped_problem(*args, family=FAMILY, **kw)


def test_registered_what_it_runs_and_the_route(target):
    assert isinstance(get_spec(FAMILY), GemmKGroupedWgmma)
    assert SPEC.supports(_problem(64, 2048, 1408, 8192, "bfloat16"), target)
    assert not SPEC.supports(_problem(4, 96, 96, 128, "float32"), target)                 # tf32: mma.sync's
    assert not SPEC.supports(_problem(MAX_GROUPS + 1, 64, 64, 8192), target)             # the table's bound
    assert not SPEC.supports(_problem(3, 36, 40, 100, "bfloat16"), target)              # rows of 36 halves
    families = lambda p: [s.family for s, _ in route(target, p)]      # noqa: E731
    assert families(kgrouped_problem(64, 2048, 1408, 8192, "bfloat16")) == [FAMILY, "gemm_kgrouped"]
    assert families(kgrouped_problem(3, 36, 40, 100, "float16")) == ["gemm_kgrouped"]
    assert families(kgrouped_problem(3, 64, 64, 100, "float32")) == ["gemm_kgrouped"]


def test_request_from_command_line_fields(target):
    values = parse_args(SPEC.fields(), ["--groups", "64", "--m", "2048", "--n", "1408", "--k", "8192",
                                        "--dtype", "float16"], FAMILY)
    spec, problem = SPEC.request(target, **values)
    assert spec is SPEC and problem == _problem(64, 2048, 1408, 8192, "float16")
    assert SPEC.record_problem(problem.replace(k=5000)) == problem.replace(k=6144)   # the bucket of 5000
    with pytest.raises(DtypeError, match="gemm_kgrouped"):
        SPEC.request(target, **parse_args(SPEC.fields(), ["--groups", "2", "--m", "8", "--n", "8", "--k", "8",
                                                          "--dtype", "float32", "--precision", "tf32"], FAMILY))


def test_space_for_the_average_group_with_the_table_counted(target):
    p = _problem(1000, 256, 256, 64000)
    space = SPEC.space(p, target)
    choices = {q.name: q.choices for q in space.params}
    assert choices["SPLITK"] == (1,) and choices["TMA_STORE"] == (0, 1)
    configs = space.sample(40, seed=4)
    assert configs and all(c.name.startswith(FAMILY + "_bf16_tn_") for c in configs)
    assert all(smem_bytes(c["BM"], c["BN"], c["STAGES"], c["CONSUMERS"], c["TMA_STORE"]) + TABLE_BYTES * 1000
               <= target.smem_per_block_optin for c in configs)
    values = dict(BM=128, BN=256, BK=64, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0)
    need = smem_bytes(128, 256, 4, 2)
    assert SPEC.space(p, dataclasses.replace(target, smem_per_block_optin=need + TABLE_BYTES * 1000)).is_valid(values)
    assert not SPEC.space(p, dataclasses.replace(target, smem_per_block_optin=need + TABLE_BYTES * 999)).is_valid(values)


def test_picks_count_every_groups_tiles_and_the_launch_bounds_the_units(target):
    few = SPEC.default_config(_problem(2, 256, 256, 8192), target)
    many = SPEC.default_config(_problem(256, 2048, 1408, 65536), target)
    assert many["BM"] * many["BN"] > few["BM"] * few["BN"]
    p = _problem(3, 128, 192, 600, "float16")          # fewer units than SMs
    for config in SPEC.space(p, target).sample(10, seed=2):
        cluster = config.get("CLUSTER", 1)
        units = 3 * -(-(-(-128 // config["BM"])) // cluster) * -(-192 // config["BN"])
        assert SPEC.launch(p, config).grid == (cluster * min(units, 132 // cluster), 1, 1), config.name


def test_render_reads_each_groups_rows_and_zeroes_past_them(target):
    p = _problem(12, 512, 256, 5000, "bfloat16")
    code = render(SPEC, p, SPEC.default_config(p, target), target).code
    assert "constexpr int KGROUPS = 12;" in code and "constexpr int BATCH = 12;" in code
    assert "group_table<KGROUPS, 1>(reinterpret_cast<const int*>(bias), K, 0, group_rows, group_units);" in code
    assert "const int k0 = kb * BK + k_first;" in code and "kb1 = (group_rows[batch] - k_first + BK - 1) / BK;" in code
    assert "zero_k_rows(a_st, b_st, row_off / 64, k_left" in code and "if (kk * KSTEP >= k_left) break;" in code
    assert "constexpr int BATCH_A = 0, BATCH_B = 0;" in code     # A and B: one matrix, read at batch 0
    assert "5000" not in code and "512 * 256" not in code     # T is an argument; C's stride a constant
    assert "BATCH_STRIDE_C = 131072;" in code
    # a plain GEMM's source has none of it
    from kgen.kernels.gemm.wgmma import GemmWgmma

    plain = GemmWgmma().problem(512, 256, 5000, "bfloat16", "TN")
    assert "zero_k_rows" not in render(GemmWgmma(), plain, GemmWgmma().default_config(plain, target), target).code


def test_arguments_map_every_row_and_each_groups_output(target, fake_tma_maps):
    groups, m, n, k = 6, 128, 192, 700
    p = _problem(groups, m, n, k, "bfloat16")
    config = next(c for c in SPEC.space(p, target).configs() if c["TMA_STORE"])
    pa, pb, pc, pends = BASE, BASE + (1 << 22), BASE + (1 << 23), BASE + (1 << 24)
    args = SPEC.args(p, config, {"a": pa, "b": pb, "c": pc, "ends": pends})
    maps = {call["ptr"]: call for call in fake_tma_maps}
    assert maps[pa]["dims"] == (m, k, 1) and maps[pa]["stride"] == 2 * m and maps[pa]["batch_stride"] == 0
    assert maps[pb]["dims"] == (n, k, 1) and maps[pb]["stride"] == 2 * n and maps[pb]["batch_stride"] == 0
    assert maps[pc]["dims"] == (n, m, groups) and maps[pc]["batch_stride"] == 2 * m * n
    assert [int(x) for x in args[3:5]] == [pa, pb] and int(args[7]) == pc and int(args[8]) == pends
    assert [int(x) for x in args[9:13]] == [m, n, k, n] and int(args[15]) == 1


def test_exported_recipe_rebuilds_the_same_arguments(target, fake_tma_maps):
    p = _problem(16, 512, 1024, 4096, "bfloat16")
    config = SPEC.default_config(p, target)
    pointers = {"a": BASE, "b": BASE + (1 << 26), "c": BASE + (1 << 30), "ends": BASE + (1 << 31)}
    want = SPEC.args(p, config, pointers)
    recipe = json.loads(json.dumps(SPEC.arg_recipe(p, config)))
    assert {"pointer": "ends"} in recipe
    got = replay.arguments(recipe, {name: (ptr, 0) for name, ptr in pointers.items()}, {})
    assert differing_arguments(got, want) == []


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()

    def jobs():
        for dtype in ("bfloat16", "float16"):
            for i, (groups, m, n, k) in enumerate(((8, 1024, 768, 4000), (64, 128, 192, 9000), (1000, 64, 64, 61))):
                p = _problem(groups, m, n, k, dtype, "float32" if i == 1 else None)
                space = SPEC.space(p, target)
                for config in space.sample(per_case(8, 17), seed=i):
                    yield dtype, p, config, render(SPEC, p, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), FAMILY)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sampled_configs_compile_with_hgmma(compiled, dtype):
    rows = compiled[dtype]
    assert len(rows) >= 20 and compile_failures(rows) == []
    assert hopper_sass_faults(rows, ("UTMALDG.3D",)) == []
