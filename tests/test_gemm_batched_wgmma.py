"""Batched GEMM on wgmma with no GPU: what it runs (16-bit, TMA-readable batches), its space
(gemm_wgmma's without split-K), the picks counting every batch's tiles, the launch, the 3-D
tensor maps of the arguments and of the exported recipe, the route of ``kgen.gemm`` on 3-D
operands, and sampled configs compiled for sm_90a with HGMMA and 3-D TMA in their SASS."""

from __future__ import annotations

import json

import pytest

from kgen import tma
from kgen.export_runtime import replay
from kgen.kernels.gemm.batched import batched_problem, route
from kgen.kernels.gemm.batched_wgmma import GemmBatchedWgmma
from kgen.kernels.gemm.wgmma import GemmWgmma
from kgen.problem import Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, hopper_sass_faults, per_case
from fakes import BASE, differing_arguments

SPEC = GemmBatchedWgmma()
FAMILY = "gemm_batched_wgmma"


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def _problem(*args, **kw):
    return batched_problem(*args, family=FAMILY, **kw)


def test_registered_and_what_it_runs(target):
    assert isinstance(get_spec(FAMILY), GemmBatchedWgmma)
    assert SPEC.supports(_problem(8, 100, 72, 40, "float16", "NT", "b"), target)
    assert not SPEC.supports(_problem(8, 96, 96, 128, "float32", "NN"), target)   # mma.sync's
    assert not SPEC.supports(_problem(8, 100, 72, 40, "bfloat16", "NT", align_a=4), target)        # no TMA rows
    assert SPEC.supports(_problem(8, 3, 16, 40, "bfloat16", "NT"), target)      # matrices 240 B apart


def test_route_prefers_wgmma_where_it_runs(target):
    families = lambda p: [s.family for s, _ in route(target, p)]      # noqa: E731
    assert families(batched_problem(64, 512, 512, 64, "bfloat16", "NT")) == [FAMILY, "gemm_batched"]
    assert families(batched_problem(4, 96, 96, 128, "float32", "NN")) == ["gemm_batched"]
    assert families(batched_problem(4, 33, 70, 17, "float16", "TT")) == ["gemm_batched"]     # rows of 70 halves
    (_, p), _ = route(target, batched_problem(64, 512, 512, 64, "bfloat16", "NT", "a"))
    assert p.family == FAMILY and p["broadcast"] == "a" and p["batch"] == 64


def test_space_is_gemm_wgmmas_without_split_k(target):
    p = _problem(2, 64, 4096, 4096, "bfloat16", "NT")       # one batch of few tiles: gemm_wgmma would split K
    space = SPEC.space(p, target)
    splits = {p_.name: p_.choices for p_ in space.params}["SPLITK"]
    assert splits == (1,) and {pp.name for pp in space.params} == {pp.name for pp in GemmWgmma().space(p, target).params}
    assert all(c.name.startswith(FAMILY + "_bf16_nt_") for c in space.sample(20, seed=1))


def test_picks_count_every_batchs_tiles(target):
    one = SPEC.default_config(_problem(1, 512, 512, 512), target)
    many = SPEC.default_config(_problem(256, 512, 512, 512), target)
    area = lambda c: c["BM"] * c["BN"]       # noqa: E731
    assert area(many) > area(one) and many["SPLITK"] == one["SPLITK"] == 1
    launch = SPEC.launch(_problem(256, 512, 512, 512), many)
    assert launch.grid[0] == 132 and launch.grid[1:] == (1, 1) and launch.block[0] == 128 * (many["CONSUMERS"] + 1)
    small = _problem(3, 200, 64, 64)                        # fewer units than SMs: a block (cluster) each
    for config in SPEC.space(small, target).sample(10, seed=2):
        cluster = config.get("CLUSTER", 1)
        units = 3 * -(-(-(-200 // config["BM"])) // cluster) * -(-64 // config["BN"])
        assert SPEC.launch(small, config).grid == (cluster * units, 1, 1), config.name


def test_render_takes_the_batch_and_leaves_gemm_wgmma_as_it_was(target):
    p = _problem(12, 100, 72, 40, "bfloat16", "NT", "b", epilogue="bias_relu")
    config = SPEC.default_config(p, target)
    code = render(SPEC, p, config, target).code
    assert "constexpr int BATCH = 12;" in code and "constexpr int BATCH_A = 1, BATCH_B = 0;" in code
    assert "BATCH_STRIDE_C = 7200;" in code and "tma_load_3d(a_dst, &tmap_a, full, k0, m0, BATCH_A * batch);" in code
    plain = GemmWgmma()
    q = plain.problem(100, 72, 40, "bfloat16", "NT", epilogue="bias_relu")
    two_d = render(plain, q, plain.default_config(q, target), target).code
    assert "tma_load_3d" not in two_d and "batch" not in two_d.lower()


@pytest.mark.parametrize("layout,broadcast", [("NT", "none"), ("NN", "a"), ("TN", "b"), ("TT", "none")])
def test_arguments_are_3d_maps_of_the_dense_batch(target, fake_tma_maps, layout, broadcast):
    batch, m, n, k = 6, 200, 136, 72
    p = _problem(batch, m, n, k, "bfloat16", layout, broadcast)
    space = SPEC.space(p, target)
    config = space.config(BM=128, BN=128, BK=64, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0, TMA_STORE=1, CLUSTER=1)
    pa, pb, pc = BASE, BASE + (1 << 22), BASE + (1 << 23)
    args = SPEC.args(p, config, {"a": pa, "b": pb, "c": pc})
    maps = {call["ptr"]: call for call in fake_tma_maps}
    a, b, c = maps[pa], maps[pb], maps[pc]
    assert a["dims"] == ((k, m) if layout[0] == "N" else (m, k)) + ((1,) if broadcast == "a" else (batch,))
    assert b["dims"] == ((n, k) if layout[1] == "N" else (k, n)) + ((1,) if broadcast == "b" else (batch,))
    assert a["batch_stride"] == (0 if broadcast == "a" else 2 * m * k)
    assert b["batch_stride"] == (0 if broadcast == "b" else 2 * k * n)
    assert a["stride"] == 2 * (k if layout[0] == "N" else m) and b["stride"] == 2 * (n if layout[1] == "N" else k)
    assert c["dims"] == (n, m, batch) and c["batch_stride"] == 2 * m * n and c["stride"] == 2 * n
    assert int(args[15]) == 1                                   # C stored by TMA
    assert [int(x) for x in args[9:13]] == [m, n, k, n]


def test_a_c_whose_rows_tma_cannot_store_is_stored_from_registers(target, fake_tma_maps):
    p = _problem(4, 7, 24, 64, "bfloat16", "NT")           # C's rows 48 B, its matrices 336 B apart: fine
    config = SPEC.space(p, target).config(BM=64, BN=64, BK=64, STAGES=4, CONSUMERS=1, GM=1, PINGPONG=0, TMA_STORE=1)
    assert int(SPEC.args(p, config, {"a": BASE, "b": BASE + 65536, "c": BASE + 131072})[15]) == 1
    odd = _problem(4, 5, 20, 64, "bfloat16", "NT")          # rows of 40 B: TMA cannot
    config = SPEC.space(odd, target).config(BM=64, BN=64, BK=64, STAGES=4, CONSUMERS=1, GM=1, PINGPONG=0, TMA_STORE=1)
    assert int(SPEC.args(odd, config, {"a": BASE, "b": BASE + 65536, "c": BASE + 131072})[15]) == 0


def test_tma_rejects_batches_it_cannot_step(fake_tma_maps):
    assert tma.tma_rejects(BASE, "bfloat16", (64, 10, 4), 128, (64, 10), 128, 1280) == []
    assert tma.tma_rejects(BASE, "bfloat16", (64, 10, 4), 128, (64, 10), 128, 1288) == [
        "batch stride 1288 bytes is not a multiple of 16"]
    assert "a matrix's rows" in tma.tma_rejects(BASE, "bfloat16", (64, 10, 4), 128, (64, 10), 128, 1264)[0]
    with pytest.raises(tma.TmaError, match="batch stride"):
        tma.encode_tiled(BASE, "bfloat16", (64, 10, 4), 128, (64, 10), 128, 1288)


def test_exported_recipe_rebuilds_the_same_arguments(target, fake_tma_maps):
    for layout, broadcast in (("NT", "b"), ("TN", "none")):
        p = _problem(8, 104, 72, 40, "bfloat16", layout, broadcast, epilogue="bias")
        config = SPEC.default_config(p, target)
        pointers = {"a": BASE, "b": BASE + (1 << 20), "c": BASE + (1 << 21), "bias": BASE + (1 << 22)}
        want = SPEC.args(p, config, pointers)
        got = replay.arguments(json.loads(json.dumps(SPEC.arg_recipe(p, config))),
                               {name: (ptr, 0) for name, ptr in pointers.items()}, {})
        assert differing_arguments(got, want) == []


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()

    def jobs():
        for dtype in ("bfloat16", "float16"):
            for i, (layout, broadcast) in enumerate((("NN", "none"), ("TN", "b"), ("NT", "a"), ("TT", "none"))):
                p = _problem(16, 200, 136, 72, dtype, layout, broadcast, epilogue=("none", "bias", "gelu", "relu")[i])
                space = SPEC.space(p, target)
                for config in space.sample(per_case(6, 16), seed=i):
                    yield dtype, p, config, render(SPEC, p, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), FAMILY)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sampled_configs_compile_with_hgmma_and_3d_tma(compiled, dtype):
    rows = compiled[dtype]
    assert len(rows) >= 24 and compile_failures(rows) == []
    assert hopper_sass_faults(rows, ("UTMALDG.3D",)) == []


def test_request_from_command_line_fields(target):
    from kgen.errors import DtypeError
    from kgen.fields import parse_args

    args = ["--batch", "64", "--m", "512", "--n", "512", "--k", "64", "--layout", "nt", "--broadcast", "a"]
    spec, problem = SPEC.request(target, **parse_args(SPEC.fields(), args + ["--dtype", "bfloat16"], FAMILY))
    assert spec is SPEC and problem == _problem(64, 512, 512, 64, "bfloat16", "NT", "a")
    with pytest.raises(DtypeError, match="gemm_batched"):           # float32: the mma.sync family's, as tf32
        SPEC.request(target, **parse_args(SPEC.fields(), args, FAMILY))
