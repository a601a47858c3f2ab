"""Provenance of a measurement made now, on a target, from a template."""

from __future__ import annotations

import datetime
import socket

from kgen.knobs import knobs
from kgen.measurement import Provenance
from kgen.problem import Target


def kgen_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kgen")
    except PackageNotFoundError:
        return "0+source"


def provenance_for(target: Target, template_digest: str) -> Provenance:
    return Provenance(device=target.name, cc=f"{target.cc[0]}.{target.cc[1]}",
                      driver=target.driver_version, cuda_runtime=target.runtime_version,
                      nvrtc=target.nvrtc_version, kgen_version=kgen_version(),
                      template_digest=template_digest,
                      host=socket.gethostname() if knobs.record_host else "",
                      created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def cpu_name() -> str:
    """This host's processor, as /proc/cpuinfo names it (else the platform's word for it)."""
    import platform
    from pathlib import Path

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"
