"""The CUDA toolkit pieces this process has: NVRTC's version (part of a Target and of every
record's provenance).

>>> nvrtc_version().count(".") == 1 or nvrtc_version() == "unavailable"
True
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def nvrtc_version() -> str:
    """NVRTC's major.minor: from the nvidia-cuda-nvrtc wheel's metadata when that wheel is
    installed (the library cuda.bindings then loads; loading it costs ~0.2 s of a cold
    start), else from the library itself."""
    from importlib import metadata

    try:
        major, minor = metadata.version("nvidia-cuda-nvrtc").split(".")[:2]
        return f"{major}.{minor}"
    except (metadata.PackageNotFoundError, ValueError):
        pass
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        return "unavailable"
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"
