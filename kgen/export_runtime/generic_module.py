"""Tuned __FAMILY__ kernels exported by kgen. The only runtime dependency is CuPy.

    import __PACKAGE__
    __PACKAGE__.problems()                          # the exported problem keys
    __PACKAGE__.run({"n": 4096}, x=x, y=y, out=out)  # the tuned kernel of that problem
    __PACKAGE__.run("__FAMILY__|n=4096", x=x, ...)   # the same, by its key

Scalars the family reads at the call (an elementwise expression's ``a``) are passed by name
beside the arrays.
Arrays are CuPy arrays or any ``__cuda_array_interface__`` arrays (PyTorch, JAX ...), passed
by the names the family gives its operands; the kernel runs on CuPy's current stream (or
``stream=``). A problem that was not exported raises ``ExportedError``.
"""

import json
import os

from . import _loader, _replay

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "table.json")) as _f:
    TABLE = json.load(_f)


class ExportedError(Exception):
    """An input this module cannot serve; the message says what to do."""


def problems():
    return sorted(TABLE["problems"])


def problem_key(problem):
    """The key of a problem given as its key or as a dict of its fields."""
    if isinstance(problem, str):
        return problem
    if not isinstance(problem, dict):
        raise ExportedError(f"a problem is a key or a dict of fields, not {type(problem).__name__}")
    return "|".join([TABLE["family"]] + [f"{k}={v}" for k, v in sorted(problem.items())])


def _array_names():
    """The arrays a call passes: each recipe item's pointer, or the array its map describes."""
    names = set()
    for entry in TABLE["problems"].values():
        for item in entry["args"]:
            names.update([item["pointer"]] if "pointer" in item else
                         [item[kind]["array"] for kind in ("map", "im2col") if kind in item])
    return names


def _operand_names():
    """The names a call passes: arrays, and scalars read at the call."""
    return _array_names() | {item["scalar"] for e in TABLE["problems"].values() for item in e["args"]
                             if "scalar" in item}


def _pointer(x, name):
    try:
        return x.__cuda_array_interface__["data"][0]
    except AttributeError:
        raise ExportedError(f"{name} is a {type(x).__name__}, not a CuPy or __cuda_array_interface__ array") from None


def run(problem, stream=None, **arrays):
    """Launch the tuned kernel of ``problem`` on ``arrays``, on ``stream`` (default: CuPy's
    current stream), without synchronising."""
    key = problem_key(problem)
    entry = TABLE["problems"].get(key)
    if entry is None:
        raise ExportedError(f"{key} was not exported; exported: {', '.join(problems()[:5])}")
    unknown = sorted(set(arrays) - _operand_names())
    if unknown:
        raise ExportedError(f"unknown operand {unknown[0]!r}; this family takes {sorted(_operand_names())}")
    launch = entry["launch"]
    operands = {name: (_pointer(x, name), 0) for name, x in arrays.items() if name in _array_names()}
    scalars = {name: x for name, x in arrays.items() if name not in operands}
    try:
        args = _replay.arguments(entry["args"], operands, scalars)
    except _replay.RecipeError as exc:
        raise ExportedError(f"{exc}; this family takes {sorted(_operand_names())}") from None
    fn = _loader.kernel(_HERE, TABLE["arch"], entry.get("kernel", entry["config"]), launch["shared_mem"],
                         entry["config"])
    if stream is None:
        _launch(fn, launch, args, operands)
    else:
        with stream:
            _launch(fn, launch, args, operands)


def _launch(fn, launch, args, operands):
    """The kernel on CuPy's current stream, the outputs it adds into (``zero``: name -> bytes)
    zeroed first on that stream."""
    if launch.get("zero"):
        import cupy

        stream = cupy.cuda.get_current_stream().ptr
        for name, nbytes in launch["zero"].items():
            if name not in operands:
                raise ExportedError(f"operand {name!r} was not passed; this family takes {sorted(_operand_names())}")
            cupy.cuda.runtime.memsetAsync(operands[name][0], 0, nbytes, stream)
    fn(tuple(launch["grid"]), tuple(launch["block"]), args, shared_mem=launch["shared_mem"])
