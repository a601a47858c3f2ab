"""The k loop of named tensor-core GEMM configs in their SASS: its instructions, by opcode.

    python scripts/sass_loop.py float64:NN:4096x4096x4096 gemm_mma_f64_nn_64x128x16_w32x32_s4_va2_vb2_g8_k1_mb1_fb2 \\
        gemm_mma_f64_nn_64x128x16_w32x32_s4_va2_vb2_g8_k1_mb1_fb2_lp1

Each argument after a problem (dtype:layout:MxNxK) names a config of its space (gemm_mma or
gemm_wgmma, by the name's prefix); the config is rendered and compiled for the H200 (no GPU
needed) and disassembled (cuobjdump or nvdisasm). The k loop is the smallest backward
branch's body that holds at least eight tensor-core instructions (not a persistent kernel's
tile loop around it); every path through it is counted, so a loop with a branch inside
(LP=2's whole-tile copies) counts both of its sides.
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.compare_configs import _groups  # noqa: E402

_LINE = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)")
_MMA = ("DMMA", "HMMA", "HGMMA")


def k_loop(sass: str) -> collections.Counter:
    """Opcode counts of the k loop in ``sass`` (empty when there is none)."""
    code = [(int(m.group(1), 16), m.group(2).split(".")[0], m.group(3))
            for m in map(_LINE.match, sass.splitlines()) if m]
    best: collections.Counter | None = None
    for address, op, rest in code:
        target = re.search(r"0x([0-9a-f]+)", rest) if op == "BRA" else None
        if target and int(target.group(1), 16) < address:
            body = collections.Counter(o for a, o, _ in code if int(target.group(1), 16) <= a <= address)
            if sum(body[m] for m in _MMA) >= 8 and (best is None or sum(body.values()) < sum(best.values())):
                best = body
    return best or collections.Counter()


def main(argv: list[str]) -> None:
    from kgen.compile import compile_source
    from kgen.problem import Target
    from kgen.render import render
    from kgen.sass import sass_of
    from kgen.registry import get_spec

    target = Target.h200()
    for head, names in _groups(argv):
        dtype, layout, shape = head.split(":")
        for name in names:
            spec = get_spec("gemm_mma" if name.startswith("gemm_mma_") else "gemm_wgmma")
            problem = spec.problem(*(int(x) for x in shape.split("x")), dtype, layout)
            space = spec.space(problem, target)
            found = space.find([name])
            if name not in found:
                raise SystemExit(f"{name}: not a valid config of {head}")
            result = compile_source(render(spec, problem, found[name], target, space))
            if result.failure is not None:
                raise SystemExit(f"{name}: {result.failure.detail[:300]}")
            loop = k_loop(sass_of(result.binary.cubin))
            top = ", ".join(f"{op} {n}" for op, n in loop.most_common(8))
            print(f"{name}: {sum(loop.values())} instructions a k loop "
                  f"({sum(loop[m] for m in _MMA)} mma; {top}); {result.binary.resources['registers']} registers")


if __name__ == "__main__":
    main(sys.argv[1:])
