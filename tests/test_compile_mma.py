"""gemm_mma (mma.sync) with no GPU: 50 sampled configs of every precision x layout, each
with a random output dtype and epilogue, compile for sm_90; the SASS holds HMMA / DMMA,
ldmatrix and cp.async. About 1 s of one core per compile (800 compiles, ~7 min on 2 cores)."""

from __future__ import annotations

import random
import re

import pytest

from kgen.compile import compile_source
from kgen.kernels.gemm.mma import GemmMma
from kgen.kernels.gemm.dtypes import EPILOGUES, allowed_outputs
from kgen.problem import Target
from kgen.render import render

from compiling import compile_cases, per_case, sass_or_skip

PER_CASE = per_case(12, 50)      # sampled configs of every dtype x layout (KGEN_TEST_COMPILES=full: 50)
DTYPES = ("float16", "bfloat16", "float32", "float64")
LAYOUTS = ("NN", "NT", "TN", "TT")
CASES = [(d, l) for d in DTYPES for l in LAYOUTS]
SPEC = GemmMma()


@pytest.fixture(scope="module")
def target():
    return Target.h200()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, target):
    def jobs():
        for seed, (dtype, layout) in enumerate(CASES):
            rng = random.Random(seed)
            shape = (rng.choice([1, 100, 1000, 4096]), rng.choice([64, 1000, 4096]), 1000)
            space = SPEC.space(SPEC.problem(*shape, dtype, layout), target)
            for config in space.sample(PER_CASE, seed=seed):
                problem = SPEC.problem(*shape, dtype, layout, out_dtype=rng.choice(allowed_outputs(dtype)),
                                       epilogue=rng.choice(EPILOGUES))
                yield (dtype, layout), problem, config, render(SPEC, problem, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "mma")


@pytest.mark.parametrize("dtype,layout", CASES)
def test_sampled_mma_configs_compile_for_sm90(compiled, dtype, layout):
    rows = compiled[(dtype, layout)]
    assert len(rows) >= PER_CASE
    failed = [(c.name, r.failure.detail[:300]) for _, c, _, r in rows if r.failure is not None]
    assert not failed, failed
    spilled = [c.name for _, c, _, r in rows if r.binary.resources.get("spill_stores")]
    assert len(spilled) <= len(rows) // 10, spilled      # the register estimate keeps spills rare
    for _, config, source, result in rows:
        assert config.name.startswith(f"gemm_mma_{'tf32' if dtype == 'float32' else SPEC_SHORT[dtype]}_")
        assert source.arch == "sm_90" and result.binary.cubin[:4] == b"\x7fELF"
        assert config.name.encode() in result.binary.cubin


SPEC_SHORT = {"float16": "f16", "bfloat16": "bf16", "float64": "f64"}


@pytest.mark.parametrize("dtype,unit,frag_load", [("bfloat16", "HMMA", "LDSM"), ("float32", "HMMA", "LDS"),
                                                  ("float64", "DMMA", "LDS")])
def test_sass_has_tensor_core_instructions_and_async_copies(target, dtype, unit, frag_load):
    problem = SPEC.problem(4096, 4096, 4096, dtype, "TN")
    config = SPEC.default_config(problem, target)
    result = compile_source(render(SPEC, problem, config, target))
    assert result.failure is None
    sass = sass_or_skip(result.binary.cubin)
    assert re.search(rf"\b{unit}\.", sass), unit
    assert re.search(rf"\b{frag_load}\b|\b{frag_load}\.", sass)
    assert "LDGSTS" in sass                           # cp.async
    assert result.binary.resources["spill_stores"] == 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fp64_whole_tile_copies_need_no_zero_fill(target, layout):
    """UC=1 adds, for tiles wholly inside the matrices, copies with no zero fill (and none of
    the bounds arithmetic before them); UC=0 has only the zero-filling ones."""
    problem = SPEC.problem(4096, 4096, 4096, "float64", layout)
    space = SPEC.space(problem, target)
    tile = dict(BM=128, BN=64, BK=8, WM=64, WN=32, STAGES=4, VA=2, VB=2, GM=8, WK=1, MINB=1)
    whole = compile_source(render(SPEC, problem, space.config(**tile, UC=1), target, space))
    plain = compile_source(render(SPEC, problem, space.config(**tile, UC=0), target, space))
    assert whole.failure is None and plain.failure is None
    sass, plain_sass = sass_or_skip(whole.binary.cubin), sass_or_skip(plain.binary.cubin)
    assert re.search(r"LDGSTS\.E\.BYPASS\.128 ", sass) and "LDGSTS.E.BYPASS.128.ZFILL" in sass
    assert not re.search(r"LDGSTS\.E\.BYPASS\.128 ", plain_sass) and "LDGSTS.E.BYPASS.128.ZFILL" in plain_sass
    assert whole.binary.resources["spill_stores"] == 0


def _between_dmma(sass: str) -> list[str]:
    """Opcodes issued between two DMMAs of one run (fewer than 40 instructions apart)."""
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    at = [i for i, op in enumerate(ops) if op.startswith("DMMA")]
    return [op for a, b in zip(at, at[1:]) if b - a < 40 for op in ops[a + 1:b]]


def test_fp64_double_buffered_fragments_interleave_copies_with_dmma(target):
    """FB=2 issues the next stage's cp.async and fragment loads between the DMMAs of the step
    before; FB=1 issues every copy before a stage's DMMAs."""
    problem = SPEC.problem(4096, 4096, 4096, "float64", "NN")
    space = SPEC.space(problem, target)
    tile = dict(BM=64, BN=128, BK=16, WM=32, WN=32, STAGES=4, VA=2, VB=2, GM=8, WK=1, MINB=1, UC=0)
    ahead = compile_source(render(SPEC, problem, space.config(**tile, FB=2), target, space))
    plain = compile_source(render(SPEC, problem, space.config(**tile, FB=1), target, space))
    assert ahead.failure is None and plain.failure is None
    assert ahead.binary.resources["spill_stores"] == 0
    interleaved = _between_dmma(sass_or_skip(ahead.binary.cubin))
    plain_interleaved = _between_dmma(sass_or_skip(plain.binary.cubin))
    assert any(op.startswith("LDGSTS") for op in interleaved)
    assert not any(op.startswith("LDGSTS") for op in plain_interleaved)
    assert sum(op.startswith("LDS") for op in interleaved) >= 16


def _instructions(sass: str) -> int:
    return len(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?[A-Z]", sass))


def test_fp64_planned_copies_cut_instructions_and_whole_tiles_skip_zero_fill(target):
    """LP=1 works each thread's copy addresses and bounds out once (fewer instructions than
    LP=0); LP=2 adds copies of whole tiles with no zero fill (LDGSTS without .ZFILL)."""
    problem = SPEC.problem(4096, 4096, 4096, "float64", "NN")
    space = SPEC.space(problem, target)
    tile = dict(BM=64, BN=128, BK=16, WM=32, WN=32, STAGES=4, VA=2, VB=2, GM=8, WK=1, MINB=1, UC=0, FB=2)
    built = {lp: compile_source(render(SPEC, problem, space.config(**tile, LP=lp), target, space)) for lp in (0, 1, 2)}
    assert all(r.failure is None and r.binary.resources["spill_stores"] == 0 for r in built.values())
    sass = {lp: sass_or_skip(r.binary.cubin) for lp, r in built.items()}
    assert _instructions(sass[1]) < _instructions(sass[0])
    plain = r"LDGSTS\.E\.BYPASS(\.LTC128B)?\.128 "
    assert re.search(plain, sass[2]) and not re.search(plain, sass[1]) and not re.search(plain, sass[0])
    with pytest.raises(Exception, match="whole tiles"):
        space.config(**dict(tile, FB=1), LP=2)


def test_default_and_model_picks_by_tiles_per_sm(target):
    """The default is the largest tile with a tile for every SM; its 16-bit tiles of 64x64 or
    less take k tiles of 64; the picks add the next larger tile, which the rule passed over."""
    skinny = SPEC.problem(128, 4096, 4096, "bfloat16", "NN")
    default = SPEC.default_config(skinny, target)
    assert (default["BM"], default["BN"], default["BK"]) == (32, 64, 64)     # 256 tiles; 64x64 makes 128
    picks = SPEC.model_picks(skinny, target, 3)
    assert [p.name for p in picks[:1]] == [default.name]
    assert [(p["BM"], p["BN"], p["BK"]) for p in picks[1:]] == [(64, 64, 64)]
    assert SPEC.model_picks(skinny, target, 1) == [default]
    large = SPEC.problem(4096, 4096, 4096, "float16", "NN")
    assert [(p["BM"], p["BN"], p["BK"]) for p in SPEC.model_picks(large, target, 3)] == [(128, 128, 32)]
    f64 = SPEC.default_config(SPEC.problem(1000, 1000, 1000, "float64", "NN"), target)
    assert (f64["BM"], f64["BN"], f64["BK"]) == (64, 64, 16)      # 8-byte tiles keep k tiles of 16
