"""A kernel's arguments rebuilt at call time from the recipe ``kgen export`` recorded.

A recipe is a list with one item per kernel argument (JSON):

- ``{"pointer": "a"}``: operand ``a``'s device pointer (0 where an ``"optional": true`` operand is absent);
- ``{"ld": "a", "type": "int64"}``: operand ``a``'s leading dimension, in elements (at least 1);
- ``{"scalar": "alpha", "type": "float32", "default": 1.0}``: a value passed at the call by
  that name (the default where the call passes none; without one it must be passed);
- ``{"value": 5, "type": "int32"}``: a value fixed at export;
- ``{"map": {"array", "dtype", "dims", "row_stride", "box", "swizzle"}}``: a TMA tensor map of
  the operand, encoded at call time; ``row_stride`` is in elements, or ``"ld"`` for the
  operand's leading dimension; with ``"optional": true`` a map TMA cannot make is an empty
  record instead, and ``{"map_flag": i, "type": "int32"}`` says whether argument ``i`` got one;
- ``{"im2col": {"array", "dtype", "nhwc", "window", "stride", "padding", "dilation",
  "channels", "pixels", "swizzle"}}``: a TMA im2col map of an NHWC image (a convolution's);
- ``{"empty_map": true}``: an empty map record (an operand the kernel reads otherwise);
- ``{"workspace": "name", "bytes": N, "fill": W}``: a buffer of N bytes, each 32-bit word
  W, made once per device and stream; the kernel leaves it so again.

Depends on NumPy (and CuPy and ``cuda-bindings`` once a call needs a workspace or a map),
each loaded on first use: importing this file loads none. In an exported package it sits next
to ``_tma.py`` (``kgen/tma_encode.py``); kgen tests it with no GPU.
"""

from __future__ import annotations

_WORKSPACES: dict = {}
_MAPS: dict = {}
MAP_CACHE = 256


class RecipeError(ValueError):
    """A recipe item this runtime does not know, or an operand the call did not pass."""


def _encoder():
    """The tensor-map encoder: ``_tma`` beside this file in an exported package, else kgen's."""
    try:
        from . import _tma as found
    except ImportError:
        from kgen import tma_encode as found
    return found


def _template_value(item):
    """The NumPy scalar type of one argument (what the launch's argument pack holds)."""
    import numpy as np

    if "map" in item or "im2col" in item or "empty_map" in item:
        return _encoder().EMPTY_DESC
    if "pointer" in item or "workspace" in item:
        return np.uint64(0)
    if "type" in item:
        return getattr(np, item["type"])(0)
    raise RecipeError(f"unknown recipe item {item!r}")


def template(recipe) -> tuple:
    """Zero-valued arguments of the recipe's types."""
    return tuple(_template_value(item) for item in recipe)


def encode(operand, spec):
    """The map ``spec`` of an operand (ptr, ld), cached by everything that goes into it."""
    tma_encode = _encoder()
    dtype = spec["dtype"]
    row = operand[1] if spec["row_stride"] == "ld" else spec["row_stride"]
    batch = spec.get("batch_stride", 0)       # 3-D dims: a batch of matrices this many elements apart
    key = (operand[0], dtype, tuple(spec["dims"]), row, tuple(spec["box"]), spec["swizzle"], batch)
    desc = _MAPS.get(key)
    if desc is None:
        if len(_MAPS) >= MAP_CACHE:
            _MAPS.clear()
        size = tma_encode.ELEMENT_BYTES[dtype]
        more = {"batch_stride_bytes": batch * size} if len(spec["dims"]) == 3 else {}
        desc = _MAPS[key] = tma_encode.encode_tiled(operand[0], dtype, spec["dims"], row * size, spec["box"],
                                                    spec["swizzle"], **more)
    return desc


def encode_im2col(ptr: int, spec):
    """The im2col map ``spec`` of an image at ``ptr``, cached like ``encode``'s."""
    key = ("im2col", ptr, *(spec[f] if isinstance(spec[f], (int, str)) else tuple(spec[f]) for f in _IM2COL))
    desc = _MAPS.get(key)
    if desc is None:
        if len(_MAPS) >= MAP_CACHE:
            _MAPS.clear()
        desc = _MAPS[key] = _encoder().encode_im2col(ptr, *(spec[f] for f in _IM2COL))
    return desc


_IM2COL = ("dtype", "nhwc", "window", "stride", "padding", "dilation", "channels", "pixels", "swizzle")


def _workspace(item, device: int, stream: int):
    key = (device, stream, item["workspace"], item["bytes"], item["fill"])
    found = _WORKSPACES.get(key)
    if found is None:
        import cupy
        import numpy as np

        with cupy.cuda.Device(device):
            side = cupy.cuda.Stream(non_blocking=True)
            with side:
                buffer = cupy.full(max(1, item["bytes"] // 4), item["fill"], dtype=cupy.uint32)
            side.synchronize()
        found = _WORKSPACES[key] = (buffer, np.uint64(buffer.data.ptr))
    return found[1]


def _map_ok(operand, spec) -> bool:
    """Whether TMA can describe the operand as ``spec`` asks (16-byte base and row stride)."""
    row = operand[1] if spec["row_stride"] == "ld" else spec["row_stride"]
    size = _encoder().ELEMENT_BYTES[spec["dtype"]]
    return operand[0] % 16 == 0 and (row * size) % 16 == 0 and (spec.get("batch_stride", 0) * size) % 16 == 0


def arguments(recipe, operands, scalars, device: int = 0, stream: int = 0) -> tuple:
    """The kernel arguments: ``operands`` maps a name to (pointer, leading dimension) or None,
    ``scalars`` a name to a number; ``device`` and ``stream`` key the workspaces."""
    import numpy as np

    empty = _encoder().EMPTY_DESC
    out = []
    mapped = {}
    for index, item in enumerate(recipe):
        if "pointer" in item:
            operand = operands.get(item["pointer"])
            if operand is None and not item.get("optional"):
                raise RecipeError(f"operand {item['pointer']!r} was not passed")
            out.append(np.uint64(0 if operand is None else operand[0]))
        elif "ld" in item:
            operand = operands.get(item["ld"])
            if operand is None:
                raise RecipeError(f"operand {item['ld']!r} was not passed")
            out.append(getattr(np, item["type"])(max(1, operand[1])))
        elif "scalar" in item:
            value = scalars.get(item["scalar"], item.get("default"))
            if value is None:
                raise RecipeError(f"scalar {item['scalar']!r} was not passed")
            out.append(getattr(np, item["type"])(value))
        elif "value" in item:
            out.append(getattr(np, item["type"])(item["value"]))
        elif "map" in item:
            spec = item["map"]
            operand = operands.get(spec["array"])
            if operand is None:
                raise RecipeError(f"operand {spec['array']!r} was not passed")
            usable = not item.get("optional") or _map_ok(operand, spec)
            mapped[index] = usable
            out.append(encode(operand, spec) if usable else empty)
        elif "im2col" in item:
            spec = item["im2col"]
            operand = operands.get(spec["array"])
            if operand is None:
                raise RecipeError(f"operand {spec['array']!r} was not passed")
            out.append(encode_im2col(operand[0], spec))
        elif "map_flag" in item:
            out.append(getattr(np, item["type"])(int(mapped.get(item["map_flag"], False))))
        elif "empty_map" in item:
            out.append(empty)
        elif "workspace" in item:
            out.append(_workspace(item, device, stream))
        else:
            raise RecipeError(f"unknown recipe item {item!r}")
    return tuple(out)
