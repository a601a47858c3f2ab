"""The element types a DistMatrix may hold, and the type its sums accumulate in.

float32, float64 and float16 are NumPy's; bfloat16 is ml_dtypes' (``pip install ml_dtypes``,
which JAX installs too) and is refused on host ranks without it. Half types accumulate in
float32, as tensor cores do.

>>> resolve_dtype("float16").name, accumulator(resolve_dtype("float16")).name
('float16', 'float32')
"""

from __future__ import annotations

import numpy as np

from kgen.errors import DtypeError

NAMES = ("float32", "float64", "float16", "bfloat16")


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def supported() -> tuple[str, ...]:
    """The dtype names this process can hold (bfloat16 only with ml_dtypes)."""
    return NAMES if _bfloat16() is not None else NAMES[:3]


def resolve_dtype(dtype) -> np.dtype:
    """``dtype`` (a name, NumPy dtype or type) as a supported NumPy dtype; DtypeError otherwise."""
    if isinstance(dtype, str) and dtype == "bfloat16" or getattr(dtype, "__name__", "") == "bfloat16":
        found = _bfloat16()
        if found is None:
            raise DtypeError("bfloat16 needs ml_dtypes on host ranks, and it is not installed",
                             remedy="pip install ml_dtypes, or use float16 / float32")
        return found
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        raise DtypeError(f"{dtype!r} is not a dtype; kgen.dist holds {', '.join(supported())}") from None
    if resolved.name not in NAMES:
        raise DtypeError(f"kgen.dist holds {', '.join(supported())}, not {resolved.name}")
    return resolved


def accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype products and sums of ``dtype`` are accumulated in."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
