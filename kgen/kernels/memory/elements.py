"""The element types of the memory-bound families, each decided here once: how a dtype is
stored (16-bit values as their bits, header-free), how it becomes the float it is computed
in and back (``templates/common/convert.cuh``), its size and the tolerance a result is held to.

>>> ELEMENTS["bfloat16"].storage, ELEMENTS["bfloat16"].load, ELEMENTS["float16"].size
('unsigned short', 'kgen_bf16_to_float', 2)
>>> vector_widths("float16"), vector_widths("float32")
((1, 2, 4, 8), (1, 2, 4))
"""

from __future__ import annotations

from dataclasses import dataclass

from kgen.errors import DtypeError


@dataclass(frozen=True)
class Element:
    """One element type: its C storage type, the conversions to and from the float it is
    computed in, its bytes, the NumPy dtype holding it on the host and in CuPy (bfloat16:
    its bits in uint16), the relative tolerance of a result rounded to it, and its spacing
    at zero (the smallest subnormal: the absolute error a tiny result may carry)."""

    name: str
    storage: str
    load: str
    store: str
    size: int
    numpy: str
    tolerance: float
    tiny: float


ELEMENTS: dict[str, Element] = {
    "float32": Element("float32", "float", "kgen_to_float", "kgen_to_float", 4, "float32", 2e-6, 2.0 ** -149),
    "float16": Element("float16", "unsigned short", "kgen_half_to_float", "kgen_float_to_half", 2, "float16", 1e-3, 2.0 ** -24),
    "bfloat16": Element("bfloat16", "unsigned short", "kgen_bf16_to_float", "kgen_float_to_bf16", 2, "uint16", 8e-3, 2.0 ** -133),
}
DTYPES = tuple(ELEMENTS)
FLOAT32_EPS = 2.0 ** -24            # the unit roundoff of float arithmetic, in which every family computes
VECTOR_BYTES = 16                   # the widest load a thread issues (LDG.128)


def element(dtype: str) -> Element:
    """The Element of ``dtype``, or a DtypeError naming the ones there are."""
    try:
        return ELEMENTS[dtype]
    except KeyError:
        raise DtypeError(f"dtype {dtype!r} is not one the memory-bound families take",
                         remedy=f"use one of {', '.join(DTYPES)}") from None


def vector_widths(*dtypes: str) -> tuple[int, ...]:
    """The elements per vector load allowed when arrays of ``dtypes`` move together: powers of
    two up to 16 bytes of the widest of them."""
    widest = max(element(d).size for d in dtypes)
    return tuple(w for w in (1, 2, 4, 8, 16) if w * widest <= VECTOR_BYTES)
