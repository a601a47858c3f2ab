"""Grouped GEMM on wgmma with no GPU: what it runs (16-bit, TMA-readable, at most MAX_GROUPS
groups), the route of ``kgen.gemm_grouped``, its space (gemm_wgmma's for the average group,
without split-K, the groups' table counted in shared memory), the launch bound, rendering (the
table and the lookup, A by a 2-D map, B by a 3-D one, TMA stores only of bands inside a group),
the arguments (the ends in the bias slot) and the exported recipe, and sampled configs compiled for sm_90a with HGMMA in
their SASS and no spills."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kgen.export_runtime import replay
from kgen.kernels.gemm.grouped import grouped_problem, route, row_tile_bound
from kgen.kernels.gemm.grouped_wgmma import MAX_GROUPS, TABLE_BYTES, GemmGroupedWgmma
from kgen.kernels.gemm.wgmma import GemmWgmma
from kgen.kernels.gemm.wgmma_geometry import smem_bytes
from kgen.problem import Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, hopper_sass_faults, per_case
from fakes import BASE, differing_arguments

SPEC = GemmGroupedWgmma()
FAMILY = "gemm_grouped_wgmma"


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def _problem(*args, **kw):
    return grouped_problem(*args, family=FAMILY, **kw)


def test_registered_what_it_runs_and_the_route(target):
    assert isinstance(get_spec(FAMILY), GemmGroupedWgmma)
    assert SPEC.supports(_problem(64, 8192, 1408, 2048, "bfloat16", "NT"), target)
    assert not SPEC.supports(_problem(4, 96, 96, 128, "float32", "NN"), target)            # tf32: mma.sync's
    assert not SPEC.supports(_problem(MAX_GROUPS + 1, 8192, 64, 64), target)              # the table's bound
    assert not SPEC.supports(_problem(3, 7, 33, 17, "bfloat16", "NN", align_a=1, align_b=1), target)
    families = lambda p: [s.family for s, _ in route(target, p)]      # noqa: E731
    assert families(grouped_problem(64, 8192, 1408, 2048, "bfloat16", "NT")) == [FAMILY, "gemm_grouped"]
    assert families(grouped_problem(3, 7, 33, 17, "bfloat16", "NN")) == ["gemm_grouped"]      # rows of 33 halves


def test_space_for_the_average_group_with_the_table_counted(target):
    p = _problem(1000, 8000, 256, 256)
    space = SPEC.space(p, target)
    choices = {q.name: q.choices for q in space.params}
    assert choices["SPLITK"] == (1,) and choices["TMA_STORE"] == (0, 1)
    configs = space.sample(40, seed=4)
    assert configs and all(c.name.startswith(FAMILY + "_bf16_nn_") for c in configs)
    assert all(smem_bytes(c["BM"], c["BN"], c["STAGES"], c["CONSUMERS"]) + TABLE_BYTES * 1000
               <= target.smem_per_block_optin for c in configs)
    # on a device with room for the largest tile's rings but not for the table too, that tile is out
    values = dict(BM=64, BN=256, BK=64, STAGES=4, CONSUMERS=1, GM=1, PINGPONG=0)     # groups of 8 rows
    need = smem_bytes(64, 256, 4, 1)
    assert GemmWgmma().space(SPEC.average_group(p, "gemm_wgmma"), target).is_valid(values)
    assert SPEC.space(p, dataclasses.replace(target, smem_per_block_optin=need + TABLE_BYTES * 1000)).is_valid(values)
    assert not SPEC.space(p, dataclasses.replace(target, smem_per_block_optin=need + TABLE_BYTES * 999)).is_valid(values)


def test_picks_count_every_groups_tiles_and_the_launch_bounds_the_units(target):
    few = SPEC.default_config(_problem(2, 512, 1024, 1024), target)
    many = SPEC.default_config(_problem(256, 512 * 256, 1024, 1024), target)
    assert many["BM"] * many["BN"] >= few["BM"] * few["BN"]
    p = _problem(64, 300, 64, 200, "float16", "NT")          # fewer units than SMs
    for config in SPEC.space(p, target).sample(10, seed=2):
        cluster = config.get("CLUSTER", 1)
        units = row_tile_bound(p, config["BM"] * cluster) * -(-64 // config["BN"])
        assert SPEC.launch(p, config).grid == (cluster * min(units, 132 // cluster), 1, 1), config.name


def test_render_builds_the_table_and_loads_b_by_group(target):
    p = _problem(12, 5000, 136, 72, "bfloat16", "NN", epilogue="relu")
    code = render(SPEC, p, SPEC.default_config(p, target), target).code
    assert "constexpr int GROUPS = 12;" in code and "__shared__ int group_rows[GROUPS], group_units[GROUPS];" in code
    assert "group_table<GROUPS, BM * CLUSTER>(reinterpret_cast<const int*>(bias), M" in code
    assert "tma_load_2d(a_dst, &tmap_a, full, k0, m0);" in code and ", k0, batch);" in code
    assert "const int M = group_end;" in code and "5000" not in code          # T is an argument, never compiled in
    assert "if (c_by_tma && band + STORE_ROWS <= M) {" in code and "if (band >= M) continue;" not in code


@pytest.mark.parametrize("layout", ["NN", "NT"])
def test_arguments_map_every_row_of_a_and_each_groups_b(target, fake_tma_maps, layout):
    groups, m, n, k = 6, 500, 72, 40
    p = _problem(groups, m, n, k, "bfloat16", layout)
    config = SPEC.default_config(p, target)
    pa, pb, pc, pends = BASE, BASE + (1 << 22), BASE + (1 << 23), BASE + (1 << 24)
    args = SPEC.args(p, config, {"a": pa, "b": pb, "c": pc, "ends": pends})
    maps = {call["ptr"]: call for call in fake_tma_maps}
    assert maps[pa]["dims"] == (k, m) and maps[pa]["stride"] == 2 * k and maps[pa]["batch_stride"] == 0
    assert maps[pb]["dims"] == ((n, k) if layout[1] == "N" else (k, n)) + (groups,)
    assert maps[pb]["batch_stride"] == 2 * k * n
    assert config["TMA_STORE"] == 1 and maps[pc]["dims"] == (n, m) and maps[pc]["batch_stride"] == 0   # C: all T rows
    assert [int(x) for x in args[3:5]] == [pa, pb] and int(args[7]) == pc and int(args[8]) == pends
    assert [int(x) for x in args[9:13]] == [m, n, k, n] and int(args[15]) == 1


def test_exported_recipe_rebuilds_the_same_arguments(target, fake_tma_maps):
    p = _problem(16, 512, 4096, 4096, "bfloat16", "NT")
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
            for i, (groups, layout) in enumerate(((8, "NN"), (64, "NT"), (1000, "NT"))):
                p = _problem(groups, 8000, 136, 72, dtype, layout, epilogue=("none", "relu", "gelu")[i])
                space = SPEC.space(p, target)
                for config in space.sample(per_case(8, 17), seed=i):
                    yield dtype, p, config, render(SPEC, p, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), FAMILY)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sampled_configs_compile_with_hgmma(compiled, dtype):
    rows = compiled[dtype]
    assert len(rows) >= 24 and compile_failures(rows) == []
    assert hopper_sass_faults(rows, ("UTMALDG.3D",)) == []


def test_request_from_command_line_fields(target):
    from kgen.fields import parse_args

    values = parse_args(SPEC.fields(), ["--groups", "64", "--m", "8192", "--n", "1408", "--k", "2048", "--layout",
                                        "nt", "--dtype", "float16", "--epilogue", "relu"], FAMILY)
    spec, problem = SPEC.request(target, **values)
    assert spec is SPEC and problem == _problem(64, 8192, 1408, 2048, "float16", "NT", epilogue="relu")
