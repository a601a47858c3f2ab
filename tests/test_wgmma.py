"""gemm_wgmma (sm_90a TMA + wgmma): compiles and SASS with no GPU, TMA rules, host-side
argument building; GPU-marked correctness at odd sizes for every dtype x layout x epilogue.

Compiling one wgmma config takes about a second of one core, so a plain run samples 12 configs
per dtype x layout (144 compiles); KGEN_TEST_COMPILES=full compiles 50 of each (600 compiles,
over 5 min on 2 cores).
"""

from __future__ import annotations

import os
import pickle
import random
import re
import time
from types import SimpleNamespace

import numpy as np
import pytest

from kgen import tma
from kgen.compile import CompilePool, compile_source
from kgen.kernels.gemm.dtypes import EPILOGUES, allowed_outputs
from kgen.kernels.gemm.wgmma_geometry import BK, block_k, smem_bytes
from kgen.kernels.gemm.wgmma import GemmWgmma, split_parts_poll
from kgen.problem import Target
from kgen.render import render

from compiling import compile_cases, per_case, sass_or_skip

PER_CASE = per_case(12, 50)   # sampled configs per precision x layout (KGEN_TEST_COMPILES=full: 50, ~7 min on 2 cores)
DTYPES = ("float16", "bfloat16", "float32")      # float32: tf32
SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}
LAYOUTS = ("NN", "NT", "TN", "TT")
CASES = [(d, l) for d in DTYPES for l in LAYOUTS]
SPEC = GemmWgmma()


@pytest.fixture(scope="module")
def target():
    t = Target.h200()
    assert SPEC.compile_arch(t) == "sm_90a"
    return t


def _variant(rng: random.Random, dtype: str, layout: str, m=4096, n=4096, k=4096):
    """The problem with a random output dtype and epilogue (they change the generated code)."""
    return SPEC.problem(m, n, k, dtype, layout, out_dtype=rng.choice(allowed_outputs(dtype)),
                        epilogue=rng.choice(EPILOGUES))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, target):
    """PER_CASE sampled configs of every dtype x layout, each with a random output type and
    epilogue, compiled once through one pool of 2."""
    def jobs():
        for seed, (dtype, layout) in enumerate(CASES):
            rng = random.Random(seed)
            space = SPEC.space(SPEC.problem(4096, 4096, 4096, dtype, layout), target)
            for config in space.sample(PER_CASE, seed=seed):
                problem = _variant(rng, dtype, layout)
                yield (dtype, layout), problem, config, render(SPEC, problem, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "wgmma")


@pytest.mark.parametrize("dtype,layout", CASES)
def test_sampled_wgmma_configs_compile_for_sm90a_without_spills(compiled, dtype, layout):
    rows = compiled[(dtype, layout)]
    assert len(rows) >= PER_CASE
    failed = [(c.name, p["out_dtype"], p["epilogue"], r.failure.detail[:400])
              for p, c, _, r in rows if r.failure is not None]
    assert not failed, failed
    short = SHORT[dtype]
    for problem, config, source, result in rows:
        b = result.binary
        assert config.name.startswith(f"gemm_wgmma_{short}_{layout.lower()}_")
        assert source.arch == "sm_90a" and b.arch == "sm_90a" and b.entry == config.name
        assert b.cubin[:4] == b"\x7fELF" and config.name.encode() in b.cubin
        res = b.resources
        assert res["registers"] > 0, (config.name, res)
        assert res.get("spill_stores", 0) == 0 and res.get("spill_loads", 0) == 0, (config.name, res)
        assert res.get("stack", 0) == 0, (config.name, res)     # no local memory at all
        if config["CONSUMERS"] == 2:   # setmaxnreg's 40/232 split assumes the 168-register entry
            assert res["registers"] == 168, (config.name, res)


# ---------------------------------------------------------------- SASS


@pytest.mark.parametrize("layout", LAYOUTS)
def test_sass_has_hgmma_tma_and_transposes_per_layout(target, layout):
    problem = SPEC.problem(4096, 4096, 4096, "bfloat16", layout)
    config = SPEC.space(problem, target).config(BM=128, BN=256, BK=BK, STAGES=4, CONSUMERS=2, GM=8, PINGPONG=0)
    assert config.name == f"gemm_wgmma_bf16_{layout.lower()}_128x256x64_s4_c2_g8"
    result = compile_source(render(SPEC, problem, config, target))
    assert result.failure is None, result.failure
    sass = sass_or_skip(result.binary.cubin)
    hgmma = re.findall(r"HGMMA\.64x256x16\.F32\.BF16[^;]*", sass)
    assert len(hgmma) == BK // 16, hgmma           # 4 k16 steps per stage, one m64 slab each
    assert "UTMALDG.2D" in sass                    # TMA loads
    assert "SYNCS.PHASECHK" in sass                # mbarrier try_wait
    assert "USETMAXREG" in sass                    # setmaxnreg producer / consumer split
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass  # one wgmma group kept in flight
    for ins in hgmma:   # A "T" is M-major (tnspA), B "N" is N-major (tnspB)
        assert ("tnspA" in ins) == (layout[0] == "T"), ins
        assert ("tnspB" in ins) == (layout[1] == "N"), ins
    # a K-major operand is one TMA box per stage; MN-major ones loop over 64-wide chunks
    if layout == "NT":
        assert len(re.findall(r"UTMALDG\.2D", sass)) == 2
    assert result.binary.resources.get("spill_stores", 0) == 0


def _two_consumer_sass(target, problem, **values):
    """(config, SASS) of a two-consumer config, checked to compile on 168 registers, no spills,
    no wgmma serialised by ptxas."""
    space = SPEC.space(problem, target)
    config = space.config(**values)
    result = compile_source(render(SPEC, problem, config, target, space))
    assert result.failure is None, result.failure
    res = result.binary.resources
    assert res.get("spill_stores", 0) == 0 and res.get("stack", 0) == 0 and res["registers"] == 168
    assert "wgmma_serialized" not in res
    return config, sass_or_skip(result.binary.cubin)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_sass_of_tf32_configs_has_tf32_hgmma_and_cp_async_for_mn_major_operands(target, layout):
    """tf32 wgmma reads K-major tiles only: TMA for K-major operands, 4-byte cp.async (LDGSTS)
    counted on the full barrier for MN-major ones, and an async-proxy fence before wgmma."""
    problem = SPEC.problem(4096, 4096, 4096, "float32", layout, epilogue="bias_relu")
    config, sass = _two_consumer_sass(target, problem, BM=128, BN=256, BK=32, STAGES=4, CONSUMERS=2, GM=8,
                                      PINGPONG=0)
    assert config.name == f"gemm_wgmma_tf32_{layout.lower()}_128x256x32_s4_c2_g8"
    hgmma = re.findall(r"HGMMA\.64x256x8\.F32\.TF32[^;]*", sass)
    assert len(hgmma) == 32 // 8 and not any("tnsp" in h for h in hgmma), hgmma
    copied = (layout[0] == "T") + (layout[1] == "N")
    assert len(re.findall(r"UTMALDG\.2D", sass)) == 2 - copied
    assert ("LDGSTS.E" in sass) == bool(copied)
    assert ("ARRIVES.LDGSTSBAR" in sass) == bool(copied)
    # one fence after the barriers' init; one in the mainloop where cp.async fills the tiles
    assert sass.count("FENCE.VIEW.ASYNC.S") == 1 + bool(copied)


@pytest.mark.parametrize("staged", (2, 3))
def test_sass_of_a_staged_tf32_b_transposes_with_16_byte_shared_accesses(target, staged):
    """An N-major tf32 B staged by TMA (XS > 0): no cp.async, TMA for both operands, and the
    transpose as 16-byte shared loads and stores (four each per 4 x 4 block), then the
    producers' async-proxy fence; no local memory (the producer takes 56 registers here)."""
    problem = SPEC.problem(4096, 4096, 4096, "float32", "NN")
    config, sass = _two_consumer_sass(target, problem, BM=256, BN=128, BK=32, STAGES=3, CONSUMERS=2, GM=8,
                                      PINGPONG=0, TMA_STORE=1, XS=staged)
    assert config.name == f"gemm_wgmma_tf32_nn_256x128x32_s3_c2_g8_ts_t{staged}"
    assert "LDGSTS" not in sass and "ARRIVES.LDGSTSBAR" not in sass
    assert len(re.findall(r"UTMALDG\.2D", sass)) == 2    # A, and B into the staging ring
    assert len(re.findall(r"\bLDS\.128\b", sass)) == 4 and len(re.findall(r"\bSTS\.128\b", sass)) == 4
    # the producers' fence after the transposes: one more than the same tile with both operands K-major
    _, k_major = _two_consumer_sass(target, SPEC.problem(4096, 4096, 4096, "float32", "NT"), BM=256, BN=128, BK=32,
                                    STAGES=3, CONSUMERS=2, GM=8, PINGPONG=0, TMA_STORE=1)
    assert sass.count("FENCE.VIEW.ASYNC.S") == k_major.count("FENCE.VIEW.ASYNC.S") + 1
    assert "LDL" not in sass and "STL" not in sass


@pytest.mark.parametrize("layout,bm,bn", [("NN", 128, 256), ("NN", 256, 128), ("TT", 128, 256)])
def test_sass_of_a_tf32_rs_config_takes_the_m_major_operand_from_registers(target, layout, bm, bn):
    """RS (TT: A; NN, swapped: B^T): HGMMA with a register first operand (R, then the second
    operand's descriptor), two 8-byte shared loads per k8 step and m64 slab, TMA for both
    operands (no cp.async, no transposes), 8-byte stores of C, no local memory, and no wgmma
    serialised."""
    problem = SPEC.problem(4096, 4096, 4096, "float32", layout, epilogue="bias_gelu")
    config, sass = _two_consumer_sass(target, problem, BM=bm, BN=bn, BK=32, STAGES=4, CONSUMERS=2, GM=8,
                                      PINGPONG=0, RS=1)
    assert config.name == f"gemm_wgmma_tf32_{layout.lower()}_{bm}x{bn}x32_s4_c2_g8_rs"
    slabs = bm // 2 // 64
    hgmma = re.findall(rf"HGMMA\.64x{bn}x8\.F32\.TF32 R\d+, R\d+, gdesc[^;]*", sass)
    assert len(hgmma) == 32 // 8 * slabs, hgmma
    assert len(re.findall(r"\bLDS\.64\b", sass)) == 2 * 32 // 8 * slabs
    assert "LDGSTS" not in sass and "LDS.128" not in sass and "STS.128" not in sass
    # TMA: the first operand's 32-row boxes (a loop, partly unrolled), one box of the second
    assert len(re.findall(r"UTMALDG\.2D", sass)) >= 2
    assert re.search(r"\bSTG\.E\.64\b", sass)
    assert "LDL" not in sass and "STL" not in sass


def test_rs_is_offered_for_tf32_nn_and_tt_where_tma_reads_both_operands(target, recorded_maps):
    def rs(dtype, layout, **kw):
        problem = SPEC.problem(1000, 520, 776, dtype, layout, **kw)
        return next(p.choices for p in SPEC.space(problem, target).params if p.name == "RS")

    assert rs("float32", "NN") == rs("float32", "TT") == (0, 1)
    assert rs("float32", "NT") == rs("float32", "TN") == rs("bfloat16", "NN") == rs("bfloat16", "TT") == (0,)
    assert rs("float32", "NN", align_b=2) == rs("float32", "NN", align_a=2) == rs("float32", "TT", align_a=2) == (0,)
    m, n, k = 1000, 520, 776
    p = SPEC.problem(m, n, k, "float32", "NN", epilogue="bias")
    space = SPEC.space(p, target)
    registers = [c for c in space.configs() if c["RS"]]
    assert registers and all(c["TMA_STORE"] == 0 == c["XS"] and c["CLUSTER"] == 1 for c in registers)
    c = space.config(BM=128, BN=256, BK=32, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0, RS=1)
    assert c.name == "gemm_wgmma_tf32_nn_128x256x32_s4_c2_g1_rs"
    # the kernel's rows are C's columns: ceil(520 / 128) x ceil(1000 / 256) tiles
    assert SPEC.launch(p, c).grid == (5 * 4, 1, 1)
    # tiles lie over the swapped problem: 64 kernel rows at most where N is 64
    narrow = SPEC.space(SPEC.problem(1000, 64, 776, "float32", "NN"), target)
    assert {x["BM"] for x in narrow.configs() if x["RS"]} == {64}
    args = SPEC.args(p, c, {"a": _FakeArray(0x10000, (m, k), (k, 1), "<f4", 4),
                            "b": _FakeArray(0x20000, (k, n), (n, 1), "<f4", 4),
                            "c": _FakeArray(0x30000, (m, n), (n, 1), "<f4", 4),
                            "bias": _FakeArray(0x40000, (n,), (1,), "<f4", 4), "alpha": 1.0, "beta": 0.0})
    first, second = recorded_maps
    assert (first["ptr"], first["dims"], first["stride"], first["box"]) == (0x20000, (n, k), 4 * n, (32, 32))
    assert (second["ptr"], second["dims"], second["stride"], second["box"]) == (0x10000, (k, m), 4 * k, (32, 256))
    assert first["swizzle"] == second["swizzle"] == 128
    # B first, A second, their leading dimensions likewise; the kernel's M x N is N x M; ldc stays C's
    assert args[3:13] == [0x20000, 0x10000, n, k, 0x30000, 0x40000, n, m, k, n]
    # TT: A (stored K x M) from registers, nothing swapped
    recorded_maps.clear()
    tt = SPEC.problem(m, n, k, "float32", "TT")
    c = SPEC.space(tt, target).config(BM=128, BN=256, BK=32, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0, RS=1)
    assert c.name == "gemm_wgmma_tf32_tt_128x256x32_s4_c2_g1_rs" and SPEC.launch(tt, c).grid == (8 * 3, 1, 1)
    args = SPEC.args(tt, c, {"a": _FakeArray(0x10000, (m, k), (1, m), "<f4", 4),
                             "b": _FakeArray(0x20000, (k, n), (1, k), "<f4", 4),
                             "c": _FakeArray(0x30000, (m, n), (n, 1), "<f4", 4)})
    first, second = recorded_maps
    assert (first["ptr"], first["dims"], first["stride"], first["box"]) == (0x10000, (m, k), 4 * m, (32, 32))
    assert (second["ptr"], second["dims"], second["stride"], second["box"]) == (0x20000, (k, n), 4 * k, (32, 256))
    assert args[3:13] == [0x10000, 0x20000, m, k, 0x30000, 0, m, n, k, n]


def test_staging_needs_tf32_n_major_b_with_16_byte_rows(target):
    def xs(dtype, layout, **kw):
        problem = SPEC.problem(1000, 1000, 1000, dtype, layout, **kw)
        return next(p.choices for p in SPEC.space(problem, target).params if p.name == "XS")

    assert xs("float32", "NN") == xs("float32", "TN") == (0, 2, 3)
    assert xs("float32", "NT") == xs("bfloat16", "NN") == (0,)
    assert xs("float32", "NN", align_b=2) == (0,)       # rows TMA cannot read: cp.async
    staged = SPEC.space(SPEC.problem(4096, 4096, 4096, "float32", "NN"), target).config(
        BM=256, BN=128, BK=32, STAGES=3, CONSUMERS=2, GM=8, PINGPONG=0, TMA_STORE=1, XS=2)
    assert SPEC.launch(SPEC.problem(4096, 4096, 4096, "float32", "NN"), staged).shared_mem == \
        smem_bytes(256, 128, 3, 2, 1) + 2 * 128 * 128 + 2 * 16


@pytest.mark.parametrize("layout", ("NN", "NT"))
def test_sass_of_a_cluster_config_multicasts_b_and_arrives_remotely(target, layout):
    problem = SPEC.problem(4096, 4096, 4096, "bfloat16", layout)
    config, sass = _two_consumer_sass(target, problem, BM=128, BN=256, BK=64, STAGES=4, CONSUMERS=2, GM=8,
                                      PINGPONG=0, TMA_STORE=1, CLUSTER=2)
    assert config.name == f"gemm_wgmma_bf16_{layout.lower()}_128x256x64_s4_c2_g8_ts_x2"
    loads = re.findall(r"UTMALDG\.2D[^;]*", sass)
    multicast = [x for x in loads if "MULTICAST" in x]
    # A: one plain load per stage; B: its 64-wide chunks (N-major) or this block's half box (K-major)
    assert multicast and len(loads) - len(multicast) == 1, loads
    assert "UCGABAR_ARV" in sass and "UCGABAR_WAIT" in sass        # the cluster barrier at the start
    # only it fences GPU-wide: freeing a stage in the other block must not, and a block leaves
    # once the stages it filled are free, with no second cluster barrier
    assert sass.count("MEMBAR.ALL.GPU") == 1
    # TMA stores: one bulk tensor store per 128 bytes of a warp's 256 bf16 columns, in each of the
    # epilogue's two versions (with beta, reading C, and without)
    assert len(re.findall(r"UTMASTG\.2D", sass)) == 2 * (256 * 2 // 128)
    assert re.search(r"SYNCS\.ARRIVE\.TRANS64\.RED\.A1T0\.ALIGN|SYNCS\.ARRIVE[^;]*\.RED", sass)  # remote arrive


def test_cluster_configs_launch_whole_clusters_and_split_the_b_box(target, recorded_maps):
    m, n, k = 1100, 520, 776
    p = SPEC.problem(m, n, k, "bfloat16", "NT")
    space = SPEC.space(p, target)
    c = space.config(BM=128, BN=256, BK=64, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0, CLUSTER=2)
    # 9 block rows: 5 pairs (the last one's second tile past M) x 3 columns
    assert SPEC.launch(p, c).grid == (30, 1, 1)
    big = SPEC.problem(4096, 4096, 4096, "bfloat16", "NT")
    cb = SPEC.space(big, target).config(**dict(c.as_dict(), GM=8))
    assert SPEC.launch(big, cb).grid == (132, 1, 1)
    SPEC.args(p, c, {"a": _FakeArray(0x10000, (m, k), (k, 1)), "b": _FakeArray(0x20000, (k, n), (1, k)),
                     "c": _FakeArray(0x30000, (m, n), (n, 1))})
    bmap = next(x for x in recorded_maps if x["ptr"] == 0x20000)
    assert bmap["box"] == (64, 128)            # each block of the pair loads half of the 256 rows
    one_row = SPEC.problem(100, 4096, 4096, "bfloat16", "NT")
    assert not any(x["CLUSTER"] == 2 for x in SPEC.space(one_row, target).configs() if x["BM"] >= 128)


def test_sass_of_a_ping_pong_config(target):
    problem = SPEC.problem(4096, 4096, 4096, "float16", "TN", epilogue="bias_gelu")
    config, sass = _two_consumer_sass(target, problem, BM=128, BN=128, BK=64, STAGES=6, CONSUMERS=2, GM=8,
                                      PINGPONG=1)
    assert config.name == "gemm_wgmma_f16_tn_128x128x64_s6_c2_g8_pp"
    hgmma = re.findall(r"HGMMA\.64x128x16\.F32[^;]*", sass)
    assert len(hgmma) == 2 * BK // 16 and all("tnspA.tnspB" in h for h in hgmma)   # 2 m64 slabs


# ---------------------------------------------------------------- the family's space

def test_supports(target):
    p = SPEC.problem(1000, 520, 776, "bfloat16", "TN")
    assert SPEC.supports(p, target)
    assert SPEC.supports(SPEC.problem(64, 64, 64, "float32", "NN"), target)            # tf32
    assert not SPEC.supports(SPEC.problem(64, 64, 64, "float64", "NN"), target)
    # tf32: an operand TMA reads needs 16-byte rows; one copied by cp.async (MN-major) does not
    assert not SPEC.supports(SPEC.problem(100, 64, 30, "float32", "NN"), target)      # lda = 30
    assert SPEC.supports(SPEC.problem(100, 30, 64, "float32", "NN"), target)          # ldb = 30, copied
    assert SPEC.supports(SPEC.problem(30, 30, 64, "float32", "TN"), target)           # both copied
    assert not SPEC.supports(SPEC.problem(64, 64, 30, "float32", "NT"), target)       # lda = ldb = 30

    assert not SPEC.supports(SPEC.problem(100, 64, 36, "float16", "NN"), target)      # lda = 36
    assert not SPEC.supports(SPEC.problem(100, 60, 64, "float16", "NN"), target)      # ldb = 60
    assert not SPEC.supports(SPEC.problem(100, 64, 64, "float16", "TN"), target)      # lda = m = 100 -> 4
    ampere = Target("A100", (8, 0), 108, 48 * 1024, 163 * 1024, 164 * 1024)
    assert not SPEC.supports(p, ampere)
    assert SPEC.compile_arch(ampere) == "sm_80"


def test_space_respects_shared_memory_registers_and_names(target):
    for dtype, layout in CASES:
        problem = SPEC.problem(4096, 4096, 4096, dtype, layout)
        space = SPEC.space(problem, target)
        configs = space.configs()
        assert len(configs) >= 50
        for c in configs:
            v = space.full_values(c.as_dict())
            assert v["SMEM"] == smem_bytes(v["BM"], v["BN"], v["STAGES"], v["CONSUMERS"], v["TMA_STORE"], v["XS"]) \
                <= target.smem_per_block_optin
            assert v["RPC"] in (64, 128) and v["BN"] // 2 * v["SLABS"] <= 168
            assert not v["RS"] or (v["BN"] // 2 + 16) * v["SLABS"] <= 168 + 16    # and the fragments
            name = re.fullmatch(rf"gemm_wgmma_{SHORT[dtype]}_(nn|nt|tn|tt)_\d+x\d+x{block_k(dtype)}_s\d+_c[12]_g[18]"
                                r"(?P<pp>_pp)?(_k[248])?(?P<ts>_ts)?(?P<x2>_x2)?(_t[23])?(?P<rs>_rs)?", c.name)
            assert name, c.name
            flags = {k: bool(name[k]) for k in ("pp", "ts", "x2", "rs")}
            assert flags == {"pp": bool(v["PINGPONG"]), "ts": bool(v["TMA_STORE"]), "x2": v["CLUSTER"] == 2,
                             "rs": bool(v["RS"])}
            if v["PINGPONG"]:
                assert v["CONSUMERS"] == 2 and v["RPC"] == v["BM"]
        assert len({c.name for c in configs}) == len(configs)
        assert any(c["PINGPONG"] for c in configs) and not all(c["PINGPONG"] for c in configs)
        assert any(c["TMA_STORE"] for c in configs) and not all(c["TMA_STORE"] for c in configs)
        # B copied in by cp.async (tf32, B row-major) cannot be multicast
        assert any(c["CLUSTER"] == 2 for c in configs) == (dtype != "float32" or layout[1] == "T")


def test_default_config_and_launch(target):
    p = SPEC.problem(4096, 4096, 4096, "bfloat16", "NT")
    c = SPEC.default_config(p, target)
    assert c.name == "gemm_wgmma_bf16_nt_128x256x64_s4_c2_g8_ts_x2"   # 4 waves of the largest tile, pairs share B
    geo = SPEC.launch(p, c)
    assert geo.grid == (132, 1, 1) and geo.block == (384, 1, 1)
    assert geo.shared_mem == 4 * (128 + 256) * 64 * 2 + 8 * 2 * 2048 + 4 * 16 + 16 + 1024
    small = SPEC.problem(64, 64, 64, "float16", "NN")
    cs = SPEC.default_config(small, target)
    assert SPEC.space(small, target).is_valid(cs.as_dict())
    assert SPEC.launch(small, cs).grid == (1, 1, 1)
    odd = SPEC.problem(1000, 520, 776, "float16", "TT")
    co = SPEC.default_config(odd, target)
    assert SPEC.launch(odd, co).grid[0] == -(-1000 // co["BM"]) * -(-520 // co["BN"])


def test_context_carries_types_epilogue_and_entry(target):
    p = SPEC.problem(256, 256, 256, "bfloat16", "TT", out_dtype="float32", epilogue="bias_gelu")
    space = SPEC.space(p, target)
    c = SPEC.default_config(p, target)
    ctx = SPEC.context(p, c, space)
    assert ctx["entry"] == c.name and ctx["out_t"] == "float" and ctx["has_bias"] == 1
    assert ctx["activation"] == "gelu" and ctx["SLABS"] == ctx["RPC"] // 64
    code = render(SPEC, p, c, target, space).code
    assert "Activation::gelu" in code and "HAS_BIAS = true" in code and "tnspA 1" in code and "tnspB 0" in code


# ---------------------------------------------------------------- host-side arguments

class _FakeArray:
    """Just enough of a device array for kgen.arrays.describe (no GPU)."""

    def __init__(self, ptr, shape, strides_elems, typestr="<u2", itemsize=2):
        self.device = SimpleNamespace(id=0)
        self.__cuda_array_interface__ = {
            "data": (ptr, False), "shape": tuple(shape), "typestr": typestr, "version": 3,
            "strides": tuple(s * itemsize for s in strides_elems)}


@pytest.fixture
def recorded_maps(monkeypatch):
    """Replace the driver encode by a recorder; return the calls."""
    calls = []

    def fake(ptr, dtype, dims, row_stride_bytes, box, swizzle_bytes):
        calls.append(dict(ptr=ptr, dtype=dtype, dims=dims, stride=row_stride_bytes, box=box,
                          swizzle=swizzle_bytes))
        return tma.words_to_desc([ptr, *dims, row_stride_bytes, *box, swizzle_bytes] + [0] * 9)

    tma.clear_cache()
    monkeypatch.setattr(tma, "_driver_encode", fake)
    yield calls
    tma.clear_cache()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_args_build_tensor_maps_along_the_contiguous_dimension(target, recorded_maps, layout):
    m, n, k = 1000, 520, 776
    p = SPEC.problem(m, n, k, "bfloat16", layout, epilogue="bias")
    c = SPEC.space(p, target).config(BM=128, BN=256, BK=64, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0)
    a = _FakeArray(0x10000, (m, k), (k, 1) if layout[0] == "N" else (1, m))
    b = _FakeArray(0x20000, (k, n), (n, 1) if layout[1] == "N" else (1, k))
    cc = _FakeArray(0x30000, (m, n), (n, 1))
    bias = _FakeArray(0x40000, (n,), (1,))
    args = SPEC.args(p, c, {"a": a, "b": b, "c": cc, "bias": bias, "alpha": 2.0, "beta": 0.5})
    amap, bmap = recorded_maps
    if layout[0] == "N":
        assert (amap["dims"], amap["stride"], amap["box"]) == ((k, m), 2 * k, (64, 128))
    else:
        assert (amap["dims"], amap["stride"], amap["box"]) == ((m, k), 2 * m, (64, 64))
    if layout[1] == "N":
        assert (bmap["dims"], bmap["stride"], bmap["box"]) == ((n, k), 2 * n, (64, 64))
    else:
        assert (bmap["dims"], bmap["stride"], bmap["box"]) == ((k, n), 2 * k, (64, 256))
    assert amap["swizzle"] == bmap["swizzle"] == 128 and amap["dtype"] == "bfloat16"
    assert isinstance(args[0], np.void) and args[0].dtype.itemsize == 128
    assert not args[2]["words"].any()                      # registers store C: an empty C map
    assert [type(x) for x in args[3:]] == [np.uint64, np.uint64, np.int64, np.int64,
                                           np.uint64, np.uint64, np.int32, np.int32, np.int32,
                                           np.int64, np.float32, np.float32, np.int32, np.uint64, np.uint64]
    lda = k if layout[0] == "N" else m
    ldb = n if layout[1] == "N" else k
    assert args[3:] == [0x10000, 0x20000, lda, ldb,
                        0x30000, 0x40000, m, n, k, n, 2.0, 0.5, 0, 0, 0]   # no split-K: no workspace
    args2 = SPEC.args(p, c, {"a": a, "b": b, "c": cc, "bias": None})
    assert args2[8] == 0 and len(recorded_maps) == 2       # second call: maps from the cache


@pytest.mark.parametrize("out,ldc,expect_map", [("bfloat16", 520, True), ("float32", 520, True),
                                                ("bfloat16", 523, False), ("float32", 522, False)])
def test_tma_store_configs_get_a_map_of_c_where_its_rows_are_16_byte_aligned(target, recorded_maps, out, ldc,
                                                                             expect_map):
    m, n, k = 1000, 520, 776
    p = SPEC.problem(m, n, k, "bfloat16", "NN", out_dtype=out)
    c = SPEC.space(p, target).config(BM=128, BN=256, BK=64, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0, TMA_STORE=1)
    assert c.name.endswith("_ts")
    size = 2 if out == "bfloat16" else 4
    build = SPEC.arg_builder(p, c, (k, n, ldc))
    args = build(0x10000, 0x20000, 0x30000, 0, 1.0, 0.0)
    cmaps = [call for call in recorded_maps if call["ptr"] == 0x30000]
    if expect_map:     # 16-row boxes of 128 bytes of columns, the 128-byte swizzle
        assert [(x["dims"], x["stride"], x["box"], x["swizzle"], x["dtype"]) for x in cmaps] == \
            [((n, m), ldc * size, (128 // size, 16), 128, out)]
        assert args[2]["words"][0] == 0x30000 and args[-3] == 1
    else:              # the kernel stores from registers instead
        assert not cmaps and not args[2]["words"].any() and args[-3] == 0
    moved = build(0x10000, 0x20000, 0x50000, 0, 1.0, 0.0)    # a new C: its own map
    assert (moved[2]["words"][0] == 0x50000) == expect_map and moved[7] == 0x50000
    unaligned = build(0x10000, 0x20000, 0x50008, 0, 1.0, 0.0)
    assert unaligned[-3] == 0 and not unaligned[2]["words"].any()


def test_tma_store_buffers_take_shared_memory_and_a_name(target):
    p = SPEC.problem(4096, 4096, 4096, "bfloat16", "NN")
    space = SPEC.space(p, target)
    plain = space.config(BM=128, BN=256, BK=64, STAGES=4, CONSUMERS=2, GM=8, PINGPONG=0)
    staged = space.config(BM=128, BN=256, BK=64, STAGES=4, CONSUMERS=2, GM=8, PINGPONG=0, TMA_STORE=1)
    assert (plain.name, staged.name) == ("gemm_wgmma_bf16_nn_128x256x64_s4_c2_g8",
                                         "gemm_wgmma_bf16_nn_128x256x64_s4_c2_g8_ts")
    # two 2 KiB buffers per consumer warp
    assert SPEC.launch(p, staged).shared_mem - SPEC.launch(p, plain).shared_mem == 2 * 4 * 2 * 2048
    # the buffers cost a stage where the ring was already near the limit
    assert not space.is_valid(dict(staged.as_dict(), BN=192, STAGES=5))
    assert space.is_valid(dict(plain.as_dict(), BN=192, STAGES=5))


@pytest.mark.parametrize("dtype,out,n,by_band", [("bfloat16", "bfloat16", 1001, True), ("bfloat16", "float32", 1002, True),
                                                ("float16", "float16", 1000, False), ("float32", "float32", 1004, False),
                                                ("float32", "float32", 1003, True)])
def test_a_c_tma_cannot_store_goes_out_through_the_store_buffers_a_row_at_a_time(target, dtype, out, n, by_band):
    """Where C's rows are not 16-byte multiples, a TMA-store config's source writes the band
    through its buffer, lanes at consecutive columns (and has no use for the fragment stores); an
    aligned C's source is the one it always was, and so is a config storing from registers."""
    p = SPEC.problem(700, n, 96, dtype, "TN", out_dtype=out)
    space = SPEC.space(p, target)
    bk = block_k(dtype)
    ts = space.config(BM=128, BN=128, BK=bk, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0, TMA_STORE=1)
    plain = space.config(BM=128, BN=128, BK=bk, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0)
    assert SPEC.rows_by_band(p, ts) == by_band and not SPEC.rows_by_band(p, plain)
    code = render(SPEC, p, ts, target, space).code
    assert ("lanes at consecutive columns" in code) == by_band
    aligned = SPEC.problem(700, 1024, 96, dtype, "TN", out_dtype=out)
    same = render(SPEC, aligned, ts, target, SPEC.space(aligned, target)).code
    assert (code == same) == (not by_band)
    assert "lanes at consecutive columns" not in render(SPEC, p, plain, target, space).code


def test_only_plain_gemm_writes_unaligned_rows_through_the_store_buffers(target):
    """Batched and grouped kernels write such a C from registers (their batch and group offsets
    are not the band's), and so does the convolution's."""
    from kgen.registry import get_spec

    for family in ("gemm_batched_wgmma", "gemm_grouped_wgmma"):
        assert get_spec(family).stores_rows_by_band is False
    assert SPEC.stores_rows_by_band is True


def test_a_c_through_the_store_buffers_compiles_without_spills(target):
    """The row path's SASS: 16-bit shared loads and global stores, TMA stores for the C TMA
    can store, no local memory."""
    p = SPEC.problem(1012, 10238, 8, "float16", "NN")
    space = SPEC.space(p, target)
    config = space.config(BM=128, BN=128, BK=64, STAGES=6, CONSUMERS=2, GM=1, PINGPONG=0, TMA_STORE=1)
    sass = sass_or_skip(compile_source(render(SPEC, p, config, target, space), use_cache=False).binary.cubin)
    assert "LDS.U16" in sass and "STG.E.U16" in sass and "UTMASTG" in sass
    assert "LDL" not in sass and "STL" not in sass


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tf32_args_encode_maps_only_for_k_major_operands(target, recorded_maps, layout):
    m, n, k = 1000, 520, 776
    p = SPEC.problem(m, n, k, "float32", layout)
    c = SPEC.space(p, target).config(BM=128, BN=128, BK=32, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0)
    f32 = dict(typestr="<f4", itemsize=4)
    a = _FakeArray(0x10000, (m, k), (k, 1) if layout[0] == "N" else (1, m), **f32)
    b = _FakeArray(0x20000, (k, n), (n, 1) if layout[1] == "N" else (1, k), **f32)
    args = SPEC.args(p, c, {"a": a, "b": b, "c": _FakeArray(0x30000, (m, n), (n, 1), **f32)})
    encoded = {call["ptr"]: call for call in recorded_maps}
    if layout[0] == "N":      # K-major A: TMA boxes of 32 k (128 bytes) x BM rows
        assert (encoded[0x10000]["dims"], encoded[0x10000]["stride"], encoded[0x10000]["box"]) == \
            ((k, m), 4 * k, (32, 128))
    else:                     # M-major A: copied by cp.async, an empty map
        assert 0x10000 not in encoded and not args[0]["words"].any()
    if layout[1] == "T":
        assert (encoded[0x20000]["dims"], encoded[0x20000]["box"], encoded[0x20000]["dtype"]) == \
            ((k, n), (32, 128), "float32")
    else:
        assert 0x20000 not in encoded and not args[1]["words"].any()
    assert args[3:7] == [0x10000, 0x20000, k if layout[0] == "N" else m, n if layout[1] == "N" else k]


def test_arg_builder_reuses_the_last_operands_maps_and_encodes_new_ones(target, recorded_maps, monkeypatch):
    m, n, k = 256, 512, 128
    p = SPEC.problem(m, n, k, "float16", "NN")
    c = SPEC.space(p, target).config(BM=128, BN=128, BK=64, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0)
    build = SPEC.arg_builder(p, c, (k, n, n))
    looked_up = []
    real_maps = SPEC.tensor_maps
    monkeypatch.setattr(SPEC, "tensor_maps", lambda *a: looked_up.append(a) or real_maps(*a))
    first = build(0x10000, 0x20000, 0x30000, 0, 1.0, 0.0)
    again = build(0x10000, 0x20000, 0x40000, 0, 2.0, 1.0)
    assert len(looked_up) == 1 and again[0] is first[0] and again[1] is first[1]
    assert again[7] == 0x40000 and again[-5:] == (2.0, 1.0, 0, 0, 0)
    moved = build(0x50000, 0x20000, 0x40000, 0, 1.0, 0.0)
    assert len(looked_up) == 2 and moved[0]["words"][0] == 0x50000 and moved[1]["words"][0] == 0x20000
    back = build(0x10000, 0x20000, 0x30000, 0, 1.0, 0.0)
    assert back[0]["words"][0] == 0x10000 and len(looked_up) == 3


# ---------------------------------------------------------------- kgen.tma pure helpers

def test_tma_rejects_explains_each_rule():
    ok = tma.tma_rejects(0x1000, "bfloat16", (776, 1000), 1552, (64, 128), 128)
    assert ok == []
    assert tma.tma_rejects(0x1000, "float16", (1000, 10), 2000 + 2, (64, 64), 128) == \
        ["row stride 2002 bytes is not a multiple of 16"]
    assert "base pointer 0x1008 is not 16-byte aligned" in \
        tma.tma_rejects(0x1008, "float16", (64, 64), 128, (64, 64), 128)
    assert any("box dimension 257" in w for w in tma.tma_rejects(0, "float16", (64, 64), 128, (64, 257), 128))
    assert any("exceeds the 64-byte swizzle span" in w
               for w in tma.tma_rejects(0, "float16", (64, 64), 128, (64, 64), 64))
    assert any("not a multiple of 16" in w for w in tma.tma_rejects(0, "float16", (64, 64), 128, (4, 64), 0))
    assert any("swizzle 48" in w for w in tma.tma_rejects(0, "float16", (64, 64), 128, (8, 64), 48))
    assert any("shorter than a row" in w for w in tma.tma_rejects(0, "float16", (64, 64), 64, (8, 64), 0))
    assert any("dims" in w for w in tma.tma_rejects(0, "float16", (0, 64), 128, (8, 64), 0))
    assert tma.tma_rejects(0, "complex64", (8, 8), 16, (8, 8), 0) == ["dtype complex64 has no TMA element type here"]


def test_tma_small_helpers():
    assert tma.box_matches_swizzle(64, "bfloat16", 128) and not tma.box_matches_swizzle(32, "bfloat16", 128)
    assert tma.box_matches_swizzle(32, "float32", 128)
    assert tma.stride_ok(8, "float16") and not tma.stride_ok(12, "float16") and tma.stride_ok(4, "float32")
    rec = tma.words_to_desc(range(16))
    assert isinstance(rec, np.void) and rec.dtype == tma.TMA_DESC_DTYPE and rec.dtype.itemsize == 128
    assert list(rec["words"]) == list(range(16))
    assert bytes(rec)[:8] == (0).to_bytes(8, "little") and bytes(rec)[8:16] == (1).to_bytes(8, "little")


def test_encode_rejects_before_the_driver_with_a_picklable_error(monkeypatch):
    monkeypatch.setattr(tma, "_driver_encode", lambda *a: pytest.fail("the driver must not be called"))
    with pytest.raises(tma.TmaError) as info:
        tma.encode_tiled(0x1000, "float16", (100, 100), 200, (64, 64), 128)
    err = info.value
    assert "multiple of 16" in str(err) and "remedy" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is tma.TmaError and again.message == err.message and again.remedy == err.remedy


def test_encode_cache_is_an_lru_keyed_by_everything(monkeypatch):
    calls = []

    def fake(*key):
        calls.append(key)
        return tma.words_to_desc([len(calls)] + [0] * 15)

    tma.clear_cache()
    monkeypatch.setattr(tma, "_driver_encode", fake)
    monkeypatch.setattr(tma, "CACHE_SIZE", 2)
    first = tma.encode_tiled(0x1000, "float16", (64, 64), 128, (64, 64), 128)
    assert tma.encode_tiled(0x1000, "float16", (64, 64), 128, (64, 64), 128) is first
    assert len(calls) == 1
    tma.encode_tiled(0x1000, "float16", (64, 64), 128, (64, 32), 128)     # another box
    tma.encode_tiled(0x2000, "float16", (64, 64), 128, (64, 64), 128)     # another pointer: evicts the oldest
    assert len(calls) == 3
    tma.encode_tiled(0x1000, "float16", (64, 64), 128, (64, 64), 128)     # evicted: encoded again
    assert len(calls) == 4
    tma.clear_cache()


def test_encode_without_a_driver_is_a_tma_error(monkeypatch):
    def no_driver(*a, **k):
        raise OSError("libcuda.so.1: cannot open shared object file")

    tma.clear_cache()
    monkeypatch.setattr(tma, "_encode_call", no_driver)
    with pytest.raises(tma.TmaError, match="cannot call cuTensorMapEncodeTiled"):
        tma.encode_tiled(0x1000, "bfloat16", (64, 64), 128, (64, 64), 128)


# ---------------------------------------------------------------- GPU
#
# Every (problem, config) the GPU tests launch is listed up front and compiled once in a
# process pool (the GPU host has the cores), then each test only loads and launches.

ODD = (1000, 520, 776)        # no dimension a multiple of the tiles; k not a multiple of 64
EDGE_SHAPES = [(8, 8, 8), (64, 64, 64), (136, 200, 72), (1, 4096, 256), (4096, 8, 4104)]
GPU_CASES = [(d, l, e) for d in DTYPES for l in LAYOUTS for e in EPILOGUES]


def _odd_jobs(target):
    """Per dtype x layout x epilogue: the default config and two random ones, random out dtype."""
    jobs = {}
    for i, (dtype, layout, epi) in enumerate(GPU_CASES):
        rng = random.Random(1000 + i)
        problem = SPEC.problem(*ODD, dtype, layout, out_dtype=rng.choice(allowed_outputs(dtype)), epilogue=epi)
        configs = [SPEC.default_config(problem, target)] + \
            SPEC.space(problem, target).sample(2, seed=rng.randrange(1 << 30))
        jobs[("odd", dtype, layout, epi)] = (problem, configs)
    return jobs


EDGE_DTYPES = ("bfloat16", "float32")


def _edge_jobs(target):
    jobs = {}
    for shape in EDGE_SHAPES:
        for layout in LAYOUTS:
            for dtype in EDGE_DTYPES:
                problem = SPEC.problem(*shape, dtype, layout, out_dtype="float32")
                if SPEC.supports(problem, target):
                    configs = [SPEC.default_config(problem, target)] + SPEC.space(problem, target).sample(2, seed=7)
                    jobs[("edge", shape, layout, dtype)] = (problem, configs)
    return jobs


SPLITK_SHAPES = [(1, 4096, 1024), (37, 1000, 2056), (130, 520, 4104)]


def _splitk_jobs(target):
    """Per shape x layout: three split-K configs (cooperative and ping-pong, every split)."""
    jobs = {}
    for i, (shape, layout) in enumerate((s, l) for s in SPLITK_SHAPES for l in LAYOUTS):
        rng = random.Random(2000 + i)
        dtype = DTYPES[i % len(DTYPES)]
        problem = SPEC.problem(*shape, dtype, layout, out_dtype=rng.choice(allowed_outputs(dtype)),
                               epilogue=rng.choice(EPILOGUES))
        if not SPEC.supports(problem, target):
            continue
        split = [c for c in SPEC.space(problem, target).configs() if c["SPLITK"] > 1]
        picks = rng.sample(split, min(3, len(split)))
        # and one of each way the parts meet: polling (a unit a block) and the counters
        for polls in (True, False):
            ways = [c for c in split if split_parts_poll(problem, c, target.sm_count) == polls]
            if ways and not any(split_parts_poll(problem, c, target.sm_count) == polls for c in picks):
                picks.append(rng.choice(ways))
        # and a split into parts of unequal k-block counts (a count that is no power of two)
        odd = [c for c in split if c["SPLITK"] & (c["SPLITK"] - 1)]
        if odd and not any(c["SPLITK"] & (c["SPLITK"] - 1) for c in picks):
            picks.append(rng.choice(odd))
        jobs[("splitk", shape, layout)] = (problem, picks)
    return jobs


LONG_K_SHAPES = [(40, 72, 8200), (200, 136, 13832)]    # one or a few tiles, up to 32 parts


def _long_k_jobs(target):
    """Per shape x dtype: the largest splits offered (parts read several at a time, a last
    group of fewer parts where the split is no multiple of the group), polling and counted."""
    jobs = {}
    for i, (shape, dtype) in enumerate((s, d) for s in LONG_K_SHAPES for d in ("float16", "float32")):
        rng = random.Random(3000 + i)
        problem = SPEC.problem(*shape, dtype, LAYOUTS[i % len(LAYOUTS)])
        if not SPEC.supports(problem, target):
            continue
        split = [c for c in SPEC.space(problem, target).configs() if c["SPLITK"] >= 6]
        picks = [rng.choice([c for c in split if c["SPLITK"] == s]) for s in sorted({c["SPLITK"] for c in split})[-3:]]
        counted = [c for c in split if not split_parts_poll(problem, c, target.sm_count)]
        if counted:
            picks.append(rng.choice(counted))
        jobs[("longk", shape, dtype)] = (problem, picks)
    return jobs


def _alpha_beta_jobs(target):
    jobs = {}
    for dtype in DTYPES:
        for out in allowed_outputs(dtype):
            problem = SPEC.problem(*ODD, dtype, "NT", out_dtype=out, epilogue="bias_relu")
            jobs[("ab", dtype, out)] = (problem, [SPEC.default_config(problem, target)])
    return jobs


STORE_SHAPES = [(1000, 520, 776), (1000, 517, 776)]    # C rows 16-byte aligned; not (a row at a time)


def _store_jobs(target):
    """TMA-store configs (cooperative, ping-pong, split-K) per output type, where C's rows
    suit TMA and where they do not."""
    jobs = {}
    for i, (shape, out) in enumerate((s, o) for s in STORE_SHAPES for o in allowed_outputs("bfloat16")):
        problem = SPEC.problem(*shape, "bfloat16", "NT", out_dtype=out, epilogue="bias_gelu")
        staged = [c for c in SPEC.space(problem, target).configs() if c["TMA_STORE"]]
        rng = random.Random(3000 + i)
        picks = [rng.choice([c for c in staged if c[kind]]) for kind in ("PINGPONG", "SPLITK")]
        picks.append(rng.choice([c for c in staged if not c["PINGPONG"] and c["SPLITK"] == 1]))
        jobs[("store", shape, out)] = (problem, picks)
    return jobs


CLUSTER_SHAPES = [(1100, 520, 776), (136, 1000, 2056)]   # odd block-row counts: a pair's tile past M


def _one_of_each_schedule(rng, configs):
    """A ping-pong, a split-K and a plain cooperative config of ``configs``, where there is one."""
    groups = ([c for c in configs if c["PINGPONG"]], [c for c in configs if c["SPLITK"] > 1],
              [c for c in configs if not c["PINGPONG"] and c["SPLITK"] == 1])
    return [rng.choice(group) for group in groups if group]


def _cluster_jobs(target):
    """Cluster configs (cooperative, ping-pong, split-K where offered) per shape x layout."""
    jobs = {}
    for i, (shape, layout) in enumerate((s, l) for s in CLUSTER_SHAPES for l in LAYOUTS):
        rng = random.Random(4000 + i)
        dtype = ("bfloat16", "float16")[i % 2]
        problem = SPEC.problem(*shape, dtype, layout, out_dtype=rng.choice(allowed_outputs(dtype)),
                               epilogue=rng.choice(EPILOGUES))
        if not SPEC.supports(problem, target):
            continue
        paired = [c for c in SPEC.space(problem, target).configs() if c["CLUSTER"] == 2]
        jobs[("cluster", shape, layout)] = (problem, _one_of_each_schedule(rng, paired))
    return jobs


STAGED_SHAPES = [(33, 20, 1000), (1000, 520, 776), (130, 1000, 4104), (1, 4100, 129)]


RS_SHAPES = [(36, 20, 1000), (1000, 520, 776), (132, 1000, 4104), (4, 4100, 132)]   # both operands TMA-read


def _rs_jobs(target):
    """tf32 with an M-major operand from registers (RS; NN computed swapped, TT as it is): per
    shape and layout, a ping-pong, a split-K (where offered), a cooperative config and one of
    two cooperating consumers."""
    jobs = {}
    for i, (shape, layout) in enumerate((s, l) for s in RS_SHAPES for l in ("NN", "TT")):
        rng = random.Random(6000 + i)
        problem = SPEC.problem(*shape, "float32", layout, epilogue=rng.choice(EPILOGUES))
        registers = [c for c in SPEC.space(problem, target).configs() if c["RS"]]
        two = [c for c in registers if c["CONSUMERS"] == 2 and not c["PINGPONG"]]   # two consumers' rows
        jobs[("rs", shape, layout)] = (problem, _one_of_each_schedule(rng, registers)
                                       + ([rng.choice(two)] if two else []))
    for layout in ("NN", "TT"):
        problem = SPEC.problem(*ODD, "float32", layout, epilogue="bias_relu")
        jobs[("ab", "rs", layout)] = (problem, [SPEC.space(problem, target).config(
            BM=128, BN=256, BK=32, STAGES=4, CONSUMERS=2, GM=1, PINGPONG=0, RS=1)])
    return jobs


ROWS_CASES = [("float16", "NN", (333, 1001, 72)), ("float32", "TN", (333, 1001, 72)),
              ("bfloat16", "TT", (70, 1003, 130)), ("float16", "NT", (1, 999, 64))]


def _rows_jobs(target):
    """TMA-store configs on problems whose C rows are not 16-byte multiples (the band through the
    store buffer, a row at a time): a ping-pong, a split-K (where offered) and a cooperative
    config per case, a random epilogue; and one config reading C with alpha and beta."""
    jobs = {}
    for i, (dtype, layout, shape) in enumerate(ROWS_CASES):
        rng = random.Random(7000 + i)
        problem = SPEC.problem(*shape, dtype, layout, out_dtype=rng.choice(allowed_outputs(dtype)),
                               epilogue=rng.choice(EPILOGUES))
        stored = [c for c in SPEC.space(problem, target).configs() if c["TMA_STORE"]]
        jobs[("rows", dtype, layout)] = (problem, _one_of_each_schedule(rng, stored))
        problem = SPEC.problem(*shape, dtype, layout, out_dtype=rng.choice(allowed_outputs(dtype)),
                               epilogue="bias_relu")
        jobs[("ab", "rows", dtype, layout)] = (problem, [rng.choice(
            [c for c in SPEC.space(problem, target).configs() if c["TMA_STORE"]])])
    return jobs


def _staged_jobs(target):
    """tf32 with an N-major B staged by TMA and transposed by the producers (XS > 0): per shape
    x layout, a ping-pong, a split-K (where offered) and a cooperative config."""
    jobs = {}
    for i, (shape, layout) in enumerate((s, l) for s in STAGED_SHAPES for l in ("NN", "TN")):
        rng = random.Random(5000 + i)
        problem = SPEC.problem(*shape, "float32", layout, epilogue=rng.choice(EPILOGUES))
        staged = [c for c in SPEC.space(problem, target).configs() if c["XS"]]
        jobs[("staged", shape, layout)] = (problem, _one_of_each_schedule(rng, staged))
    return jobs


@pytest.fixture(scope="module")
def gpu():
    """(target, jobs, kernels): every GPU job compiled in a pool, kernels loaded on demand."""
    from kgen.measure.launch import CupyKernel

    target = Target.detect(0)
    jobs = {**_odd_jobs(target), **_edge_jobs(target), **_alpha_beta_jobs(target), **_splitk_jobs(target),
            **_long_k_jobs(target),
            **_store_jobs(target), **_cluster_jobs(target), **_staged_jobs(target), **_rs_jobs(target),
            **_rows_jobs(target)}
    for dtype, layout in (("bfloat16", "NT"), ("float32", "NN")):
        big = SPEC.problem(4096, 4096, 4096, dtype, layout)
        jobs[("big", dtype)] = (big, [SPEC.default_config(big, target)])
    pairs = [(p, c) for p, cs in jobs.values() for c in cs]
    binaries = {}
    start = time.perf_counter()
    with CompilePool(max(2, min(16, os.cpu_count() or 2))) as pool:
        futs = [(p, c, pool.submit(render(SPEC, p, c, target))) for p, c in pairs]
        for p, c, f in futs:
            r = f.result()
            assert r.failure is None, (c.name, p.key, r.failure)
            binaries[(p.key, c.name)] = r.binary
    print(f"\ncompiled {len(pairs)} wgmma kernels for the GPU tests in {time.perf_counter() - start:.1f} s")
    kernels = {}

    def kernel(problem, config):
        key = (problem.key, config.name)
        if key not in kernels:
            b = binaries[key]
            kernels[key] = CupyKernel(b.cubin, b.entry, b.path)
        return kernels[key]

    return target, jobs, kernel


def _verify_all(gpu, key, first_seed=0):
    from kgen.measure.verify import verify

    _, jobs, kernel = gpu
    problem, configs = jobs[key]
    for seed, config in enumerate(configs, first_seed):
        operands = SPEC.inputs(problem, seed)
        check = verify(SPEC, problem, config, kernel(problem, config), operands,
                       SPEC.reference(problem, operands))
        assert check.ok, f"{config.name} ({problem.key}): {check.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,layout,epilogue", GPU_CASES)
def test_gpu_random_configs_are_correct_at_odd_sizes(gpu, dtype, layout, epilogue):
    _verify_all(gpu, ("odd", dtype, layout, epilogue))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", EDGE_DTYPES)
@pytest.mark.parametrize("shape", EDGE_SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gpu_edge_shapes(gpu, shape, layout, dtype):
    """Boxes larger than the tensor, single rows/columns, k < 64, one tile and many."""
    _job_or_skip(gpu, ("edge", shape, layout, dtype))
    _verify_all(gpu, ("edge", shape, layout, dtype))


def _job_or_skip(gpu, key):
    """The (problem, configs) listed for ``key``; a skip saying why where there is none."""
    if key not in gpu[1]:
        pytest.skip(f"{key[1]} {key[2]}: the strides are not TMA-compatible (gemm_wgmma does not support it)")
    return gpu[1][key]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_alpha_beta_reads_c(gpu, dtype):
    for out in allowed_outputs(dtype):
        _check_alpha_beta(gpu, ("ab", dtype, out))


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ("NN", "TT"))
def test_gpu_tf32_rs_reads_c_at_its_place(gpu, layout):
    """NN computed swapped reads and writes C at the transposed place of its tile."""
    _check_alpha_beta(gpu, ("ab", "rs", layout))


def _check_alpha_beta(gpu, key):
    """alpha * A B + beta * C (+ the epilogue) against the reference, with a random C."""
    import cupy

    from kgen.kernels.gemm.tc import as_float64, to_bf16

    _, jobs, kernel = gpu
    problem, (config,) = jobs[key]
    out = problem["out_dtype"]
    ops = SPEC.inputs(problem, 3)
    c0 = cupy.random.default_rng(4).random(ops["c"].shape, dtype=cupy.float32) - 0.5
    c0 = to_bf16(c0) if out == "bfloat16" else c0.astype(out)
    ops.update(c=c0.copy(), alpha=1.5, beta=-0.5)
    want = SPEC.reference(problem, {**ops, "c": c0})["c"]
    SPEC.run(kernel(problem, config), problem, config, ops)
    cupy.cuda.get_current_stream().synchronize()
    got = as_float64(ops["c"], out)
    err = float(cupy.abs(got - want).max() / cupy.abs(want).max())
    assert err <= SPEC.tolerance(problem), f"{config.name} out={out}: {err}"


@pytest.mark.gpu
@pytest.mark.parametrize("out", allowed_outputs("bfloat16"))
@pytest.mark.parametrize("shape", STORE_SHAPES)
def test_gpu_tma_store_configs_write_c_by_tma_or_from_registers(gpu, shape, out):
    _verify_all(gpu, ("store", shape, out))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,layout", [case[:2] for case in ROWS_CASES])
def test_gpu_a_c_tma_cannot_store_is_written_a_row_at_a_time(gpu, dtype, layout):
    """Every row and column of such a C, and nothing past it (the reference compares C whole;
    alpha and beta read it at its place)."""
    problem, configs = gpu[1][("rows", dtype, layout)]
    assert configs and all(SPEC.rows_by_band(problem, c) for c in configs)
    _verify_all(gpu, ("rows", dtype, layout))
    _check_alpha_beta(gpu, ("ab", "rows", dtype, layout))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", CLUSTER_SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gpu_cluster_configs_share_b_and_are_correct(gpu, shape, layout):
    """Twice each, on fresh inputs: a stage refilled too early would show on the second pass."""
    problem, configs = _job_or_skip(gpu, ("cluster", shape, layout))
    assert configs and all(c["CLUSTER"] == 2 for c in configs)
    for launch in range(2):
        _verify_all(gpu, ("cluster", shape, layout), first_seed=20 * launch)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SPLITK_SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gpu_split_k_adds_every_part_launch_after_launch(gpu, shape, layout):
    """Each config three times on fresh inputs: right every time, and every flag (or counter)
    back at zero (both ways of meeting: by polling each part's flag and by the counters)."""
    from kgen.kernels.gemm import wgmma as gemm_wgmma, workspace

    problem, configs = _job_or_skip(gpu, ("splitk", shape, layout))
    assert configs and all(c["SPLITK"] > 1 for c in configs)
    for launch in range(3):
        _verify_all(gpu, ("splitk", shape, layout), first_seed=10 * launch)
    for key, (_, flags, *_) in workspace.WORKSPACES.items():
        if key[4] != gemm_wgmma.GemmWgmma.template:
            continue
        assert int(flags.max()) == 0 == int(flags.min())


@pytest.mark.gpu
@pytest.mark.parametrize("shape", LONG_K_SHAPES)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_gpu_long_k_splits_are_right_and_bitwise_repeatable(gpu, shape, dtype):
    """Up to 32 parts of a tile, read several at a time: right against float64, and the same
    bits launch after launch (the parts are added in their order, whatever order they land in)."""
    import cupy

    problem, configs = _job_or_skip(gpu, ("longk", shape, dtype))
    assert configs and max(c["SPLITK"] for c in configs) >= 12
    _verify_all(gpu, ("longk", shape, dtype))
    _, _, kernel = gpu
    for config in configs:
        operands = SPEC.inputs(problem, 1)
        outs = []
        for _ in range(3):
            SPEC.run(kernel(problem, config), problem, config, operands)
            outs.append(cupy.asnumpy(operands["c"]).tobytes())
        assert outs[0] == outs[1] == outs[2], config.name


@pytest.mark.gpu
@pytest.mark.parametrize("shape", RS_SHAPES)
@pytest.mark.parametrize("layout", ("NN", "TT"))
def test_gpu_tf32_rs_is_right_launch_after_launch(gpu, shape, layout):
    """Twice each, on fresh inputs: the permuted fragment rows land where they belong (NN:
    C^T's tiles transposed in C), the edges masked."""
    problem, configs = gpu[1][("rs", shape, layout)]
    assert configs and all(c["RS"] for c in configs)
    for launch in range(2):
        _verify_all(gpu, ("rs", shape, layout), first_seed=40 * launch)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", STAGED_SHAPES)
@pytest.mark.parametrize("layout", ("NN", "TN"))
def test_gpu_staged_b_is_transposed_right_launch_after_launch(gpu, shape, layout):
    """Twice each, on fresh inputs: a staging buffer refilled before every producer warp had
    read it would show on the second pass."""
    problem, configs = gpu[1][("staged", shape, layout)]
    assert configs and all(c["XS"] for c in configs)
    for launch in range(2):
        _verify_all(gpu, ("staged", shape, layout), first_seed=30 * launch)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ("bfloat16", "float32"))
def test_gpu_large_square_default_config(gpu, dtype):
    """4096^3 with the cuBLAS-class default (persistent: several tiles per block): bf16 NT
    (TMA only) and tf32 NN (computed swapped, B^T from registers)."""
    _verify_all(gpu, ("big", dtype))


def test_model_picks_are_one_config_per_tile_default_first(target):
    for shape in ((2048, 2048, 2048), (3000, 5000, 720), (1, 4096, 4096), (4096, 4096, 4096)):
        problem = SPEC.problem(*shape, "bfloat16", "NN")
        space = SPEC.space(problem, target)
        picks = SPEC.model_picks(problem, target, 4)
        assert picks[0] == SPEC.default_config(problem, target) and all(space.is_valid(c.as_dict()) for c in picks)
        tiles = [(c["BM"], c["BN"]) for c in picks]
        assert len(set(tiles)) == len(tiles)
        assert len(SPEC.model_picks(problem, target, 2)) == min(2, len(picks))
    picks = SPEC.model_picks(SPEC.problem(2048, 2048, 2048, "bfloat16", "NN"), target, 3)
    assert [c.name for c in picks] == ["gemm_wgmma_bf16_nn_128x256x64_s4_c2_g1_ts_x2",   # the wider of two alike
                                       "gemm_wgmma_bf16_nn_256x128x64_s4_c2_g1_ts_x2",   # and its transpose
                                       "gemm_wgmma_bf16_nn_64x256x64_s5_c1_g8_ts_x2"]    # TMA stores before a 6th stage
    skinny = SPEC.model_picks(SPEC.problem(128, 4096, 4096, "bfloat16", "NN"), target, 3)
    assert [c["CLUSTER"] for c in skinny] == [2, 2, 1]       # 128 rows of 128-row tiles: no pair of block rows


def test_split_k_tests_take_both_ways_the_parts_meet(target):
    jobs = _splitk_jobs(target)
    ways = {split_parts_poll(problem, c, target.sm_count) for problem, configs in jobs.values() for c in configs}
    assert ways == {True, False}
    assert all(any(c["SPLITK"] in (3, 6, 12, 24) for c in configs) for _, configs in jobs.values())
    problem = SPEC.problem(64, 4096, 4096, "bfloat16", "NN")
    space = SPEC.space(problem, target)
    one_wave = space.find(["gemm_wgmma_bf16_nn_64x64x64_s8_c1_g1_k2_ts"])["gemm_wgmma_bf16_nn_64x64x64_s8_c1_g1_k2_ts"]
    two_waves = space.make({**one_wave.as_dict(), "SPLITK": 4})     # 256 units on 132 SMs
    assert split_parts_poll(problem, one_wave, 132) and not split_parts_poll(problem, two_waves, 132)
    assert not split_parts_poll(problem, space.make({**one_wave.as_dict(), "SPLITK": 1}), 132)


def test_split_k_is_offered_only_where_tiles_leave_sms_idle(target):
    from kgen.kernels.gemm.wgmma import default_splitk, splitk_useful, workspace_bytes
    from kgen.kernels.gemm.wgmma_geometry import SPLITS

    decode = SPEC.problem(1, 4096, 4096, "bfloat16", "NN")
    space = SPEC.space(decode, target)
    splits = {c["SPLITK"] for c in space.configs()}
    assert splits == set(SPLITS) and {3, 12, 32} <= splits
    c = space.config(BM=64, BN=64, BK=64, STAGES=6, CONSUMERS=1, GM=1, PINGPONG=0, SPLITK=4)
    assert c.name == "gemm_wgmma_bf16_nn_64x64x64_s6_c1_g1_k4"
    assert SPEC.launch(decode, c).grid == (132, 1, 1)                    # 64 tiles x 4 parts, persistent
    assert workspace_bytes(decode, c) == (64 * 4 * 64 * 64 * 4, 64 * 1 * 4 * 4 * 4)   # a flag per warp and part
    assert default_splitk(1, 4096, 4096, 64, 64, 132) == 2                # 128 units: one wave
    assert default_splitk(576, 64, 200704, 64, 64, 132) == 12             # 9 tiles: 108 units (16: two waves)
    assert not splitk_useful(4096, 4096, 4096, 128, 256, 2, 132)          # 512 tiles fill the GPU
    assert not splitk_useful(1, 4096, 192, 64, 64, 2, 132)                # 3 k-blocks: too few to share
    big = SPEC.problem(4096, 4096, 4096, "bfloat16", "NN")
    assert {c["SPLITK"] for c in SPEC.space(big, target).configs()} == {1}
    old = {k: v for k, v in c.as_dict().items() if k != "SPLITK"}           # stored before split-K
    assert space.make({**old, "SPLITK": 1}).name == space.make(old).name == "gemm_wgmma_bf16_nn_64x64x64_s6_c1_g1"


def test_default_tile_follows_the_wave_model(target):
    from kgen.kernels.gemm.wgmma import modelled_time

    # one wave of 64-row tiles beats a quarter-empty wave of 128 x 256 ones for a skinny problem
    assert modelled_time(128, 4096, 64, 64, 132) < modelled_time(128, 4096, 128, 256, 132)
    # at 4096^2 the largest tiles run the fewest tile-times
    assert modelled_time(4096, 4096, 128, 256, 132) < modelled_time(4096, 4096, 128, 128, 132)
    skinny = SPEC.default_config(SPEC.problem(128, 4096, 4096, "bfloat16", "NN"), target)
    assert (skinny["BM"], skinny["BN"]) == (64, 64)


def test_split_parts_poll_where_every_unit_has_a_block_of_its_own(target):
    """split_parts_poll (what the workspace and the tests go by) says what the kernel decides
    at launch: units <= blocks (clusters) of the launch."""
    from kgen.kernels.gemm.wgmma import work_units

    for shape in ((64, 4096, 4096), (1, 8192, 8192), (128, 4096, 4096), (1000, 1000, 1000)):
        problem = SPEC.problem(*shape, "bfloat16", "NN")
        for config in (c for c in SPEC.space(problem, target).configs() if c["SPLITK"] > 1):
            cluster = config.get("CLUSTER", 1)
            units_per_launch = SPEC.launch(problem, config).grid[0] // cluster
            assert split_parts_poll(problem, config, target.sm_count) == (work_units(problem, config) <= units_per_launch)


def test_the_last_part_reads_several_parts_at_once_without_spilling(target):
    """The reading warp keeps up to 32 float4 loads a lane in flight (4 parts of a 64-wide tile,
    3 of a 128-wide one, 1 beside 128 accumulators), and nothing spills for it."""
    expect = [((40, 40, 8176, "float16", "TN"), "gemm_wgmma_f16_tn_64x64x64_s8_c1_g1_k12_ts", 4),
              ((40, 40, 8176, "float16", "TN"), "gemm_wgmma_f16_tn_64x64x64_s8_c1_g1_k2", 2),
              ((208, 136, 13832, "float16", "TN"), "gemm_wgmma_f16_tn_64x128x64_s2_c1_g1_k12", 3),
              ((200, 600, 8192, "bfloat16", "NT"), "gemm_wgmma_bf16_nt_128x256x64_s2_c2_g1_k2", 1)]
    for shape, name, together in expect:
        problem = SPEC.problem(*shape)
        source = render(SPEC, problem, SPEC.space(problem, target).find([name])[name], target)
        assert f"constexpr int PARTS_TOGETHER = {together};" in source.code, name
    problem = SPEC.problem(40, 40, 8176, "float16", "TN")
    space = SPEC.space(problem, target)
    name = "gemm_wgmma_f16_tn_64x64x64_s8_c1_g1_k12_ts"
    result = compile_source(render(SPEC, problem, space.find([name])[name], target, space))
    assert result.failure is None, result.failure
    res = result.binary.resources
    assert res.get("spill_stores", 0) == 0 and res.get("stack", 0) == 0, res
    sass = sass_or_skip(result.binary.cubin)
    assert len(re.findall(r"LDG\.E\.128\.STRONG\.GPU", sass)) >= 32     # 4 parts x 8 float4s, in one round
