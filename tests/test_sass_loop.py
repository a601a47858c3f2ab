"""scripts/sass_loop.py finds the k loop (a backward branch around the tensor-core
instructions) in SASS text and counts its instructions; no GPU, no compiler."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.sass_loop import k_loop  # noqa: E402


def _sass(ops: list[str]) -> str:
    return "\n".join(f"        /*{16 * i:04x}*/                   {op} ;" for i, op in enumerate(ops))


def test_the_k_loop_is_the_innermost_backward_branch_around_eight_or_more_mma():
    ops = (["S2R R0, SR_TID.X", "BAR.SYNC.DEFER_BLOCKING 0x0"]
           + ["LDS.64 R4, [R2]", "DMMA.16x8x8 R8, R72, R4, R8", "IMAD R3, R3, 0x8, RZ"] * 8
           + ["@!P0 BRA 0x20"]                                   # back to the first LDS
           + ["IADD3 R1, R1, 0x1, RZ", "DMMA.16x8x8 R8, R72, R4, R8", "@P1 BRA 0x0", "EXIT"])   # a tile loop
    loop = k_loop(_sass(ops))
    assert loop["DMMA"] == 8 and loop["LDS"] == 8 and loop["IMAD"] == 8 and loop["BRA"] == 1
    assert sum(loop.values()) == 25 and "EXIT" not in loop and "S2R" not in loop
    assert k_loop(_sass(["DMMA.16x8x8 R8, R72, R4, R8"] * 3 + ["@!P0 BRA 0x0"])) == {}   # too few mma
