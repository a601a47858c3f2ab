"""The reduce kernels run on the CPU, for checking the template's logic with no GPU: rows
whose start is not vector-aligned, lane groups and their shuffles, the ticket and atomic
split forms (blocks run in a shuffled order, so any block may come last), argmax's first
index, NaN and Inf, and the workspace's counters left zeroed.

The rendered source is compiled by the host's C++ compiler (C++20, with ``_Float16``) with
definitions standing in for CUDA's: each CUDA thread of a block a std::thread,
``__syncthreads`` a block barrier, a warp shuffle a warp barrier around a shared slot,
atomics the compiler's atomics, ``__shared__`` a static (blocks run one after another).
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kgen.kernels.memory.reduce import STATE_BYTES, WORKSPACE_BYTES, Reduce, output_dtype_of, reduce_problem, \
    reference_reduce
from kgen.problem import Target
from kgen.render import render

SPEC = Reduce()

SHIM = r"""
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>
#include <algorithm>
struct kgen_host_dim3 { unsigned x = 0, y = 0, z = 0; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
thread_local kgen_host_dim3 threadIdx, blockIdx;
kgen_host_dim3 gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) alignas(n)
static std::barrier<>* kgen_host_block;
struct kgen_host_warp { std::unique_ptr<std::barrier<>> barrier; uint64_t slot[32]; };
static std::vector<kgen_host_warp>* kgen_host_warps;
inline void __syncthreads() { kgen_host_block->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <class T> inline T __shfl_xor_sync(unsigned, T value, int offset) {
    kgen_host_warp& w = (*kgen_host_warps)[threadIdx.x / 32];
    const unsigned lane = threadIdx.x % 32;
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    w.slot[lane] = bits;
    w.barrier->arrive_and_wait();
    bits = w.slot[lane ^ offset];
    w.barrier->arrive_and_wait();
    std::memcpy(&value, &bits, sizeof(T));
    return value;
}
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
template <class T> inline T __ldcg(const T* p) {
    T v; __atomic_load(p, &v, __ATOMIC_SEQ_CST); return v;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline float atomicAdd(float* p, float v) {
    unsigned* u = reinterpret_cast<unsigned*>(p);
    unsigned old = __atomic_load_n(u, __ATOMIC_SEQ_CST), sum;
    do { sum = __float_as_uint(__uint_as_float(old) + v); }
    while (!__atomic_compare_exchange_n(u, &old, sum, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return __uint_as_float(old);
}
template <class T> inline T atomicMax(T* p, T v) {
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return old;
}
template <class T> inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline float kgen_to_float(float x) { return x; }
inline float kgen_half_to_float(unsigned short h) { _Float16 f; std::memcpy(&f, &h, 2); return (float)f; }
inline unsigned short kgen_float_to_half(float f) {
    _Float16 h = (_Float16)f; unsigned short r; std::memcpy(&r, &h, 2); return r;
}
inline float kgen_bf16_to_float(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
inline unsigned short kgen_float_to_bf16(float f) {
    if (f != f) return 0x7FC0;
    const unsigned b = __float_as_uint(f);
    return (unsigned short)((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}
"""

LAUNCH = r"""
extern "C" void kgen_host_launch(const void* x, void* out, unsigned* workspace, long long rows, long long cols,
                                 unsigned grid_x, unsigned grid_y, unsigned block, unsigned seed) {
    gridDim = {grid_x, grid_y, 1};
    std::vector<std::pair<unsigned, unsigned>> order;
    for (unsigned y = 0; y < grid_y; ++y)
        for (unsigned g = 0; g < grid_x; ++g) order.push_back({g, y});
    std::mt19937 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    for (auto [bx, by] : order) {
        std::barrier<> barrier(block);
        kgen_host_block = &barrier;
        std::vector<kgen_host_warp> warps(block / 32);
        for (auto& w : warps) w.barrier = std::make_unique<std::barrier<>>(32);
        kgen_host_warps = &warps;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; ++t)
            threads.emplace_back([=] {
                threadIdx.x = t;
                blockIdx.x = bx;
                blockIdx.y = by;
                ENTRY((const IN_T*)x, (OUT_T*)out, workspace, rows, cols);
            });
        for (auto& th : threads) th.join();
    }
}
"""

# (op, dtype, rows, cols, config values): every strategy, lane counts, vectors and ITEMS > 1
CASES = [
    ("sum", "float32", 3, 5003, dict(STRATEGY="split", BLOCK=64, VEC=4, ITEMS=2, SPLIT=8)),
    ("sum", "float16", 2, 3001, dict(STRATEGY="split_atomic", BLOCK=64, VEC=8, ITEMS=1, SPLIT=4)),
    ("mean", "bfloat16", 9, 1001, dict(STRATEGY="block", BLOCK=128, VEC=8, ITEMS=1, SPLIT=1)),
    ("mean", "float32", 37, 67, dict(STRATEGY="warp", LANES=8, BLOCK=64, VEC=4, ITEMS=2, SPLIT=1)),
    ("max", "float32", 70, 3, dict(STRATEGY="warp", LANES=1, BLOCK=64, VEC=2, ITEMS=1, SPLIT=1)),
    ("max", "bfloat16", 2, 4099, dict(STRATEGY="split_atomic", BLOCK=64, VEC=8, ITEMS=1, SPLIT=8)),
    ("min", "float16", 11, 300, dict(STRATEGY="warp", LANES=32, BLOCK=64, VEC=8, ITEMS=1, SPLIT=1)),
    ("min", "float32", 3, 2000, dict(STRATEGY="split_atomic", BLOCK=64, VEC=4, ITEMS=1, SPLIT=4)),
    ("argmax", "bfloat16", 7, 4097, dict(STRATEGY="split", BLOCK=64, VEC=8, ITEMS=2, SPLIT=4)),
    ("argmax", "float16", 2, 3000, dict(STRATEGY="split_atomic", BLOCK=64, VEC=4, ITEMS=1, SPLIT=8)),
    ("argmax", "float32", 9, 1003, dict(STRATEGY="block", BLOCK=64, VEC=4, ITEMS=2, SPLIT=1)),
    ("argmax", "float16", 40, 33, dict(STRATEGY="warp", LANES=4, BLOCK=64, VEC=2, ITEMS=2, SPLIT=1)),
]


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    probe = tmp_path_factory.mktemp("probe") / "probe.cpp"
    probe.write_text("#include <barrier>\nint main() { _Float16 h = (_Float16)1.5f; return (int)(float)h - 1; }\n")
    if subprocess.run([cxx, "-std=c++20", str(probe), "-o", str(probe.with_suffix(""))],
                      capture_output=True).returncode:
        pytest.skip(f"{cxx} has no C++20 <barrier> or no _Float16")
    return cxx, tmp_path_factory.mktemp("reduce-host")


def _config(problem, values):
    return SPEC.space(problem, Target.h200()).config(**{"LANES": 32, **values})


def _build(compiler, problem, config):
    cxx, folder = compiler
    code = render(SPEC, problem, config, Target.h200()).code
    start, end = code.index("// kgen: storage <-> compute"), code.index("// kgen: vector loads")
    out = output_dtype_of(problem["op"], problem["dtype"])
    code = SHIM + code[:start] + code[end:] + LAUNCH.replace("ENTRY", config.name).replace(
        "IN_T", "float" if problem["dtype"] == "float32" else "unsigned short").replace(
        "OUT_T", {"float32": "float", "int64": "long long"}.get(out, "unsigned short"))
    path = folder / f"{hashlib.sha256(code.encode()).hexdigest()[:16]}.cpp"
    path.write_text(code)
    result = subprocess.run([cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", str(path), "-o",
                             str(path.with_suffix(".so"))], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[:3000]
    return path.with_suffix(".so")


@pytest.fixture(scope="module")
def built(compiler):
    cases = [(reduce_problem(op, rows, cols, dtype), values) for op, dtype, rows, cols, values in CASES]
    with ThreadPoolExecutor(2) as pool:
        futures = [(p, _config(p, v), pool.submit(_build, compiler, p, _config(p, v))) for p, v in cases]
        return [(p, c, f.result()) for p, c, f in futures]


def _encode(values, dtype):
    if dtype == "bfloat16":
        bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)
    return np.asarray(values, dtype=dtype)


def _decode(array, dtype):
    if dtype == "bfloat16":
        return (array.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return array.astype(np.float64)


def _values(problem, rng, special: bool):
    rows, cols, op = problem["rows"], problem["cols"], problem["op"]
    if op in ("sum", "mean"):
        x = rng.uniform(0.1, 1.0, (rows, cols))
    else:
        x = np.round(rng.uniform(-1, 1, (rows, cols)) * 16) / 16          # many ties
    if special:
        x[0, min(3, cols - 1)] = x[0, cols - 1] = np.nan
        x[1 % rows, cols // 2] = np.inf
        x[(2 % rows), 0], x[2 % rows, cols - 1] = -np.inf, np.inf
        if rows > 3:
            x[3, :] = -np.inf
        if rows > 4:
            x[4, cols - 1] = np.nan
    return x


def _run(so, problem, config, values, offset: int, seed: int):
    rows, cols, dtype = problem["rows"], problem["cols"], problem["dtype"]
    x = _encode(values, dtype).reshape(-1)
    buffer = np.zeros(x.size + 64, dtype=x.dtype)
    first = (-(buffer.ctypes.data // x.itemsize)) % (64 // x.itemsize) + offset   # `offset` past a 64-byte line
    view = buffer[first:first + x.size]
    view[:] = x
    out_dtype = output_dtype_of(problem["op"], dtype)
    out = np.full(rows, -1, np.int64) if out_dtype == "int64" else _encode(np.full(rows, np.nan), dtype)
    workspace = np.zeros(WORKSPACE_BYTES // 4, np.uint32)
    launch = ctypes.CDLL(str(so)).kgen_host_launch
    launch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_longlong] * 2 + [ctypes.c_uint] * 4
    geo = SPEC.launch(problem, config)
    launch(view.ctypes.data, out.ctypes.data, workspace.ctypes.data, rows, cols, geo.grid[0], geo.grid[1],
           geo.block[0], seed)
    assert not workspace[:STATE_BYTES // 4].any(), f"{config.name} left the counters dirty"
    return out if out_dtype == "int64" else _decode(out, dtype)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}-{c[1]}-{c[4]['STRATEGY']}" for c in CASES])
def test_kernel_on_the_host_matches_the_reference(built, case):
    problem, config, so = built[case]
    rng = np.random.default_rng(case)
    for special in (False, True):
        for offset in (0, 1, 3):
            values = _values(problem, rng, special)
            got = _run(so, problem, config, values, offset, seed=offset + 7 * case)
            with np.errstate(invalid="ignore"):
                want = reference_reduce(np, _decode(_encode(values, problem["dtype"]), problem["dtype"]),
                                        problem["op"])
            where = f"{config.name} on {problem.key}, offset {offset}, special {special}"
            if problem["op"] == "argmax":
                assert np.array_equal(got, want), f"{where}: {got} != {want}"
                continue
            assert np.array_equal(np.isnan(got), np.isnan(want)), where
            finite = np.isfinite(want)
            assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)]), where
            err = np.abs(got[finite] - want[finite]).max(initial=0) / max(np.abs(want[finite]).max(initial=0), 1.0)
            assert err <= SPEC.output_tolerance(problem, "out"), f"{where}: error {err}"
