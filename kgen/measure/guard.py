"""Guard zones around a trial's outputs, so that an out-of-bounds write fails its trial.

Each output is moved into a larger buffer: ``guard`` bytes of a known pattern before it and
after it. A kernel that writes past the end of its output (or before its start) changes a
guard instead of some other live allocation of the memory pool, and ``breaches`` says so after
the run. Outputs that are neither C- nor F-contiguous keep their own storage (none of the
families makes one).

The module works on any array module with NumPy's interface (CuPy in the worker, NumPy in
the tests).

>>> import numpy as np
>>> operands = {"x": np.ones(4, np.float32), "y": np.zeros(3, np.float32)}
>>> guarded, zones = guard_outputs(operands, ("y",), 256, np)
>>> guarded["x"] is operands["x"], guarded["y"].tolist()
(True, [0.0, 0.0, 0.0])
>>> breaches(zones, np)
[]
>>> zones[0].buffer[256 + 12 + 5] = 0         # a byte written 6 bytes past the end of y
>>> breaches(zones, np)
["out-of-bounds write: 1 byte past output 'y' changed (as far as 6 bytes past its end)"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

PATTERN = 0xA5


@dataclass(frozen=True)
class GuardZone:
    """One output's storage: ``guard`` pattern bytes, the output's ``nbytes``, ``guard`` more."""
    name: str
    buffer: Any
    guard: int
    nbytes: int


def guard_outputs(operands: Mapping[str, Any], outputs, guard: int, xp) -> tuple[dict, list[GuardZone]]:
    """``operands`` with each of ``outputs`` copied into the middle of a guarded buffer, and
    the zones to check. ``guard`` bytes (0: none) is rounded up to 256 so that every output
    keeps the alignment its allocation had."""
    guarded = dict(operands)
    zones: list[GuardZone] = []
    if guard <= 0:
        return guarded, zones
    guard = -(-guard // 256) * 256
    for name in outputs:
        arr = operands[name]
        order = "C" if arr.flags.c_contiguous else "F" if arr.flags.f_contiguous else None
        if order is None:
            continue
        buffer = xp.empty(2 * guard + arr.nbytes, dtype=xp.uint8)
        buffer[:guard] = PATTERN
        buffer[guard + arr.nbytes:] = PATTERN
        view = buffer[guard:guard + arr.nbytes].view(arr.dtype).reshape(arr.shape, order=order)
        view[...] = arr
        guarded[name] = view
        zones.append(GuardZone(name, buffer, guard, arr.nbytes))
    return guarded, zones


def breaches(zones, xp) -> list[str]:
    """One line per changed guard: which output, which side, how many bytes, how far out."""
    found = []
    for zone in zones:
        sides = (("before", zone.buffer[:zone.guard]), ("past", zone.buffer[zone.guard + zone.nbytes:]))
        for side, bytes_ in sides:
            changed = bytes_ != PATTERN
            if not bool(changed.any()):
                continue
            where = xp.flatnonzero(changed)
            count = int(where.size)
            reach = zone.guard - int(where[0]) if side == "before" else int(where[-1]) + 1
            edge = "its start" if side == "before" else "its end"
            found.append(f"out-of-bounds write: {count} byte{'s' * (count != 1)} {side} output "
                         f"{zone.name!r} changed (as far as {reach} bytes {side} {edge})")
    return found
