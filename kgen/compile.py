"""Source -> Binary through NVRTC for an explicit arch, with an on-disk cubin cache.

NVRTC runs with no GPU present, so CI compiles every template. The cubin comes from
``cuda.bindings.nvrtc`` (whole; see DESIGN.md). Compile failures are data:
``Failure("compile", ...)``; a failure that is not about resources saves the source so
the template bug can be read.

>>> from kgen.render import Source

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor
>>> src = Source('extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.f; }',
...              "twice", ("--std=c++17",), "sm_90", "doctest-twice")
>>> result = compile_source(src, use_cache=False)
>>> result.binary.entry, result.binary.resources["registers"] > 0
('twice', True)
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from kgen.knobs import knobs
from kgen.toolkit import nvrtc_version  # noqa: F401  (the compiler's version, named with it)
from kgen.measurement import Failure
from kgen.render import Source

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

_RESOURCE_PATTERNS = ("too much shared data", "too much local data", "uses too much",
                      "insufficient register", "out of memory", "exceeds")


@dataclass(frozen=True)
class Binary:
    cubin: bytes
    entry: str
    source_digest: str
    arch: str
    resources: dict = field(default_factory=dict)   # registers, spill_stores, spill_loads, stack
    path: str = ""                                    # cached cubin file, when cached


@dataclass(frozen=True)
class CompileResult:
    binary: Binary | None
    failure: Failure | None
    seconds: float = 0.0
    cached: bool = False


@lru_cache(maxsize=1)
def _include_options() -> tuple[str, ...]:
    """-I for the CUDA runtime headers (cuda_fp16.h, ...) when the wheel is installed."""
    try:
        from cuda import pathfinder

        folder = pathfinder.find_nvidia_header_directory("cudart")
    except Exception:
        folder = None
    return (f"--include-path={folder}",) if folder else ()


def _cache_path(source: Source) -> Path:
    return knobs.cache_dir / source.digest[:2] / f"{source.digest}-nvrtc{nvrtc_version()}.cubin"


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


_RES = {
    "registers": re.compile(r"Used (\d+) registers"),
    "stack": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "smem_static": re.compile(r"(\d+) bytes smem"),
}


# ptxas's notice that it made wgmma instructions wait for each other (C7510-C7520)
_WGMMA_SERIALIZED = re.compile(r"wgmma\.mma_async instructions are serialized")


def parse_resources(log: str) -> dict:
    """Registers, stack and spills from ptxas's verbose report; ``wgmma_serialized`` 1 where
    ptxas serialised wgmma instructions (a performance loss it reports, not an error)."""
    out = {}
    for key, pattern in _RES.items():
        m = pattern.search(log)
        if m:
            out[key] = int(m.group(1))
    if _WGMMA_SERIALIZED.search(log):
        out["wgmma_serialized"] = 1
    return out


def _classify(log: str) -> str:
    low = log.lower()
    return "resources" if any(p in low for p in _RESOURCE_PATTERNS) else "template"


def _save_failed_source(source: Source, log: str) -> Path:
    folder = knobs.home / "failed_sources"
    path = folder / f"{source.entry}-{source.digest[:12]}.cu"
    _write_atomic(path, (source.code + "\n/* NVRTC log:\n" + log.replace("*/", "* /") + "\n*/\n").encode())
    return path


def _out_buffer(size: int) -> bytearray:
    """A writable buffer for NVRTC to fill. Never a bytes object: bytes are immutable, and
    ``b" " * 1`` is the interpreter's shared one-byte b" ", which NVRTC's terminating NUL
    would overwrite for the whole process (an empty log has size 1)."""
    return bytearray(size)


def _nvrtc_compile(source: Source) -> tuple[bytes | None, str]:
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.code.encode(), f"{source.entry}.cu".encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return None, f"nvrtcCreateProgram: {err}"
    try:
        opts = [*source.options, f"--gpu-architecture={source.arch}", "-Xptxas=-v",
                *_include_options()]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = _out_buffer(size)
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.rstrip(b"\0").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None, log or str(status)
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = _out_buffer(size)
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        return bytes(cubin), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_ptx(source: Source, virtual_arch: str) -> str:
    """PTX of a source for a virtual arch (``compute_90``): what newer GPUs JIT-compile.

    Raises CompileError when NVRTC rejects the source (call it on sources that compiled).
    """
    from cuda.bindings import nvrtc

    from kgen.errors import CompileError

    err, prog = nvrtc.nvrtcCreateProgram(source.code.encode(), f"{source.entry}.cu".encode(), 0, [], [])
    try:
        opts = [*source.options, f"--gpu-architecture={virtual_arch}", *_include_options()]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"{source.entry} did not compile to PTX for {virtual_arch}",
                               remedy="compile it to a cubin first to see the log")
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = _out_buffer(size)
        nvrtc.nvrtcGetPTX(prog, ptx)
        return ptx.rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_source(source: Source, use_cache: bool = True) -> CompileResult:
    """Compile one source (cache first). Never raises for a bad kernel: see ``failure``."""
    start = time.perf_counter()
    path = _cache_path(source)
    meta_path = path.with_suffix(".json")
    if use_cache and path.is_file() and meta_path.is_file():
        try:
            resources = json.loads(meta_path.read_text())
            binary = Binary(path.read_bytes(), source.entry, source.digest, source.arch, resources, str(path))
            return CompileResult(binary, None, time.perf_counter() - start, cached=True)
        except (OSError, ValueError):
            pass  # a damaged entry is compiled again and overwritten
    cubin, log = _nvrtc_compile(source)
    seconds = time.perf_counter() - start
    if cubin is None:
        kind = _classify(log)
        detail = f"{kind}: {log.strip()[-2000:]}"
        if kind == "template":
            detail += f"\nsource saved at {_save_failed_source(source, log)}"
        return CompileResult(None, Failure("compile", detail), seconds)
    resources = parse_resources(log)
    stored = ""
    if use_cache:
        _write_atomic(path, cubin)
        _write_atomic(meta_path, json.dumps(resources).encode())
        stored = str(path)
    return CompileResult(Binary(cubin, source.entry, source.digest, source.arch, resources, stored),
                         None, seconds)


class CompilePool:
    """A pool of spawned processes compiling many sources at once (cache hits stay local)."""

    def __init__(self, workers: int | None = None):
        import multiprocessing

        self.workers = workers or knobs.compile_workers
        self._pool = None
        self._ctx = multiprocessing.get_context("spawn")

    def _executor(self) -> ProcessPoolExecutor:
        from concurrent.futures import ProcessPoolExecutor

        if self._pool is None:
            from kgen.lifetime import exit_with_parent

            self._pool = ProcessPoolExecutor(self.workers, mp_context=self._ctx, initializer=exit_with_parent)
        return self._pool

    def submit(self, source: Source):
        """A future of CompileResult."""
        from concurrent.futures import Future

        if _cache_path(source).is_file():
            fut: Future = Future()
            fut.set_result(compile_source(source))
            return fut
        if self.workers <= 1:
            fut = Future()
            fut.set_result(compile_source(source))
            return fut
        return self._executor().submit(compile_source, source)

    def map(self, sources: Iterable[Source]) -> Iterator[CompileResult]:
        futures = [self.submit(s) for s in sources]
        for f in futures:
            yield f.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
