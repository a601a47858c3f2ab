"""The driver's tensor-map encoders (``cuTensorMapEncodeTiled``, ``cuTensorMapEncodeIm2col``
through ``cuda-bindings``) and the 128-byte record a kernel receives.

Depends on NumPy and ``cuda-bindings`` only (loaded on first use): ``kgen export`` copies
this file into exported packages, which encode their maps at call time. ``kgen.tma`` adds
the rules, the cache and kgen's typed errors on top.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

#: the record a kernel receives: 16 little-endian 64-bit words, 64-byte aligned
TMA_DESC_DTYPE = np.dtype([("words", "<u8", (16,))], align=True)
EMPTY_DESC = np.zeros((), TMA_DESC_DTYPE)[()]     # the argument of an operand no map describes

#: element size of the dtypes a tensor map can describe here
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "uint16": 2,
                 "uint8": 1, "int8": 1, "int32": 4, "uint32": 4}


class EncodeError(RuntimeError):
    """The driver could not be called, or refused the encoding (the message says which)."""


def words_to_desc(words: Sequence[int]) -> np.void:
    """A ``numpy.void`` TmaDesc record from 16 64-bit words."""
    rec = np.zeros((), dtype=TMA_DESC_DTYPE)
    rec["words"] = np.asarray(list(words), dtype=np.uint64)
    return rec[()]


def driver():
    """``cuda.bindings.driver``; EncodeError where cuda-bindings is not installed."""
    try:
        from cuda.bindings import driver as drv
    except ImportError as exc:
        raise EncodeError("cuda-bindings is not installed: tensor maps need the driver's encoders "
                          "(pip install cuda-bindings)") from exc
    return drv


def _data_type(drv, dtype: str):
    kinds = drv.CUtensorMapDataType
    return {"float16": kinds.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, "bfloat16": kinds.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            "uint16": kinds.CU_TENSOR_MAP_DATA_TYPE_UINT16, "float32": kinds.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            "float64": kinds.CU_TENSOR_MAP_DATA_TYPE_FLOAT64, "uint8": kinds.CU_TENSOR_MAP_DATA_TYPE_UINT8,
            "int8": kinds.CU_TENSOR_MAP_DATA_TYPE_UINT8, "int32": kinds.CU_TENSOR_MAP_DATA_TYPE_INT32,
            "uint32": kinds.CU_TENSOR_MAP_DATA_TYPE_UINT32}[dtype]


def _swizzle(drv, swizzle_bytes: int):
    spans = drv.CUtensorMapSwizzle
    return {0: spans.CU_TENSOR_MAP_SWIZZLE_NONE, 32: spans.CU_TENSOR_MAP_SWIZZLE_32B,
            64: spans.CU_TENSOR_MAP_SWIZZLE_64B, 128: spans.CU_TENSOR_MAP_SWIZZLE_128B}[swizzle_bytes]


def encode_call(drv, data_type, ptr, dims, strides, box, swizzle):
    """The driver call of a tiled map of rank len(dims) (zero fill out of bounds, 256-byte L2
    promotion); ``strides`` in bytes, one per dimension past the first."""
    return drv.cuTensorMapEncodeTiled(
        data_type, len(dims), ptr,
        [drv.cuuint64_t(d) for d in dims],
        [drv.cuuint64_t(s) for s in strides],
        [drv.cuuint32_t(b) for b in box],
        [drv.cuuint32_t(1) for _ in dims],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)   # NONE = zeros


def encode_tiled(ptr: int, dtype: str, dims: Sequence[int], row_stride_bytes: int, box: Sequence[int],
                 swizzle_bytes: int, call=encode_call, batch_stride_bytes: int = 0) -> np.void:
    """A 2-D tiled map as a TmaDesc record (3-D ``dims``: a batch of such matrices,
    ``batch_stride_bytes`` apart, boxes of one matrix), with no checks of TMA's rules
    (``kgen.tma`` checks them first); EncodeError where the driver cannot be called or refuses."""
    drv = driver()
    strides = [row_stride_bytes] + ([batch_stride_bytes] if len(dims) == 3 else [])
    box = list(box) + [1] * (len(dims) - len(box))
    try:
        err, tmap = call(drv, _data_type(drv, dtype), ptr, dims, strides, box, _swizzle(drv, swizzle_bytes))
    except Exception as exc:   # no libcuda (no driver on this machine), or a binding error
        raise EncodeError(f"cannot call cuTensorMapEncodeTiled: {type(exc).__name__}: {exc}") from None
    if err != drv.CUresult.CUDA_SUCCESS:
        raise EncodeError(f"cuTensorMapEncodeTiled refused a {dtype} {tuple(dims)} map at {ptr:#x} "
                          f"(strides {strides} B, box {tuple(box)}, swizzle {swizzle_bytes}): {err}")
    return words_to_desc(int(w) for w in tmap.opaque)


def encode_im2col(ptr: int, dtype: str, nhwc: Sequence[int], window: Sequence[int], stride: Sequence[int],
                  padding: Sequence[int], dilation: Sequence[int], channels: int, pixels: int,
                  swizzle_bytes: int) -> np.void:
    """A 4-D im2col map of a dense NHWC image (see ``kgen.tma.encode_im2col``), unchecked;
    EncodeError where the driver cannot be called or refuses."""
    drv = driver()
    n, h, w, c = (int(v) for v in nhwc)
    (r, s), (sh, sw), (ph, pw), (dh, dw) = ((int(a), int(b)) for a, b in (window, stride, padding, dilation))
    size = ELEMENT_BYTES[dtype]
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    try:       # every array innermost first: (C, W, H, N)
        err, tmap = drv.cuTensorMapEncodeIm2col(
            _data_type(drv, dtype), 4, ptr, [u64(c), u64(w), u64(h), u64(n)],
            [u64(c * size), u64(w * c * size), u64(h * w * c * size)],
            [-pw, -ph], [pw - dw * (s - 1), ph - dh * (r - 1)], u32(channels), u32(pixels),
            [u32(1), u32(sw), u32(sh), u32(1)], drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            _swizzle(drv, swizzle_bytes), drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    except Exception as exc:   # no libcuda, or a binding error
        raise EncodeError(f"cannot call cuTensorMapEncodeIm2col: {type(exc).__name__}: {exc}") from None
    if err != drv.CUresult.CUDA_SUCCESS:
        raise EncodeError(f"cuTensorMapEncodeIm2col refused a {dtype} NHWC {(n, h, w, c)} map at {ptr:#x} (window "
                          f"{(r, s)}, stride {(sh, sw)}, padding {(ph, pw)}, dilation {(dh, dw)}, "
                          f"{channels} channels x "
                          f"{pixels} pixels): {err}")
    return words_to_desc(int(x) for x in tmap.opaque)
