"""Guard zones around a trial's outputs (kgen.measure.guard), on NumPy arrays."""

import numpy as np

from kgen.measure.guard import PATTERN, breaches, guard_outputs


def test_outputs_keep_values_order_and_alignment():
    c = np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4))
    r = np.arange(6, dtype=np.uint16).reshape(2, 3)
    guarded, zones = guard_outputs({"c": c, "r": r, "a": np.ones(2)}, ("c", "r"), 1000, np)
    assert [z.name for z in zones] == ["c", "r"] and zones[0].guard == 1024
    assert guarded["c"].flags.f_contiguous and np.array_equal(guarded["c"], c)
    assert guarded["r"].flags.c_contiguous and np.array_equal(guarded["r"], r)
    assert guarded["c"].ctypes.data - zones[0].buffer.ctypes.data == 1024
    assert bool((zones[1].buffer[:1024] == PATTERN).all()) and breaches(zones, np) == []
    guarded["c"][2, 3] = -1           # writes inside the output are no breach
    assert breaches(zones, np) == []


def test_writes_on_either_side_are_named_with_their_reach():
    guarded, zones = guard_outputs({"y": np.zeros(8, np.float32)}, ("y",), 256, np)
    zones[0].buffer[256 - 3] = 0
    zones[0].buffer[256 + 32 + 99:256 + 32 + 101] = 1
    assert breaches(zones, np) == [
        "out-of-bounds write: 1 byte before output 'y' changed (as far as 3 bytes before its start)",
        "out-of-bounds write: 2 bytes past output 'y' changed (as far as 101 bytes past its end)"]


def test_no_guard_and_strided_outputs_keep_their_storage():
    x = np.zeros((4, 4))[:, ::2]
    guarded, zones = guard_outputs({"x": x}, ("x",), 256, np)
    assert guarded["x"] is x and zones == []
    y = np.zeros(3)
    guarded, zones = guard_outputs({"y": y}, ("y",), 0, np)
    assert guarded["y"] is y and zones == []
