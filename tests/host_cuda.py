"""A rendered kernel run on the CPU, for checking a template's index arithmetic with no GPU.

The source is compiled by the host's C++ compiler (C++20) with a few definitions standing in
for CUDA's: each CUDA thread of a block is a std::thread, ``__syncthreads`` a std::barrier,
``__shared__`` a static (blocks run one after another), ``__ldg`` a plain load. Where the
compiler has UBSan's alignment check, a vector access at an address its type does not allow
aborts the run, as it would fault on the GPU. Only plain integer kernels of one grid
dimension are meant: no warp intrinsics, atomics or PTX.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

SHIM = r"""
#include <barrier>
#include <thread>
#include <vector>
struct kgen_host_dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local kgen_host_dim3 threadIdx, blockIdx;
static std::barrier<>* kgen_host_barrier;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(n)
#define __align__(n) alignas(n)
inline void __syncthreads() { kgen_host_barrier->arrive_and_wait(); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
"""

LAUNCH = r"""
extern "C" void kgen_host_launch(const void* x, void* out, unsigned grid, unsigned block) {
    std::barrier<> barrier(block);
    kgen_host_barrier = &barrier;
    for (unsigned g = 0; g < grid; ++g) {
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; ++t)
            threads.emplace_back([=] {
                threadIdx.x = t;
                blockIdx.x = g;
                ENTRY((const elem_t*)x, (elem_t*)out);
            });
        for (auto& th : threads)
            th.join();
    }
}
"""


def _compile(cxx: str, cpp: Path, library: Path) -> subprocess.CompletedProcess:
    """Compile ``cpp`` to ``library``, with UBSan's alignment check where the compiler has it."""
    base = [cxx, "-std=c++20", "-O1", "-w", "-shared", "-fPIC", "-pthread", str(cpp), "-o", str(library)]
    run = subprocess.run(base[:3] + ["-fsanitize=alignment", "-fno-sanitize-recover=all"] + base[3:],
                         capture_output=True, text=True)
    return run if run.returncode == 0 else subprocess.run(base, capture_output=True, text=True)


@functools.lru_cache(maxsize=None)
def compiler(folder: Path) -> str | None:
    """A host compiler that builds the stand-ins (C++20's std::barrier), or None."""
    for cxx in filter(None, (shutil.which("g++"), shutil.which("clang++"))):
        cpp = folder / "stand_ins.cpp"
        cpp.write_text(SHIM)
        if _compile(cxx, cpp, folder / "stand_ins.so").returncode == 0:
            return cxx
    return None


def build(source, folder: Path):
    """The kernel of ``source`` (a kgen Source whose kernel takes ``(const elem_t* x, elem_t* out)``)
    as a function ``launch(x_address, out_address, grid, block)``; the test is skipped where
    no host C++20 compiler is found."""
    cxx = compiler(folder)
    if cxx is None:
        pytest.skip("no host C++20 compiler (g++ or clang++ with std::barrier) to run kernels on the CPU")
    code = SHIM + source.code + LAUNCH.replace("ENTRY", source.entry)
    library = folder / f"{hashlib.sha256(code.encode()).hexdigest()[:16]}.so"
    if not library.exists():
        cpp = library.with_suffix(".cpp")
        cpp.write_text(code)
        run = _compile(cxx, cpp, library)
        assert run.returncode == 0, f"the host compile failed:\n{run.stderr[:3000]}"
    lib = ctypes.CDLL(str(library))
    lib.kgen_host_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    return lib.kgen_host_launch
