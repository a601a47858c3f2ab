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


@dataclass
class Staging:
    """Which operands a plan copies, and into what: ``stage[i]`` for A (0) and B (1)."""

    stage: tuple[bool, bool]
    shapes: tuple[tuple[int, int], tuple[int, int]]    # the storage (rows, cols) of A and B
    dtype: str
    kind: str                                           # the caller's array type: cai | torch | jax
    buffers: dict = field(default_factory=dict)          # (operand, device, stream) -> padded buffer
    lock: Any = field(default_factory=threading.Lock)

    @property
    def lds(self) -> tuple[int, int]:
        return tuple(padded_ld(cols, self.dtype) for _, cols in self.shapes)

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
                    rows, _ = self.shapes[i]
                    buf = self.buffers[key] = _empty(self.kind, like, (rows, self.lds[i]), self.dtype)
        return buf

    def _copy(self, i: int, x, transposed: bool, device: int, stream) -> int:
        cols = self.shapes[i][1]
        if self.kind == "torch":
            src = x.T if transposed else x
            buf = self._buffer(i, device, stream, x)
            buf[:, :cols].copy_(src.view(buf.dtype) if src.dtype != buf.dtype else src)
            return buf.data_ptr()
        import cupy

        arr = cupy.from_dlpack(x) if self.kind == "jax" else cupy.asarray(x)
        src = arr.T if transposed else arr
        buf = self._buffer(i, device, cupy.cuda.get_current_stream().ptr, None)
        if src.dtype != buf.dtype:
            src = src.view(buf.dtype)
        buf[:, :cols] = src
        return buf.data.ptr


def _empty(kind: str, like, shape, dtype: str):
    if kind == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    import cupy

    return cupy.empty(shape, dtype=cupy.uint16 if dtype == "bfloat16" else dtype)
