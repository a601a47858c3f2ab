"""Hopper TMA tensor maps: 2-D (and batched 3-D) tiled and 4-D im2col descriptors for ``cp.async.bulk.tensor``, and
their rules.

A tensor map is a 128-byte opaque record the driver encodes
(``cuTensorMapEncodeTiled``); a kernel takes it by value as
``const __grid_constant__ TmaDesc tmap`` with
``struct alignas(64) TmaDesc { unsigned long long words[16]; };``. CuPy passes a NumPy
structured scalar (``numpy.void``) as such a struct, so ``encode_tiled`` returns one.

The rules TMA imposes are checked by ``tma_rejects`` with no GPU, so a kernel family can
turn them into space constraints or ``supports()`` answers:

>>> tma_rejects(0, "bfloat16", (1000, 776), 2000, (64, 128), 128)
[]
>>> tma_rejects(0, "bfloat16", (1000, 776), 2002, (64, 128), 128)
['row stride 2002 bytes is not a multiple of 16']
>>> tma_rejects(8, "float16", (64, 64), 128, (64, 300), 128)
['base pointer 0x8 is not 16-byte aligned', 'box dimension 300 is not in 1..256']
>>> tma_rejects(0, "float16", (64, 100, 8), 128, (64, 64), 128, batch_stride_bytes=12808)
['batch stride 12808 bytes is not a multiple of 16']

Encoded maps are cached by everything that goes into them (pointer, dtype, dims, stride,
box, swizzle) in a small LRU dict, so a repeated call costs one dict lookup.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np

from kgen import tma_encode
from kgen.errors import KgenError
from kgen.tma_encode import ELEMENT_BYTES, TMA_DESC_DTYPE, EncodeError, words_to_desc

__all__ = ["TMA_DESC_DTYPE", "ELEMENT_BYTES", "TmaError", "tma_rejects", "box_matches_swizzle", "stride_ok",
           "words_to_desc", "clear_cache", "encode_tiled", "im2col_rejects", "encode_im2col"]

SWIZZLE_SPANS = (0, 32, 64, 128)   # bytes; 0 = no swizzle
MAX_BOX = 256
CACHE_SIZE = 256


class TmaError(KgenError):
    """A tensor map cannot describe the requested memory (alignment, box or stride rules)."""

    default_remedy = ("TMA needs a 16-byte aligned base pointer and row stride: pass arrays whose "
                      "leading dimension is a multiple of 8 (16-bit) / 4 (32-bit) elements, or use "
                      "a GEMM family without TMA (gemm_mma)")


def tma_rejects(ptr: int, dtype: str, dims: Sequence[int], row_stride_bytes: int,
                box: Sequence[int], swizzle_bytes: int, batch_stride_bytes: int = 0) -> list[str]:
    """Why TMA would refuse this 2-D map (an empty list when it is fine). Pure, no GPU.

    ``dims`` and ``box`` are ``(inner, outer)`` in elements; the inner dimension is the
    contiguous one. ``row_stride_bytes`` is the distance between consecutive outer rows.
    A batch of such matrices is ``dims`` ``(inner, outer, batch)``, ``batch_stride_bytes``
    apart (the box stays 2-D: one matrix at a time).
    """
    why = []
    size = ELEMENT_BYTES.get(dtype)
    if size is None:
        return [f"dtype {dtype} has no TMA element type here"]
    if len(dims) == 3:
        batch, outer_bytes = int(dims[2]), int(dims[1]) * row_stride_bytes
        if not 1 <= batch <= 1 << 32:
            why.append(f"batch {batch} must be in 1..2^32")
        if batch_stride_bytes % 16:
            why.append(f"batch stride {batch_stride_bytes} bytes is not a multiple of 16")
        elif batch > 1 and not outer_bytes <= batch_stride_bytes < 1 << 40:
            why.append(f"batch stride {batch_stride_bytes} bytes is not in {outer_bytes}..2^40 (a matrix's rows)")
        dims = dims[:2]
    inner, outer = (int(d) for d in dims)
    if ptr % 16:
        why.append(f"base pointer {ptr:#x} is not 16-byte aligned")
    if inner < 1 or outer < 1 or inner > 1 << 32 or outer > 1 << 32:
        why.append(f"dims {tuple(dims)} must be in 1..2^32")
    if row_stride_bytes % 16:
        why.append(f"row stride {row_stride_bytes} bytes is not a multiple of 16")
    elif row_stride_bytes >= 1 << 40:
        why.append(f"row stride {row_stride_bytes} bytes is not below 2^40")
    elif outer > 1 and row_stride_bytes < inner * size:
        why.append(f"row stride {row_stride_bytes} bytes is shorter than a row ({inner * size} bytes)")
    for b in box:
        if not 1 <= int(b) <= MAX_BOX:
            why.append(f"box dimension {b} is not in 1..{MAX_BOX}")
    inner_bytes = int(box[0]) * size
    if inner_bytes % 16:
        why.append(f"box inner extent {inner_bytes} bytes is not a multiple of 16")
    if swizzle_bytes not in SWIZZLE_SPANS:
        why.append(f"swizzle {swizzle_bytes} bytes is not one of {SWIZZLE_SPANS}")
    elif swizzle_bytes and inner_bytes > swizzle_bytes:
        why.append(f"box inner extent {inner_bytes} bytes exceeds the {swizzle_bytes}-byte swizzle span")
    return why


def box_matches_swizzle(box_inner: int, dtype: str, swizzle_bytes: int) -> bool:
    """Whether a box's inner extent fills the swizzle span exactly (what wgmma layouts assume)."""
    return box_inner * ELEMENT_BYTES[dtype] == swizzle_bytes


def stride_ok(ld_elements: int, dtype: str) -> bool:
    """Whether a leading dimension gives a 16-byte-multiple row stride."""
    return (ld_elements * ELEMENT_BYTES[dtype]) % 16 == 0


_CACHE: "OrderedDict[tuple, np.void]" = OrderedDict()


def clear_cache() -> None:
    _CACHE.clear()


def encode_tiled(ptr: int, dtype: str, dims: Sequence[int], row_stride_bytes: int,
                 box: Sequence[int], swizzle_bytes: int = 128, batch_stride_bytes: int = 0) -> np.void:
    """A 2-D tiled tensor map (zero fill out of bounds, 256-byte L2 promotion) as a TmaDesc;
    3-D ``dims`` (inner, outer, batch) map a batch of matrices ``batch_stride_bytes`` apart.

    Raises TmaError (with the reasons) when TMA cannot describe the region, or when the
    driver refuses the encoding. Needs the CUDA driver (``cuda-bindings``), not a context.

    >>> # desc = encode_tiled(a.data.ptr, "bfloat16", (k, m), lda * 2, (64, 128), 128)
    """
    key = (int(ptr), dtype, tuple(int(d) for d in dims), int(row_stride_bytes),
           tuple(int(b) for b in box), int(swizzle_bytes)) + ((int(batch_stride_bytes),) if len(dims) == 3 else ())
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    why = tma_rejects(ptr, dtype, dims, row_stride_bytes, box, swizzle_bytes, batch_stride_bytes)
    if why:
        raise TmaError(f"TMA cannot describe a {dtype} {tuple(dims)} tensor at {ptr:#x} "
                       f"(row stride {row_stride_bytes} B, box {tuple(box)}): " + "; ".join(why),
                       ptr=ptr, dims=tuple(dims), box=tuple(box))
    desc = _driver_encode(*key)
    _CACHE[key] = desc
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return desc


# the range of an im2col map's bounding-box corners and of a load's offsets, for a 4-D tensor
IM2COL_CORNER_4D = (-(1 << 7), (1 << 7) - 1)
IM2COL_OFFSET_4D = (0, (1 << 8) - 1)


def im2col_rejects(ptr: int, dtype: str, nhwc: Sequence[int], window: Sequence[int], stride: Sequence[int],
                   padding: Sequence[int], dilation: Sequence[int], channels: int, pixels: int,
                   swizzle_bytes: int) -> list[str]:
    """Why TMA would refuse an im2col map of an NHWC image (empty when it is fine). Pure, no GPU.
    ``window``, ``stride``, ``padding`` and ``dilation`` are (height, width) pairs; ``channels``
    and ``pixels`` are what one load brings (channels per pixel, pixels per column)."""
    why = []
    size = ELEMENT_BYTES.get(dtype)
    if size is None:
        return [f"dtype {dtype} has no TMA element type here"]
    n, h, w, c = (int(d) for d in nhwc)
    if ptr % 16:
        why.append(f"base pointer {ptr:#x} is not 16-byte aligned")
    if (c * size) % 16:
        why.append(f"a pixel's {c} channels are {c * size} bytes, not a multiple of 16")
    if not 1 <= channels <= MAX_BOX or (channels * size) % 16:
        why.append(f"{channels} channels a load is not in 1..{MAX_BOX} and a multiple of 16 bytes")
    elif swizzle_bytes and channels * size > swizzle_bytes:
        why.append(f"{channels} channels a load exceed the {swizzle_bytes}-byte swizzle span")
    if not 1 <= pixels <= MAX_BOX:
        why.append(f"{pixels} pixels a load is not in 1..{MAX_BOX}")
    low, high = IM2COL_CORNER_4D
    for axis, (k, s, p, d) in enumerate(zip(window, stride, padding, dilation)):
        name = "hw"[axis]
        corners = (-p, p - d * (k - 1))
        if not all(low <= x <= high for x in corners):
            why.append(f"{name}: the window corners' box {corners} is outside {low}..{high}")
        if not IM2COL_OFFSET_4D[0] <= d * (k - 1) <= IM2COL_OFFSET_4D[1]:
            why.append(f"{name}: the last tap's offset {d * (k - 1)} is outside {IM2COL_OFFSET_4D}")
        if not 1 <= s <= 8:
            why.append(f"{name}: stride {s} is not in 1..8 (a traversal stride)")
    if max(n, h, w, c) > 1 << 32:
        why.append(f"dims {tuple(nhwc)} must be at most 2^32")
    return why


def encode_im2col(ptr: int, dtype: str, nhwc: Sequence[int], window: Sequence[int], stride: Sequence[int],
                  padding: Sequence[int], dilation: Sequence[int], channels: int, pixels: int,
                  swizzle_bytes: int = 128) -> np.void:
    """A 4-D im2col tensor map of a dense NHWC image for a convolution's window corners: each load
    brings ``pixels`` pixels of ``channels`` channels, walking the corners of the windows (the
    box from -padding to padding - dilation * (window - 1) past each edge, in steps of the
    stride) from the coordinates the kernel gives; zero fill outside the image. Cached like
    ``encode_tiled``; TmaError (with the reasons) where TMA cannot describe it."""
    key = ("im2col", int(ptr), dtype, *(tuple(int(v) for v in x) for x in (nhwc, window, stride, padding, dilation)),
           int(channels), int(pixels), int(swizzle_bytes))
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    why = im2col_rejects(ptr, dtype, nhwc, window, stride, padding, dilation, channels, pixels, swizzle_bytes)
    if why:
        raise TmaError(f"TMA cannot describe the im2col map of a {dtype} NHWC image {tuple(nhwc)} at {ptr:#x}: "
                       + "; ".join(why), ptr=ptr, dims=tuple(nhwc))
    try:
        desc = tma_encode.encode_im2col(int(ptr), dtype, *key[3:8], channels, pixels, swizzle_bytes)
    except EncodeError as exc:
        raise TmaError(str(exc), remedy="encode tensor maps on a machine with the NVIDIA driver (CUDA 12+, compute "
                       "capability 9.0+), and check the image's alignment", ptr=ptr, dims=tuple(nhwc)) from None
    _CACHE[key] = desc
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return desc


def _driver_encode(ptr, dtype, dims, row_stride_bytes, box, swizzle_bytes, batch_stride_bytes=0) -> np.void:
    try:
        return tma_encode.encode_tiled(ptr, dtype, dims, row_stride_bytes, box, swizzle_bytes, call=_encode_call,
                                       batch_stride_bytes=batch_stride_bytes)
    except EncodeError as exc:
        raise TmaError(str(exc), remedy="encode tensor maps on a machine with the NVIDIA driver (CUDA 12+, compute "
                       "capability 9.0+), and check the operand's alignment", ptr=ptr, dims=tuple(dims),
                       box=tuple(box)) from None


def _encode_call(*args):
    return tma_encode.encode_call(*args)
