"""NVRTC compilation of the GEMM template for sm_90 (no GPU), the cubin cache, failures, SASS."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kgen.compile import CompilePool, compile_source, parse_resources
from kgen.kernels.gemm.dtypes import DTYPES
from kgen.kernels.gemm.problem import LAYOUTS, gemm_problem
from kgen.kernels.gemm.simt import GemmSimt
from kgen.problem import Target
from kgen.render import Source, render

from compiling import compile_cases, per_case, sass_or_skip

# 12 sampled configs of every dtype x layout (KGEN_TEST_COMPILES=full: 200)
PER_CASE = per_case(12, 200)
SPEC = GemmSimt()
CASES = [(d, l) for d in DTYPES for l in LAYOUTS]


@pytest.fixture(scope="module")
def target():
    t = Target.h200()
    assert t.arch == "sm_90"
    return t


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, target):
    """Every (dtype, layout) x PER_CASE sampled configs, compiled once through one pool of 2."""
    def jobs():
        for seed, (dtype, layout) in enumerate(CASES):
            problem = gemm_problem(1000, 1000, 1000, dtype, layout)
            space = SPEC.space(problem, target)
            for config in space.sample(PER_CASE, seed=seed):
                yield (dtype, layout), problem, config, render(SPEC, problem, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "GEMM")


@pytest.mark.parametrize("dtype,layout", CASES)
def test_sampled_gemm_configs_compile_for_sm90(compiled, dtype, layout):
    rows = compiled[(dtype, layout)]
    assert len(rows) >= PER_CASE
    assert len({c.name for _, c, _, _ in rows}) == len(rows)
    failed = [(c.name, r.failure.detail[:300]) for _, c, _, r in rows if r.failure is not None]
    assert not failed, failed
    short = DTYPES[dtype][4]
    for _, config, source, result in rows:
        b = result.binary
        assert config.name.startswith(f"gemm_simt_{short}_{layout.lower()}_")
        assert source.entry == config.name and source.arch == "sm_90"
        assert b.entry == config.name and b.arch == "sm_90" and b.source_digest == source.digest
        assert len(b.cubin) > 0 and b.cubin[:4] == b"\x7fELF", config.name
        assert config.name.encode() in b.cubin          # extern "C": the symbol is the name
        assert b.resources["registers"] > 0, (config.name, b.resources)


# ---------------------------------------------------------------- the cache

def _tiny_source(tag: str, body: str = "x[threadIdx.x] *= 2.f;") -> Source:
    code = f'extern "C" __global__ void {tag}(float* x) {{ {body} }}\n'
    return Source(code, tag, ("--std=c++17",), "sm_90", f"test-{tag}-{abs(hash(code)):x}")


def test_second_compile_is_a_cache_hit_with_the_same_bytes(target):
    problem = gemm_problem(256, 128, 64, "float32", "NT")
    config = SPEC.default_config(problem, target)
    source = render(SPEC, problem, config, target)
    first = compile_source(source)
    assert first.failure is None
    second = compile_source(source)
    assert second.cached and second.failure is None
    assert second.binary.cubin == first.binary.cubin
    assert second.binary.resources == first.binary.resources
    assert second.binary.path and Path(second.binary.path).is_file()


def test_a_corrupt_cache_entry_is_compiled_again(target):
    source = _tiny_source("kgen_test_corrupt")
    first = compile_source(source)
    assert first.failure is None and not first.cached
    meta = Path(first.binary.path).with_suffix(".json")
    meta.write_text("{not json")
    again = compile_source(source)
    assert not again.cached and again.failure is None
    assert again.binary.cubin == first.binary.cubin
    assert compile_source(source).cached     # and the entry was rewritten whole


def test_uncached_compile_leaves_no_cache_entry():
    source = _tiny_source("kgen_test_nocache")
    result = compile_source(source, use_cache=False)
    assert result.failure is None and not result.cached and result.binary.path == ""
    assert not compile_source(source).cached


def test_pool_of_two_compiles_the_same_as_in_process():
    sources = [_tiny_source(f"kgen_test_pool_{i}", f"x[threadIdx.x] += {i}.f;") for i in range(4)]
    with CompilePool(2) as pool:
        results = list(pool.map(sources))
    assert [r.binary.entry for r in results] == [s.entry for s in sources]
    for s, r in zip(sources, results):
        assert r.failure is None
        assert compile_source(s).binary.cubin == r.binary.cubin   # now a cache hit


# ---------------------------------------------------------------- failures are data

def test_a_broken_template_source_is_a_template_failure_with_its_source_saved(target):
    problem = gemm_problem(128, 128, 128)
    config = SPEC.default_config(problem, target)
    good = render(SPEC, problem, config, target)
    broken = Source(good.code.replace("ct_t acc", "ct_t acc = ;", 1) + "\nthis is not C++;\n",
                    good.entry, good.options, good.arch, good.digest + "-broken")
    result = compile_source(broken)
    assert result.binary is None and result.failure is not None
    assert result.failure.kind == "compile"
    assert result.failure.detail.startswith("template")
    m = re.search(r"source saved at (\S+)", result.failure.detail)
    assert m, result.failure.detail[-500:]
    saved = Path(m.group(1))
    assert saved.is_file() and "this is not C++" in saved.read_text()
    assert config.name in saved.name


def test_the_resource_report_says_where_ptxas_serialised_wgmma():
    log = ("ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized due\n"
           "ptxas info    : Used 168 registers, used 1 barriers\n"
           "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n")
    assert parse_resources(log) == {"registers": 168, "stack": 0, "spill_stores": 0, "spill_loads": 0,
                                    "wgmma_serialized": 1}
    assert "wgmma_serialized" not in parse_resources(log.split("\n", 1)[1])


def test_too_much_shared_memory_is_a_resources_failure():
    src = _tiny_source("kgen_test_smem",
                       "__shared__ float big[64 * 1024]; big[threadIdx.x] = x[0]; __syncthreads(); "
                       "x[threadIdx.x] = big[(threadIdx.x + 1) % 1024];")
    result = compile_source(src)
    assert result.binary is None
    assert result.failure.kind == "compile"
    assert result.failure.detail.startswith("resources"), result.failure.detail[:300]
    assert "source saved" not in result.failure.detail


# ---------------------------------------------------------------- SASS

def test_fp32_sass_uses_ffma_and_vector_shared_loads(target):
    problem = gemm_problem(1024, 1024, 1024, "float32", "NN")
    space = SPEC.space(problem, target)
    config = space.config(BM=128, BN=128, TM=8, TN=8, BK=8, VA=4, VB=4, DB=1, UNROLL=0, GM=1, SK=1, MINB=1)
    result = compile_source(render(SPEC, problem, config, target, space))
    assert result.failure is None
    sass = sass_or_skip(result.binary.cubin)
    assert config.name in sass
    assert re.search(r"\bFFMA\b", sass)
    assert "LDS.128" in sass


def test_nvrtc_output_never_lands_in_a_shared_bytes_object():
    """An empty NVRTC log is one NUL byte; fetched into ``b" " * 1`` (CPython's shared b" ")
    it turned every b" " of the process into b"\\0". Compiling with no log, then with a log,
    and fetching PTX must leave b" " alone."""
    from kgen.compile import _nvrtc_compile, compile_ptx

    quiet = Source('extern "C" __global__ void quiet() {}', "quiet", (), "sm_90", "quiet-log")
    space_byte = bytes([32])
    for source in (quiet, Source(quiet.code, "quiet", ("--std=c++17",), "sm_90", "quiet-log-2")):
        cubin, _log = _nvrtc_compile(source)
        assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"
        assert b" " == space_byte and b" " * 1 == space_byte
    assert ".entry quiet" in compile_ptx(quiet, "compute_90")
    assert b" " == space_byte and " ".join(["a", "b"]) == "a b"


def test_sass_without_a_disassembler_says_what_to_install(monkeypatch):
    from kgen import sass
    from kgen.errors import KgenError

    monkeypatch.setattr(sass, "disassembler", lambda: None)
    with pytest.raises(KgenError, match="no SASS disassembler") as err:
        sass.sass_of(b"\x7fELF")
    assert "nvidia-cuda-cuobjdump" in err.value.remedy


def test_rows_without_vector_stores_get_the_exchanging_epilogue(target):
    """N no multiple of the thread's column vector renders the epilogue whose lanes exchange
    values (C_TRANSPOSE: shuffles in the SASS) and compiles for every dtype; N a multiple of it
    renders no exchange."""
    from kgen.kernels.gemm.simt import transposed_stores

    for dtype in DTYPES:
        odd, even = gemm_problem(300, 1001, 70, dtype, "NN"), gemm_problem(300, 1000, 70, dtype, "NN")
        space = SPEC.space(odd, target)
        config = next(c for c in space.sample(200, seed=5) if transposed_stores(1001, space.full_values(c.as_dict())))
        source = render(SPEC, odd, config, target, space)
        assert "__shfl_sync" in source.code
        assert "__shfl_sync" not in render(SPEC, even, config, target, SPEC.space(even, target)).code
        result = compile_source(source)
        assert result.failure is None, (config.name, result.failure)
        if dtype == "float32":
            assert "SHFL.IDX" in sass_or_skip(result.binary.cubin)
