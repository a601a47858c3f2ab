"""Where an exported tensor-core GEMM call spends its host time, piece by piece (GPU machine).

    python scripts/experiments/export_call_pieces.py [--out FILE]

Exports gemm_wgmma's benchmarked problem (as ``scripts/bench_export.py`` does), then times per
call (best of 30 bursts of 200 calls, each burst synchronised at its end) the whole
``pkg.gemm(a, b, c)``, its raw launch, and each piece the call adds: the operand reads, the
signature and its lookup, the current stream, the argument lookup, and cheaper reads CuPy
offers for the same facts. Prints JSON rows; ``--out`` writes them too.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_export import PROBLEMS, export, operands  # noqa: E402
from launch_costs import per_call_us  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    import cupy

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        module = export("gemm_wgmma", Path(folder))
        entry = module.TABLE["problems"][PROBLEMS["gemm_wgmma"]]
        a, b, c = operands(entry)
        module.gemm(a, b, c, dtype="bfloat16")
        plan = next(iter(module._PLANS.values()))
        args_ = next(iter(plan["cached"].values()))
        stream = cupy.cuda.get_current_stream().ptr
        view = module._view
        sig = (view(a)[0], view(b)[0], view(c)[0], None, None, None, None, "bfloat16")
        key = (a.data.ptr, b.data.ptr, c.data.ptr, 0, 1.0, 0.0, stream)
        getter = plan["stream"]
        memory = a.data
        pieces = {
            "exported_call": lambda: module.gemm(a, b, c, dtype="bfloat16"),
            "raw_bound_launch": lambda: plan["launch"](args_, stream),
            "launch_kernel_only": lambda: plan["launch"]._launch(plan["launch"]._function, *plan["launch"]._shape,
                                                                 stream, plan["launch"]._pack.params, 0),
            "pack_write": lambda: plan["launch"]._pack.write(args_),
            "view_x3": lambda: (view(a), view(b), view(c)),
            "view_x1": lambda: view(a),
            "sig_build_and_get": lambda: module._PLANS.get((view(a)[0], view(b)[0], view(c)[0], None, None, None,
                                                            None, "bfloat16")),
            "sig_hash_only": lambda: hash(sig),
            "stream_getter": getter,
            "args_get": lambda: plan["cached"].get(key),
            "a_shape": lambda: a.shape,
            "a_strides": lambda: a.strides,
            "a_data_ptr": lambda: a.data.ptr,
            "a_dtype_char": lambda: a.dtype.char,
            "a_dtype": lambda: a.dtype,
            "memory_device_id": lambda: memory.device_id,
            "a_device_id": lambda: a.device.id,
            "a_data": lambda: a.data,
            "type_module": lambda: type(a).__module__.startswith("cupy"),
            "type_is": lambda: type(a) is cupy.ndarray,
            "a_size_ndim": lambda: (a.size, a.ndim),
            "a_flags_c": lambda: a.flags.c_contiguous,
            "a_is_c_contiguous": lambda: a._c_contiguous if hasattr(a, "_c_contiguous") else None,
            "tuple_of_6": lambda: ("cupy", (1, 2), (3, 4), "e", 0, 0),
            "empty_call": lambda: None,
        }
        for name, fn in pieces.items():
            try:
                row = {"piece": name, "us_per_call": round(per_call_us(fn), 3)}
            except Exception as exc:        # a read this CuPy lacks: say so and go on
                row = {"piece": name, "error": f"{type(exc).__name__}: {exc}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
