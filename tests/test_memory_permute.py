"""The permute family with no GPU: canonical permutations (against NumPy), problems from fields
and keys, spaces and their defaults, rendering, sampled configs compiled for sm_90 with their
vector widths and shared-memory padding read from the SASS, export's replay, and
``kgen.permute`` through a fake dispatcher."""

from __future__ import annotations

import contextlib
import itertools
from concurrent.futures import ThreadPoolExecutor
import json
import math
import random
import re

import numpy as np
import pytest
from typer.testing import CliRunner

import kgen
from kgen.cli import app
from kgen.db.validity import Validator
from kgen.errors import DtypeError, InputError, LayoutError, ShapeError
from kgen.export import launch_recipe
from kgen.fields import parse_args
from kgen.kernels.memory.permutation import MAX_RANK, canonical, check_axes, padded, plan
from kgen.kernels.memory.permute import Permute, permute_problem, problem_plan
from kgen.problem import Problem, Target
from kgen.render import render

from compiling import compile_cases, compile_failures, compiled_rows, sass_or_skip
from fakes import BASE, FakeArray, fake_dispatch
from host_cuda import build, compiler

SPEC = Permute()
T = Target.h200()
SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


# ---------------------------------------------------------------- canonical form

def _moves_the_same(shape, axes, cshape, caxes) -> bool:
    x = np.arange(math.prod(shape)).reshape(shape)
    return np.array_equal(x.transpose(axes).ravel(), x.reshape(cshape).transpose(caxes).ravel())


def _is_minimal(shape, axes) -> bool:
    """No size-1 dimension, and no two output neighbours that are input neighbours in order."""
    if shape == (1,):
        return axes == (0,)
    return 1 not in shape and all(axes[i + 1] != axes[i] + 1 for i in range(len(axes) - 1))


@pytest.mark.parametrize("shape,axes,want", [
    ((64, 256, 56, 56), (0, 2, 3, 1), ((64, 256, 3136), (0, 2, 1))),      # NCHW -> NHWC
    ((64, 56, 56, 256), (0, 3, 1, 2), ((64, 3136, 256), (0, 2, 1))),      # NHWC -> NCHW
    ((16384, 16384), (1, 0), ((16384, 16384), (1, 0))),
    ((4, 5, 6), (0, 1, 2), ((120,), (0,))),                               # identity: a copy
    ((3, 1, 5), (1, 0, 2), ((15,), (0,))),                                # only a size-1 dim moves
    ((1, 1), (1, 0), ((1,), (0,))),
    ((), (), ((1,), (0,))),
    ((2, 3, 4, 5), (2, 3, 0, 1), ((6, 20), (1, 0))),                      # two merged pairs swap
    ((2, 3, 4, 5), (1, 0, 2, 3), ((2, 3, 20), (1, 0, 2))),                # rows move whole
    ((2, 3, 4, 5), (3, 2, 1, 0), ((2, 3, 4, 5), (3, 2, 1, 0))),
    ((7, 1, 9, 1, 11), (4, 2, 0, 3, 1), ((7, 9, 11), (2, 1, 0))),
    ((2, 3, 4), (-1, 0, 1), ((6, 4), (1, 0))),                            # negative axes count from the end
])
def test_canonical_forms_of_known_permutations(shape, axes, want):
    assert canonical(shape, axes) == want
    axes = check_axes(axes, len(shape))
    if math.prod(shape) > 1 << 16:      # the same structure (which sizes are 1) on a few elements, not GiBs
        small = tuple(min(size, 3) for size in shape)
        small_want = canonical(small, axes)
        assert small_want[1] == want[1]            # the same canonical permutation
        shape, want = small, small_want
    assert _moves_the_same(shape, axes, *want)


def test_every_permutation_of_random_shapes_canonicalises_to_a_minimal_equivalent():
    rng = random.Random(0)
    seen = 0
    for ndim in range(1, 6):
        for axes in itertools.permutations(range(ndim)):
            for _ in range(3):
                shape = tuple(rng.choice((1, 1, 2, 3, 4, 5)) for _ in range(ndim))
                cshape, caxes = canonical(shape, axes)
                assert math.prod(cshape) == math.prod(shape)
                assert sorted(caxes) == list(range(len(cshape)))
                assert _is_minimal(cshape, caxes), (shape, axes, cshape, caxes)
                assert _moves_the_same(shape, axes, cshape, caxes), (shape, axes, cshape, caxes)
                assert canonical(cshape, caxes) == (cshape, caxes)          # idempotent
                seen += 1
    assert seen > 400


def test_the_padded_form_and_the_plan():
    assert padded((6, 20), (1, 0)) == ((1, 1, 6, 20), (0, 1, 3, 2))
    with pytest.raises(ShapeError, match="at most 4"):
        padded((2, 3, 4, 5, 6), (4, 3, 2, 1, 0))
    p = plan((1, 64, 256, 3136), (0, 1, 3, 2))          # a padded key's form is canonicalised again
    assert (p.shape, p.axes, p.mode, p.a, p.b) == ((64, 256, 3136), (0, 2, 1), "tile", 1, 2)
    assert p.out_shape == (64, 3136, 256)
    assert [(d.size, d.in_stride, d.out_stride) for d in p.dims] == [(64, 256 * 3136, 256 * 3136), (256, 3136, 1),
                                                                     (3136, 1, 256)]
    assert [d.size for d in p.batch] == [64]
    rows = plan((2, 3, 20), (1, 0, 2))
    assert (rows.mode, rows.row, [d.size for d in rows.outer]) == ("rows", 20, [3, 2])
    assert plan((120,), (0,)).mode == "copy"


@pytest.mark.parametrize("axes,match", [
    ((0, 0, 1), "not a permutation"), ((0, 1), "not a permutation"), ((0, 1, 3), "out of range"),
    ((0, 1, -4), "out of range"), ((0, 1.0, 2), "not an integer"), ((0, True, 2), "not an integer"),
    (5, "not a sequence"),
])
def test_bad_axes_are_a_shape_error_with_a_remedy(axes, match):
    with pytest.raises(ShapeError, match=match) as err:
        check_axes(axes, 3)
    assert "remedy" in str(err.value)


# ---------------------------------------------------------------- problems

def test_problems_are_canonical_and_their_keys_round_trip_and_pass_import_checks():
    p = permute_problem((64, 256, 56, 56), (0, 2, 3, 1), "bfloat16")
    assert p.key == "permute|d0=1|d1=64|d2=256|d3=3136|dtype=bfloat16|perm=0_1_3_2"
    assert permute_problem((64, 256, 3136), (0, 2, 1), "bfloat16") == p
    assert Problem.from_key(p.key) == p
    assert all(re.fullmatch(r"[A-Za-z0-9_.]+", str(v)) for _, v in p.params)     # a shared file's words
    config = SPEC.default_config(p, T)
    assert Validator().why("permute", p.key, config.name, config.as_dict(), 1.0, T.name, "9.0",
                           SPEC.template_digest()) is None
    odd = Problem.of("permute", d0=1, d1=1, d2=64, d3=256, dtype="float32", perm="0_1_2_3")   # not merged
    assert "no space" in Validator().why("permute", odd.key, config.name, config.as_dict(), 1.0, T.name, "9.0",
                                         SPEC.template_digest())


def test_problems_are_checked():
    with pytest.raises(ShapeError, match=">= 1"):
        permute_problem((0, 4), (1, 0), "float32")
    with pytest.raises(DtypeError, match="float64"):
        permute_problem((4, 4), (1, 0), "float64")
    with pytest.raises(ShapeError, match="not a permutation"):
        permute_problem((4, 4), (1, 1), "float32")
    with pytest.raises(ShapeError, match="at most 4"):
        permute_problem((2, 3, 4, 5, 6), (4, 3, 2, 1, 0), "float32")
    assert permute_problem((2, 1, 3, 4, 5, 1), (0, 1, 2, 3, 4, 5), "float16")["d3"] == 120   # 6-D, a copy
    for bad in (Problem.of("permute", d0=1, d1=1, d2=64, d3=256, dtype="float32", perm="0_1_2_3"),
                Problem.of("permute", d0=1, d1=1, d2=64, d3=256, dtype="float32", perm="0_1_3_3"),
                Problem.of("permute", d0=1, d1=1, d2=0, d3=256, dtype="float32", perm="0_1_3_2"),
                Problem.of("permute", d0=1, d1=64, d3=256, dtype="float32", perm="0_1_3_2"),
                Problem.from_key("permute|d0=1|d1=1|d2=64|d3=256|dtype=float32|perm=0132")):
        with pytest.raises(InputError):
            problem_plan(bad)


def test_requests_come_from_cli_fields():
    fields = SPEC.fields()
    values = parse_args(fields, ["--shape", "64,256,56,56", "--perm", "0,2,3,1", "--dtype", "bfloat16"], "permute")
    spec, p = SPEC.request(T, **values)
    assert spec is SPEC and p == permute_problem((64, 256, 56, 56), (0, 2, 3, 1), "bfloat16")
    _, t = SPEC.request(T, **parse_args(fields, ["--shape=1000x3"], "permute"))     # default: a transpose
    assert t == permute_problem((1000, 3), (1, 0), "float32")
    with pytest.raises(InputError, match="shape"):
        SPEC.request(T, shape="64,a", perm=None, dtype="float32")
    with pytest.raises(ShapeError, match="not a permutation"):
        SPEC.request(T, shape="4,5", perm="0,0", dtype="float32")
    out = CliRunner().invoke(app, ["families", "permute"])
    assert out.exit_code == 0 and "--shape" in out.output and "--perm" in out.output


# ---------------------------------------------------------------- spaces and defaults

PROBLEMS = {
    "transpose fp32": ((16384, 16384), (1, 0), "float32"),
    "nchw-nhwc bf16": ((64, 256, 56, 56), (0, 2, 3, 1), "bfloat16"),
    "nhwc-nchw bf16": ((64, 56, 56, 256), (0, 3, 1, 2), "bfloat16"),
    "odd fp16": ((31, 33), (1, 0), "float16"),
    "thin fp32": ((1000, 3), (1, 0), "float32"),
    "4-d reversed": ((3, 5, 7, 9), (3, 2, 1, 0), "bfloat16"),
    "rows fp32": ((16, 32, 64), (1, 0, 2), "float32"),
    "copy fp16": ((1001,), (0,), "float16"),
    "one element": ((1, 1), (1, 0), "float32"),
}


@pytest.mark.parametrize("name", PROBLEMS)
def test_spaces_hold_only_configs_that_fit_and_the_default_is_one_of_them(name):
    shape, axes, dtype = PROBLEMS[name]
    p = permute_problem(shape, axes, dtype)
    pl = problem_plan(p)
    space = SPEC.space(p, T)
    configs = space.configs()
    default = SPEC.default_config(p, T)
    assert configs and default in configs
    assert len({c.name for c in configs}) == len(configs)
    for c in configs:
        geo = SPEC.launch(p, c)
        assert 1 <= geo.grid[0] <= 2**31 - 1 and geo.grid[1:] == (1, 1) and geo.shared_mem == 0
        if pl.mode == "tile":
            sa, sb = pl.shape[pl.a], pl.shape[pl.b]
            assert sb % c["VIN"] == 0 and sa % c["VOUT"] == 0 and c["VOUT"] % c["PAIR"] == 0
            assert c["VIN"] * SIZE[dtype] <= 16 and c["VOUT"] * SIZE[dtype] <= 16
            assert c["PAIR"] == 1 or (SIZE[dtype] == 2 and sa % 2 == 0)
            assert c["TA"] // c["PAIR"] * (c["TB"] * SIZE[dtype] * c["PAIR"] + 4) <= T.smem_per_block
            blocks = -(-sa // c["TA"]) * -(-sb // c["TB"]) * (pl.size // (sa * sb))
            assert geo.grid[0] == blocks
        else:
            assert pl.mode == "copy" or pl.row % c["VEC"] == 0
            assert geo.grid[0] * geo.block[0] * c["VEC"] * c["ITEMS"] >= pl.size


def test_the_defaults_use_16_byte_vectors_paired_words_and_4096_word_tiles():
    names = {n: SPEC.default_config(permute_problem(*PROBLEMS[n]), T).name for n in PROBLEMS}
    assert names["transpose fp32"] == "permute_tile_64x64_t256_vi4_vo4_p1"
    assert names["nchw-nhwc bf16"] == "permute_tile_128x64_t256_vi8_vo8_p2"
    assert names["nhwc-nchw bf16"] == "permute_tile_128x64_t256_vi8_vo8_p2"
    assert names["odd fp16"] == "permute_tile_32x64_t128_vi1_vo1_p1"         # 31 rows: no pairs, no vectors
    assert names["thin fp32"] == "permute_tile_256x4_t64_vi1_vo4_p1"         # 3 columns: a tall thin tile
    assert names["rows fp32"] == "permute_rows_v4_i2_t256"
    assert names["copy fp16"] == "permute_copy_v8_i2_t256"


@pytest.mark.parametrize("name", PROBLEMS)
def test_model_picks_start_with_the_default_and_are_valid_and_distinct(name):
    p = permute_problem(*PROBLEMS[name])
    picks = SPEC.model_picks(p, T, 4)
    space = SPEC.space(p, T)
    assert picks[0] == SPEC.default_config(p, T)
    assert len(set(picks)) == len(picks) and all(space.is_valid(c.as_dict()) for c in picks)


def test_bytes_are_one_read_and_one_write():
    p = permute_problem((64, 256, 56, 56), (0, 2, 3, 1), "bfloat16")
    assert SPEC.bytes(p) == 2 * 64 * 256 * 3136 * 2
    assert SPEC.output_tolerance(p, "out") == 0.0


def test_export_replays_one_launch_on_the_arrays_by_name():
    p = permute_problem((64, 256, 56, 56), (0, 2, 3, 1), "bfloat16")
    recipe = launch_recipe(SPEC, p, SPEC.default_config(p, T))
    assert recipe == {"grid": [49 * 2 * 64, 1, 1], "block": [256, 1, 1], "shared_mem": 0,
                      "args": [{"pointer": "x"}, {"pointer": "out"}]}
    json.dumps(recipe)


# ---------------------------------------------------------------- rendering

def test_renders_bake_the_canonical_sizes_and_choose_the_index_width():
    p = permute_problem((64, 256, 56, 56), (0, 2, 3, 1), "bfloat16")
    code = render(SPEC, p, SPEC.default_config(p, T), T).code
    assert "SA = 256, SB = 3136" in code and "IN_A = 3136, OUT_B = 256" in code
    assert "typedef unsigned int idx_t;" in code and "typedef unsigned int word_t;" in code
    assert "batch dimension of 64" in code and "PITCH = TB + 1;" in code
    big = permute_problem((65536, 40000), (1, 0), "float16")                 # 2.6e9 elements
    assert "typedef unsigned long long idx_t;" in render(SPEC, big, SPEC.default_config(big, T), T).code
    odd = permute_problem((31, 33), (1, 0), "float16")
    code = render(SPEC, odd, SPEC.default_config(odd, T), T).code
    assert "typedef unsigned short word_t;" in code and "PITCH = TB + 2;" in code
    rows = permute_problem((16, 32, 64), (1, 0, 2), "float32")
    code = render(SPEC, rows, SPEC.default_config(rows, T), T).code
    assert "ROW = 64" in code and "kgen_source" in code and "__shared__" not in code


# ---------------------------------------------------------------- compiled

COMPILE_CASES = {
    "transpose fp32": ((4096, 4096), (1, 0), "float32"),
    "nchw-nhwc bf16": ((8, 256, 56, 56), (0, 2, 3, 1), "bfloat16"),
    "odd fp16": ((31, 4097), (1, 0), "float16"),
    "two batch dims": ((3, 64, 5, 96), (2, 0, 3, 1), "bfloat16"),
    "rows": ((16, 32, 64), (1, 0, 2), "float32"),
    "copy": ((1 << 20,), (0,), "float32"),
    "64-bit indices": ((65536, 40000), (1, 0), "float16"),
}
PER_CASE = 6


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    def jobs():
        for i, (case, (shape, axes, dtype)) in enumerate(COMPILE_CASES.items()):
            p = permute_problem(shape, axes, dtype)
            space = SPEC.space(p, T)
            configs = space.sample(PER_CASE, seed=i) + [SPEC.default_config(p, T)]
            for config in dict.fromkeys(configs):
                yield case, p, config, render(SPEC, p, config, T, space)

    return compile_cases(tmp_path_factory, jobs(), "permute")


def test_sampled_configs_compile_for_sm90_without_spills(compiled):
    rows = compiled_rows(compiled)
    assert len(rows) >= 30 and set(compiled) == set(COMPILE_CASES)
    failed = compile_failures(rows)
    assert not failed, failed
    for _, config, source, result in rows:
        assert source.entry == config.name and result.binary.entry == config.name and source.arch == "sm_90"
        assert not result.binary.resources.get("spill_stores"), config.name
        assert result.binary.resources.get("smem_static", 0) <= T.smem_per_block


def _ops(sass: str) -> list[str]:
    return re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)[^;]*;", sass)


def _tile(compiled, want):
    for case in compiled.values():
        for p, c, _, r in case:
            if c.name.startswith("permute_tile") and want(p, c):
                return p, c, r
    pytest.fail("no such tile config compiled")


def test_a_16_byte_tile_config_moves_128_bit_vectors_through_padded_shared_memory(compiled):
    """The default bf16 tile: LDG.128 / STG.128 on the fast path, scalar STS and LDS, one
    barrier, and the column reads of a store PITCH words apart, PITCH an odd number of banks."""
    p, config, result = _tile(compiled, lambda p, c: p["dtype"] == "bfloat16" and c["VIN"] == 8 and c["VOUT"] == 8
                              and c["PAIR"] == 2)
    sass = sass_or_skip(result.binary.cubin)
    ops = _ops(sass)
    assert "LDG.E.128.CONSTANT" in ops and "STG.E.128" in ops, config.name
    assert "STS" in ops and "LDS" in ops and "BAR.SYNC.DEFER_BLOCKING" in ops
    assert not [o for o in ops if o.startswith(("LDL", "STL"))]               # no local memory
    pitch = (config["TB"] + 1) * 4                                            # bytes between word rows
    assert (pitch // 4) % 2 == 1
    offsets = {int(o, 16) for o in re.findall(r"LDS R\d+, \[R\d+\+(0x[0-9a-f]+)\]", sass)}
    assert {pitch, 2 * pitch, 3 * pitch} <= offsets, (config.name, sorted(offsets))


@pytest.mark.parametrize("vin_bytes,vout_bytes", [(16, 16), (8, 16), (16, 8), (4, 4)])
def test_global_accesses_are_as_wide_as_the_vector_widths_say(compiled, vin_bytes, vout_bytes):
    def wanted(p, c):
        size = SIZE[p["dtype"]]
        return c["VIN"] * size == vin_bytes and c["VOUT"] * size == vout_bytes
    try:
        p, config, result = _tile(compiled, wanted)
    except pytest.fail.Exception:
        p = permute_problem((4096, 4096), (1, 0), "float32")
        size = 4
        config = next(c for c in SPEC.space(p, T).configs()
                      if c["VIN"] * size == vin_bytes and c["VOUT"] * size == vout_bytes)
        from kgen.compile import compile_source
        result = compile_source(render(SPEC, p, config, T))
    ops = _ops(sass_or_skip(result.binary.cubin))
    suffix = {16: ".128", 8: ".64", 4: ""}
    assert f"LDG.E{suffix[vin_bytes]}.CONSTANT" in ops, config.name
    assert f"STG.E{suffix[vout_bytes]}" in ops, config.name


def test_copies_and_row_moves_use_16_byte_vectors_and_no_shared_memory(compiled):
    for case in ("copy", "rows"):
        p, config, _, result = next(row for row in compiled[case] if row[1] == SPEC.default_config(row[0], T))
        ops = _ops(sass_or_skip(result.binary.cubin))
        assert "LDG.E.128.CONSTANT" in ops and "STG.E.128" in ops, config.name
        assert "STS" not in ops and "LDS" not in ops


# ---------------------------------------------------------------- run on the CPU

HOST_SHAPES = [((1, 1), (1, 0)), ((31, 33), (1, 0)), ((1000, 3), (1, 0)), ((3, 200), (1, 0)), ((130, 66), (1, 0)),
               ((2, 64, 6, 6), (0, 2, 3, 1)), ((2, 6, 6, 64), (0, 3, 1, 2)), ((3, 8, 2, 4), (2, 0, 3, 1)),
               ((5, 6, 8), (1, 0, 2)), ((1001,), (0,))]
STORAGE = {4: np.uint32, 2: np.uint16}


@pytest.fixture(scope="module")
def on_the_cpu(tmp_path_factory):
    """[(shape, axes, dtype, config, launch)]: a sampled config and the default of each shape and
    dtype, and the default of every permutation of a 4-D bfloat16 array, built for the CPU."""
    folder = tmp_path_factory.mktemp("host-kernels")
    if compiler(folder) is None:
        pytest.skip("no host C++20 compiler (g++ or clang++) to run kernels on the CPU")
    rng = random.Random(7)
    cases = []
    for dtype in SIZE:
        for shape, axes in HOST_SHAPES:
            p = permute_problem(shape, axes, dtype)
            configs = SPEC.space(p, T).sample(1, seed=rng.randrange(1 << 30)) + [SPEC.default_config(p, T)]
            cases += [(shape, axes, dtype, c) for c in dict.fromkeys(configs)]
    for axes in itertools.permutations(range(4)):
        cases.append(((3, 5, 7, 9), axes, "bfloat16", SPEC.default_config(permute_problem((3, 5, 7, 9), axes,
                                                                                          "bfloat16"), T)))

    def built(case):
        shape, axes, dtype, config = case
        return build(render(SPEC, permute_problem(shape, axes, dtype), config, T), folder)

    with ThreadPoolExecutor(2) as pool:
        return [(*case, launch) for case, launch in zip(cases, pool.map(built, cases))]


def _placed(values: np.ndarray, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(buffer, view): ``values`` copied into a buffer at ``offset`` elements past a 64-byte boundary."""
    size = values.itemsize
    buffer = np.full(values.size + 64, np.iinfo(values.dtype).max, values.dtype)
    start = (-buffer.ctypes.data % 64) // size + offset
    view = buffer[start:start + values.size]
    view[:] = values.ravel()
    return buffer, view


def test_kernels_run_on_the_cpu_move_every_element_aligned_or_not(on_the_cpu):
    """The rendered kernels' index arithmetic, run by host threads: every element lands where
    NumPy's transpose puts it, with 16-byte aligned arrays and with arrays one element off
    (the element-by-element path; a vector access there would abort the run under UBSan)."""
    assert len(on_the_cpu) >= 60
    rng = np.random.default_rng(0)
    for shape, axes, dtype, config, launch in on_the_cpu:
        p = permute_problem(shape, axes, dtype)
        storage = STORAGE[SIZE[dtype]]
        x = rng.integers(1, np.iinfo(storage).max, size=shape, dtype=np.uint64).astype(storage)
        want = np.ascontiguousarray(x.transpose(axes))
        geo = SPEC.launch(p, config)
        for offset in (0, 1):
            _, src = _placed(x, offset)
            out_buffer, out = _placed(np.full(want.size, np.iinfo(storage).max, storage), offset)
            launch(src.ctypes.data, out.ctypes.data, geo.grid[0], geo.block[0])
            assert np.array_equal(out.reshape(want.shape), want), (shape, axes, dtype, config.name, offset)
            start = (out.ctypes.data - out_buffer.ctypes.data) // x.itemsize
            outside = np.concatenate([out_buffer[:start], out_buffer[start + out.size:]])
            assert (outside == np.iinfo(storage).max).all(), ("written outside the array", config.name)


# ---------------------------------------------------------------- kgen.permute, dispatched to a fake GPU

@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr("kgen.ops.launch.on_caller_stream", lambda kind, device: contextlib.nullcontext())
    with fake_dispatch(T) as fake:
        yield fake


def test_permute_launches_the_canonical_problem_on_the_callers_pointers(fake_gpu):
    x = FakeArray((8, 256, 56, 56), "float16")
    out = FakeArray((8, 56, 56, 256), "float16", ptr=BASE + 0x1000_0000)
    assert kgen.permute(x, (0, 2, 3, 1), out=out) is out
    (kernel, launch), = fake_gpu.launcher.launches
    p = permute_problem((8, 256, 3136), (0, 2, 1), "float16")
    assert kernel.entry == SPEC.default_config(p, T).name
    assert launch.grid == tuple(SPEC.launch(p, SPEC.default_config(p, T)).grid)
    assert [int(a) for a in launch.args] == [BASE, BASE + 0x1000_0000]
    t = FakeArray((5, 3), "float32", ptr=BASE + 0x2000_0000)
    kgen.transpose(FakeArray((3, 5), "float32"), out=t)
    assert fake_gpu.launcher.launches[-1][0].entry.startswith("permute_tile_")


def test_permute_refuses_bad_axes_strided_inputs_and_wrong_outputs(fake_gpu):
    x = FakeArray((4, 6), "float32")
    with pytest.raises(ShapeError, match="not a permutation"):
        kgen.permute(x, (0, 0))
    with pytest.raises(ShapeError, match="out of range"):
        kgen.permute(x, (0, 2))
    with pytest.raises(LayoutError):
        kgen.permute(x.T, (1, 0))
    with pytest.raises(ShapeError, match="out has shape"):
        kgen.permute(x, (1, 0), out=FakeArray((4, 6), "float32"))
    with pytest.raises(DtypeError):
        kgen.permute(x, (1, 0), out=FakeArray((6, 4), "float16"))
    with pytest.raises(DtypeError):
        kgen.permute(FakeArray((4, 6), "float64"), (1, 0))
    with pytest.raises(ShapeError, match="2-D"):
        kgen.transpose(FakeArray((2, 3, 4), "float32"))
    with pytest.raises(InputError, match="overlaps"):
        kgen.permute(x, (1, 0), out=FakeArray((6, 4), "float32", ptr=BASE + 8))
    assert not fake_gpu.launcher.launches


def test_the_family_reads_no_problem_from_operands():
    with pytest.raises(InputError, match="axes"):
        SPEC.problem_from_operands({"x": None, "out": None})
    assert MAX_RANK == 4
