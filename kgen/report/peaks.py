"""The peaks a roofline is drawn against, per device name: one small table.

The bandwidth is the copy rate kgen measures against (bytes read plus written per second);
the compute peaks are the rates cuBLAS reaches on large problems, per precision, not the
data sheet's. The H100 SXM is the H200's chip at the same clocks with slower memory, so it
shares the compute figures. A device not listed here gets its points placed with no roofs.

>>> peaks_for("NVIDIA H200").bandwidth / 1e12
4.25
>>> [name for name, _ in peaks_for("NVIDIA H200").compute]
['fp16/bf16', 'tf32', 'fp64', 'fp32']
>>> peaks_for("a GPU nobody listed") is None
True
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peaks:
    """A device's copy rate (bytes/s) and compute ceilings ((precision, flop/s), highest first)."""

    device: str
    bandwidth: float
    compute: tuple[tuple[str, float], ...]


_HOPPER_COMPUTE = (("fp16/bf16", 760e12), ("tf32", 400e12), ("fp64", 60e12), ("fp32", 50e12))

PEAKS: dict[str, Peaks] = {p.device: p for p in (
    Peaks("NVIDIA H200", 4.25e12, _HOPPER_COMPUTE),
    Peaks("NVIDIA H100 80GB HBM3", 3.35e12, _HOPPER_COMPUTE),    # the H100 SXM's device name
)}


def peaks_for(device: str) -> Peaks | None:
    """The device's peaks, by its exact name as records store it; None if not listed."""
    return PEAKS.get(device)
