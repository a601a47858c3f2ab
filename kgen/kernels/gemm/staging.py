"""Operands TMA cannot read, copied into a workspace of padded rows for the Hopper family.

TMA reads rows whose stride (and start) is a multiple of 16 bytes. An operand of an odd
leading dimension (K = 1001 in bfloat16, say) fails that, and without help the request goes
to the portable family's narrow loads. Staging copies such an operand, once per call, into
a buffer whose rows are padded to 16 bytes, and runs the Hopper kernel on the buffer: the
same problem with the operand's alignment raised. The copy's cost (its bytes read and
written at the device's copy rate, plus a launch) is added to that candidate's time, so a
call takes the staged Hopper kernel only where it wins after paying for the copy.

Buffers live in the call plan, one per stream (two streams never share one), and are
reused by every later call of the plan.

>>> padded_ld(1001, "bfloat16"), padded_ld(1000, "float32"), padded_ld(7, "float32")
(1008, 1000, 8)
>>> 0.005 < copy_ms(rows=4096, cols=1001, itemsize=2) < 0.02
True
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

from kgen.kernels.gemm.rules import storage_shape
from kgen.kernels.gemm.dtypes import ITEMSIZE as _ITEMSIZE
from kgen.knobs import knobs

TMA_BYTES = 16


def padded_ld(cols: int, dtype: str) -> int:
    """The row stride (elements) of a staged operand: ``cols`` rounded up to 16 bytes."""
    per = TMA_BYTES // _ITEMSIZE[dtype]
    return max(per, math.ceil(cols / per) * per)



def copy_ms(rows: int, cols: int, itemsize: int) -> float:
    """Predicted time of staging one operand: its bytes read and written at the copy rate,
    plus a launch."""
    return 2.0 * rows * cols * itemsize / (knobs.staging_copy_gbs * 1e9) * 1e3 + knobs.staging_launch_us * 1e-3


def staging_ms(m: int, n: int, k: int, layout: str, dtype: str, stage: tuple[bool, bool]) -> float:
    """Predicted time of staging the operands ``stage`` names (A, B) of an m x n x k problem."""
    return sum(copy_ms(*storage_shape(m, n, k, layout, operand), _ITEMSIZE[dtype])
               for operand, staged in zip("ab", stage) if staged)


def output_staged(rows: int, cols: int, ldc: int, out_dtype: str, ptr: int = 0) -> bool:
    """Whether a Hopper kernel storing by TMA writes C through a padded buffer: C's rows (or its
    first element, at ``ptr``) are not 16-byte aligned (TMA cannot store them, and the kernel's
    fallback writes 2- or 4-byte values from registers: 0.35-0.5 TB/s on an H100, where the copy
    back runs at the copy rate) and C holds at least KGEN_STAGING_C_MIN_BYTES. The caller asks
    only where N's own rows are aligned: a kernel built for rows that are not writes them itself
    (``GemmWgmma.rows_by_band``).

    >>> output_staged(4096, 1001, 1001, "float16"), output_staged(4096, 1000, 1000, "float16")
    (True, False)
    >>> output_staged(64, 1001, 1001, "float16")         # 128 KB: the copy's launch costs more
    False
    """
    size = _ITEMSIZE[out_dtype]
    unaligned = (ldc * size) % TMA_BYTES != 0 or ptr % TMA_BYTES != 0
    return unaligned and rows > 1 and rows * cols * size >= knobs.staging_c_min_bytes


@dataclass
class Staging:
    """Which operands a plan copies, and into what: ``stage[i]`` for A (0) and B (1); ``out``
    (rows, cols, dtype) where C is written into padded rows and copied back after the kernel."""

    stage: tuple[bool, bool]
    shapes: tuple[tuple[int, int], tuple[int, int]]    # the storage (rows, cols) of A and B
    dtype: str
    kind: str                                           # the caller's array type: cai | torch | jax
    out: tuple[int, int, str] | None = None
    buffers: dict = field(default_factory=dict)          # (operand, device, stream) -> padded buffer
    lock: Any = field(default_factory=threading.Lock)

    @property
    def lds(self) -> tuple[int, int]:
        return tuple(padded_ld(cols, self.dtype) for _, cols in self.shapes)

    @property
    def ldc(self) -> int:
        """The row stride (elements) of C's padded buffer."""
        return padded_ld(self.out[1], self.out[2])

    @property
    def label(self) -> str:
        """The staged arrays: "a", "b", "c" in that order ("" for none)."""
        return "".join(x for x, on in zip("abc", (*self.stage, self.out is not None)) if on)

    def output_in(self, c, pc: int, ldc: int, beta: float, device: int, stream) -> int:
        """The pointer the kernel writes C to: the padded buffer, holding C's values where the
        kernel reads them (``beta`` not 0)."""
        rows, cols, dtype = self.out
        ptr = self._output_buffer(c, device, stream)
        if beta:
            stage_rows(pc, ldc, ptr, self.ldc, rows, cols, _ITEMSIZE[dtype], stream)
        return ptr

    def output_back(self, c, pc: int, ldc: int, device: int, stream) -> None:
        """C's padded buffer copied into C (after the kernel, on the same stream)."""
        rows, cols, dtype = self.out
        unstage_rows(self._output_buffer(c, device, stream), self.ldc, pc, ldc, rows, cols, _ITEMSIZE[dtype], stream)

    def _output_buffer(self, c, device: int, stream) -> int:
        buf = self._buffer(2, device, _stream_key(stream), c)
        return buf.data_ptr() if self.kind == "torch" else buf.data.ptr

    def cost_ms(self) -> float:
        return sum(copy_ms(rows, cols, _ITEMSIZE[self.dtype])
                   for staged, (rows, cols) in zip(self.stage, self.shapes) if staged)

    def pointers(self, a, b, pa: int, pb: int, layout: str, device: int, stream) -> tuple[int, int]:
        """Copy the staged operands into their buffers (on the call's stream); the pointers
        the kernel reads."""
        out = [pa, pb]
        for i, x in enumerate((a, b)):
            if self.stage[i]:
                out[i] = self._copy(i, x, layout[i] == "T", device, stream)
        return out[0], out[1]

    def _buffer(self, i: int, device: int, stream, like):
        key = (i, device, stream)
        buf = self.buffers.get(key)
        if buf is None:
            with self.lock:
                buf = self.buffers.get(key)
                if buf is None:
                    if i == 2:
                        shape, dtype = (self.out[0], self.ldc), self.out[2]
                    else:
                        shape, dtype = (self.shapes[i][0], self.lds[i]), self.dtype
                    buf = self.buffers[key] = _empty(self.kind, like, shape, dtype)
        return buf

    def _copy(self, i: int, x, transposed: bool, device: int, stream) -> int:
        rows, cols = self.shapes[i]
        size = _ITEMSIZE[self.dtype]
        if self.kind == "torch":
            src = x.T if transposed else x
            buf = self._buffer(i, device, _stream_key(stream), x)
            (src_ld, step), ptrs = src.stride(), (src.data_ptr(), buf.data_ptr(), buf.stride(0))
        else:
            import cupy

            arr = cupy.from_dlpack(x) if self.kind == "jax" else cupy.asarray(x)
            src = arr.T if transposed else arr
            buf = self._buffer(i, device, _stream_key(stream), None)
            (src_ld, step), ptrs = (n // size for n in src.strides), (src.data.ptr, buf.data.ptr, buf.strides[0] // size)
        if step == 1 and src_ld >= cols:          # rows contiguous, as a GEMM operand's are
            stage_rows(ptrs[0], src_ld, ptrs[1], ptrs[2], rows, cols, size, stream)
        elif self.kind == "torch":
            buf[:, :cols].copy_(src.view(buf.dtype) if src.dtype != buf.dtype else src)
        else:
            buf[:, :cols] = src.view(buf.dtype) if src.dtype != buf.dtype else src
        return ptrs[1]


# rows of a (rows x cols) source whose rows are contiguous, at any element offset, copied into
# rows of a 16-byte-aligned stride: each thread writes one 16-byte vector of a row (zeros past
# cols) from scalar loads a warp reads contiguously; rows over the grid's y (a stride past 65535)
_STAGE_ROWS = r"""
template <typename T>
__device__ __forceinline__ void stage_rows(const T* __restrict__ src, long long src_ld, T* __restrict__ dst,
                                           long long dst_ld, int rows, int cols) {
  constexpr int V = 16 / sizeof(T);
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  const int c0 = v * V;
  if (c0 >= cols) return;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* s = src + (long long)r * src_ld + c0;
    union { uint4 u; T e[V]; } out;
    if (c0 + V <= cols) {
#pragma unroll
      for (int j = 0; j < V; ++j) out.e[j] = s[j];
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) out.e[j] = c0 + j < cols ? s[j] : T(0);
    }
    *reinterpret_cast<uint4*>(dst + (long long)r * dst_ld + c0) = out.u;
  }
}
// the way back: a block's 16-byte vectors of a padded row through shared memory, then written
// to the destination row (any element offset) by lanes at consecutive elements
template <typename T>
__device__ __forceinline__ void unstage_rows(const T* __restrict__ src, long long src_ld, T* __restrict__ dst,
                                             long long dst_ld, int rows, int cols) {
  constexpr int V = 16 / sizeof(T);
  __shared__ __align__(16) T tile[128 * V];
  const int base = blockIdx.x * 128 * V;
  const int c0 = base + threadIdx.x * V;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    if (c0 < cols)
      *reinterpret_cast<uint4*>(&tile[threadIdx.x * V]) =
          *reinterpret_cast<const uint4*>(src + (long long)r * src_ld + c0);
    __syncthreads();
    T* d = dst + (long long)r * dst_ld + base;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int c = j * 128 + threadIdx.x;
      if (base + c < cols) d[c] = tile[c];
    }
    __syncthreads();
  }
}
extern "C" __global__ void __launch_bounds__(128) kgen_unstage_rows2(const unsigned short* src, long long src_ld,
                                                                     unsigned short* dst, long long dst_ld, int rows,
                                                                     int cols) {
  unstage_rows<unsigned short>(src, src_ld, dst, dst_ld, rows, cols);
}
extern "C" __global__ void __launch_bounds__(128) kgen_unstage_rows4(const unsigned int* src, long long src_ld,
                                                                     unsigned int* dst, long long dst_ld, int rows,
                                                                     int cols) {
  unstage_rows<unsigned int>(src, src_ld, dst, dst_ld, rows, cols);
}
extern "C" __global__ void kgen_stage_rows2(const unsigned short* src, long long src_ld, unsigned short* dst,
                                            long long dst_ld, int rows, int cols) {
  stage_rows<unsigned short>(src, src_ld, dst, dst_ld, rows, cols);
}
extern "C" __global__ void kgen_stage_rows4(const unsigned int* src, long long src_ld, unsigned int* dst,
                                            long long dst_ld, int rows, int cols) {
  stage_rows<unsigned int>(src, src_ld, dst, dst_ld, rows, cols);
}
"""
_STAGE_THREADS = 128              # the unstage kernel's shared tile assumes 128
_KERNELS: dict[tuple[int, str], Any] = {}


def stage_rows(src: int, src_ld: int, dst: int, dst_ld: int, rows: int, cols: int, itemsize: int,
               stream: int | None = None) -> None:
    """Copy ``rows`` rows of ``cols`` elements of ``itemsize`` bytes (2 or 4) from ``src`` (a
    row every ``src_ld`` elements) into ``dst`` (a row every ``dst_ld`` elements, a multiple of
    16 bytes, as is ``dst``), the rest of each destination row's last 16 bytes zeroed; on
    ``stream`` (a cudaStream_t), else CuPy's current stream."""
    _launch(f"kgen_stage_rows{itemsize}", src, src_ld, dst, dst_ld, rows, cols, itemsize, stream)


def unstage_rows(src: int, src_ld: int, dst: int, dst_ld: int, rows: int, cols: int, itemsize: int,
                 stream: int | None = None) -> None:
    """``stage_rows`` the other way: from 16-byte aligned rows (``src``, ``src_ld``) into rows
    at any element offset and stride; nothing of ``dst`` past each row's ``cols`` is written."""
    _launch(f"kgen_unstage_rows{itemsize}", src, src_ld, dst, dst_ld, rows, cols, itemsize, stream)


def _launch(name: str, src: int, src_ld: int, dst: int, dst_ld: int, rows: int, cols: int, itemsize: int,
            stream: int | None) -> None:
    import cupy

    device = cupy.cuda.Device().id
    kernel = _KERNELS.get((device, name))
    if kernel is None:
        module = cupy.RawModule(code=_STAGE_ROWS, options=("-std=c++17",))
        for other in ("kgen_stage_rows2", "kgen_stage_rows4", "kgen_unstage_rows2", "kgen_unstage_rows4"):
            _KERNELS[(device, other)] = module.get_function(other)
        kernel = _KERNELS[(device, name)]
    per = 16 // itemsize
    grid = (math.ceil(math.ceil(cols / per) / _STAGE_THREADS), min(rows, 65535))
    args = (cupy.uint64(src), cupy.int64(src_ld), cupy.uint64(dst), cupy.int64(dst_ld), cupy.int32(rows),
            cupy.int32(cols))
    if stream is None:
        kernel(grid, (_STAGE_THREADS,), args)
    else:
        with cupy.cuda.ExternalStream(stream, device):
            kernel(grid, (_STAGE_THREADS,), args)


def _stream_key(stream) -> int:
    """The stream a buffer belongs to: the caller's (PyTorch's, given), else CuPy's current one."""
    if stream is not None:
        return stream
    import cupy

    return cupy.cuda.get_current_stream().ptr


def _empty(kind: str, like, shape, dtype: str):
    if kind == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    import cupy

    return cupy.empty(shape, dtype=cupy.uint16 if dtype == "bfloat16" else dtype)
