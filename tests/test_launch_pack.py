"""ArgPack and BoundLaunch: the argument buffer cuLaunchKernel reads, checked byte by byte
with no GPU (the driver's launch is replaced by a function that reads the buffer back)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from kgen.measure.arg_pack import ArgPack, BoundLaunch

TMAP = np.frombuffer(bytes(range(128)), dtype="V128")[0]     # a 128-byte tensor map


def read_back(params: int, template) -> list:
    """The values the pointers at ``params`` point to, each read as its template's type."""
    pointers = (ctypes.c_void_p * len(template)).from_address(params)
    out = []
    for p, t in zip(pointers, template):
        size = np.asarray(t).nbytes
        out.append(np.frombuffer(ctypes.string_at(p, size), dtype=np.asarray(t).dtype)[0])
    return out


def test_each_pointer_points_at_its_value_in_its_type():
    template = (np.uint64(0x7F00_0000_1000), np.int32(-3), np.int64(1 << 40), np.float32(0.5), TMAP,
                np.float64(2.25), np.int32(7))
    pack = ArgPack(template)
    assert read_back(pack.params, template) == list(template)
    pointers = list((ctypes.c_void_p * len(template)).from_address(pack.params))
    for p, t in zip(pointers, template):
        assert p % min(np.asarray(t).nbytes, 16) == 0            # natural alignment


def test_write_converts_python_values_and_keeps_what_is_unchanged():
    dims = (np.int32(64), np.int64(128))
    pack = ArgPack((np.uint64(0), *dims, np.float32(0)))
    pack.write((0x7F00_0000_2000, *dims, 1.5))
    assert [v.item() for v in pack.values()] == [0x7F00_0000_2000, 64, 128, 1.5]
    assert [type(v) for v in pack.values()] == [np.uint64, np.int32, np.int64, np.float32]
    pack.write((0x7F00_0000_3000, np.int32(65), *dims[1:], 2.0))
    assert [v.item() for v in pack.values()] == [0x7F00_0000_3000, 65, 128, 2.0]


def test_a_template_of_python_values_is_refused():
    with pytest.raises(TypeError, match="NumPy scalars"):
        ArgPack((np.uint64(0), 3))


def test_bound_launch_calls_the_driver_with_the_written_arguments(monkeypatch):
    import cupy

    seen = []

    def launch_kernel(function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        seen.append(((function, gx, gy, gz, bx, by, bz, smem, stream, extra), read_back(params, template)))

    monkeypatch.setattr(cupy.cuda.driver, "launchKernel", launch_kernel)
    monkeypatch.setattr(cupy.cuda, "get_current_stream", lambda: SimpleNamespace(ptr=0xABC))
    template = (TMAP, np.uint64(0), np.int32(0), np.float32(0))
    bound = BoundLaunch(SimpleNamespace(ptr=0x1234), (8, 2), 128, 4096, template)
    bound((TMAP, 0x7F00_0000_0000, np.int32(9), 0.25))
    bound((TMAP, 0x7F00_0000_0100, np.int32(9), 0.5), stream=77)
    assert seen[0][0] == (0x1234, 8, 2, 1, 128, 1, 1, 4096, 0xABC, 0)
    assert seen[1][0][8] == 77
    assert [v.item() for v in seen[0][1][1:]] == [0x7F00_0000_0000, 9, 0.25]
    assert [v.item() for v in seen[1][1][1:]] == [0x7F00_0000_0100, 9, 0.5]
    assert seen[1][1][0].tobytes() == bytes(range(128))


class _Function:
    """The attributes of a CuPy Function that the launcher reads and sets, recording launches."""

    def __init__(self, static_shared: int):
        self.shared_size_bytes = static_shared
        self.max_dynamic_shared_size_bytes = 48 * 1024 - static_shared
        self.set_to, self.launched = [], []

    def __setattr__(self, name, value):
        if name == "max_dynamic_shared_size_bytes" and hasattr(self, "set_to"):
            self.set_to.append(value)
        object.__setattr__(self, name, value)

    def __call__(self, grid, block, args, shared_mem=0):
        self.launched.append(shared_mem)


@pytest.mark.parametrize("static,dynamic,opts_in", [(0, 48 * 1024, False), (4, 48 * 1024, True),
                                                    (4, 48 * 1024 - 4, False), (0, 48 * 1024 + 16, True)])
def test_a_launch_opts_in_once_its_static_and_dynamic_shared_memory_pass_48_kib(static, dynamic, opts_in):
    from kgen.measure.launch import CupyKernel, dynamic_shared_default

    kernel = object.__new__(CupyKernel)          # no module to load: the function is a stand-in
    kernel.function = _Function(static)
    kernel._smem_limit = dynamic_shared_default(kernel.function)     # what __init__ sets
    for _ in range(2):
        kernel.launch((1, 1, 1), (32, 1, 1), (), shared_mem=dynamic)
    assert kernel.function.set_to == ([dynamic] if opts_in else [])
    assert kernel.function.launched == [dynamic, dynamic]
