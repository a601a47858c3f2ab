"""Bad inputs raise typed errors with a remedy; errors pickle; malformed settings raise."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pytest

import kgen
from kgen.db import MemoryStore
from kgen.dispatch import Dispatcher, set_default_dispatcher
from kgen.errors import (DeviceError, DtypeError, InputError, KgenError, LayoutError, NoConfigError,
                         SettingError, ShapeError, SpaceError, TemplateError)
from kgen.knobs import knobs
from kgen.problem import Target

BASE = 0x7F00_0000_0000


class FakeArray:
    def __init__(self, shape, dtype="float32", ptr=BASE, strides=None, device=0):
        self.shape, self.dtype, self.ptr = tuple(shape), np.dtype(dtype), ptr
        self.elem_strides, self.device = strides, SimpleNamespace(id=device)

    @property
    def __cuda_array_interface__(self):
        strides = None if self.elem_strides is None else tuple(s * self.dtype.itemsize for s in self.elem_strides)
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": strides, "version": 3}


class NoLaunch:
    """A launcher that fails the test if anything gets as far as loading or allocating."""

    def load(self, binary):
        raise AssertionError("a bad input reached the launcher")

    def empty(self, shape, dtype, like=None):
        raise AssertionError("a bad input reached allocation")


@pytest.fixture(autouse=True)
def guarded_dispatcher():
    old = set_default_dispatcher(Dispatcher(db=MemoryStore(), launcher=NoLaunch(),
                                            targets={0: Target.h200(), 1: Target.h200()}))
    try:
        yield
    finally:
        set_default_dispatcher(old)


def raises(error, *args, **kwargs) -> KgenError:
    with pytest.raises(error) as info:
        kgen.gemm(*args, **kwargs)
    err = info.value
    assert isinstance(err, InputError) and err.message
    assert err.remedy and err.remedy.strip(), f"{type(err).__name__} without a remedy: {err}"
    assert err.remedy in str(err)
    return err


A = FakeArray((8, 4))
B = FakeArray((4, 6), ptr=BASE + 0x1000)


def test_numpy_host_arrays_are_a_device_error():
    err = raises(DeviceError, np.ones((8, 4), np.float32), B)
    assert "NumPy" in err.message and "cupy" in err.remedy
    raises(DeviceError, A, np.ones((4, 6), np.float32))


def test_a_list_is_a_device_error():
    raises(DeviceError, [[1.0] * 4] * 8, B)


def test_an_object_that_is_no_array_is_an_input_error():
    raises(InputError, object(), B)


def test_operands_on_two_devices_are_a_device_error():
    err = raises(DeviceError, A, FakeArray((4, 6), device=1))
    assert "0" in err.message and "1" in err.message
    raises(DeviceError, A, B, FakeArray((8, 6), device=1))


@pytest.mark.parametrize("dtype", ["int32", "int8", "complex64"])
def test_unsupported_dtype_is_a_dtype_error(dtype):
    err = raises(DtypeError, FakeArray((8, 4), dtype), FakeArray((4, 6), dtype))
    assert dtype in err.message


def test_mixed_dtypes_are_a_dtype_error():
    raises(DtypeError, A, FakeArray((4, 6), "float64"))


def test_mismatched_inner_dimensions_are_a_shape_error():
    err = raises(ShapeError, A, FakeArray((5, 6)))
    assert "8x4" in err.message and "5x6" in err.message


def test_inputs_of_other_than_two_or_three_dimensions_are_a_shape_error():
    raises(ShapeError, FakeArray((2, 2, 8, 4)), B)     # (3-D operands are a batch of GEMMs)
    raises(ShapeError, A, FakeArray((4,)))


def test_strides_no_layout_covers_are_a_layout_error():
    # every other row and every other column: neither row-major nor a transposed view
    a = FakeArray((8, 4), strides=(16, 2))
    err = raises(LayoutError, a, B)
    assert ".copy()" in err.remedy and "(16, 2)" in err.message
    # a leading dimension smaller than the row: overlapping rows
    raises(LayoutError, FakeArray((8, 4), strides=(2, 1)), B)


def test_strides_that_are_not_whole_elements_are_an_input_error():
    class Odd(FakeArray):
        @property
        def __cuda_array_interface__(self):
            d = super().__cuda_array_interface__
            d["strides"] = (18, 4)
            return d

    err = raises(InputError, Odd((8, 4), strides=(4, 1)), B)
    assert ".copy()" in err.remedy


def test_c_of_the_wrong_shape_dtype_or_layout():
    raises(ShapeError, A, B, FakeArray((6, 8)))
    raises(DtypeError, A, B, FakeArray((8, 6), "float64"))
    raises(LayoutError, A, B, FakeArray((8, 6), strides=(1, 8)))    # column-major c


# ---------------------------------------------------------------- pickling

@pytest.mark.parametrize("err", [
    ShapeError("inner dimensions differ", remedy="pass b with 3 rows", operand="b"),
    LayoutError("strides (3, 5)"),                       # default remedy
    DeviceError("on device 1"),
    NoConfigError("no config", remedy="tune it"),
    TemplateError("does not render", remedy="fix it", template="gemm/simt.cu.j2", config="x"),
    SpaceError("bad space", remedy="fix the Param"),
    SettingError("KGEN_BENCH_RUNS", "abc", "invalid literal"),
], ids=lambda e: type(e).__name__)
def test_errors_pickle_with_message_remedy_and_fields(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert back.message == err.message and back.remedy == err.remedy and back.remedy
    assert back.fields == err.fields
    assert str(back) == str(err) and back.args == err.args


def test_a_raised_error_pickles_whole():
    with pytest.raises(LayoutError) as info:
        kgen.gemm(FakeArray((8, 4), strides=(16, 2)), B)
    back = pickle.loads(pickle.dumps(info.value))
    assert isinstance(back, LayoutError) and back.remedy == info.value.remedy and ".copy()" in back.remedy


# ---------------------------------------------------------------- settings

@pytest.mark.parametrize("env,raw,attr", [
    ("KGEN_BENCH_RUNS", "abc", "bench_runs"),
    ("KGEN_COMPILE_WORKERS", "2.5", "compile_workers"),
    ("KGEN_TRIAL_TIMEOUT", "soon", "trial_timeout_s"),
    ("KGEN_SEED", "0x", "seed"),
])
def test_a_malformed_setting_raises_setting_error(monkeypatch, env, raw, attr):
    monkeypatch.setenv(env, raw)
    with pytest.raises(SettingError) as info:
        getattr(knobs, attr)
    err = info.value
    assert err.fields == {"env": env, "raw": raw}
    assert env in err.message and repr(raw) in err.message and env in err.remedy


def test_a_well_formed_setting_is_read_at_access_time(monkeypatch):
    monkeypatch.setenv("KGEN_BENCH_RUNS", "40")
    assert knobs.bench_runs == 40
    monkeypatch.delenv("KGEN_BENCH_RUNS")
    assert knobs.bench_runs == 25


def test_a_host_c_is_a_device_error():
    raises(DeviceError, A, B, np.zeros((8, 6), np.float32))


class _TorchLike(FakeArray):
    """A stand-in array that kgen.arrays takes for a PyTorch tensor (no PyTorch needed)."""

    __module__ = "torch.fake"

    def data_ptr(self):
        return BASE


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_operands_of_two_array_libraries_are_an_input_error(dtype):
    err = raises(InputError, FakeArray((8, 4), dtype), _TorchLike((4, 6), dtype))
    assert "mix array libraries" in err.message and "a is cai" in err.message and "b is torch" in err.message
    assert "one library" in err.remedy
