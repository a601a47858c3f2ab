"""The SASS of a compiled kernel, for reading what the compiler made of a template.

The disassembler is cuobjdump (``pip install nvidia-cuda-cuobjdump``), or nvdisasm, wherever
pip or a CUDA install put it; none is needed to compile or run kernels.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from kgen.errors import KgenError

_REMEDY = "pip install nvidia-cuda-cuobjdump (or put CUDA's cuobjdump or nvdisasm on the PATH)"


def disassembler() -> tuple[str, list[str]] | None:
    """(path, arguments before the cubin) of the first disassembler found, or None."""
    try:
        from cuda import pathfinder
    except ImportError:
        return None
    for name, args in (("cuobjdump", ["-sass"]), ("nvdisasm", [])):
        try:
            path = pathfinder.find_nvidia_binary_utility(name)
        except Exception:        # the finder's own errors differ across its versions
            path = None
        if path:
            return path, args
    return None


def sass_of(cubin: bytes, timeout_s: float = 300) -> str:
    """The disassembled SASS of ``cubin``; KgenError when no disassembler is installed or it fails."""
    tool = disassembler()
    if tool is None:
        raise KgenError("no SASS disassembler found", remedy=_REMEDY)
    path, args = tool
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "kernel.cubin"
        f.write_bytes(cubin)
        out = subprocess.run([path, *args, str(f)], capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise KgenError(f"{Path(path).name} failed on the cubin: {out.stderr.strip()[:500]}",
                        remedy="check that the cubin is whole and the disassembler knows its architecture")
    return out.stdout
