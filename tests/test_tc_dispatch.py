"""kgen.gemm's tensor-core route with fake arrays and a fake launcher (kernels really compile):
which family, which arguments, which errors; the command line's routing."""

from __future__ import annotations


import numpy as np
import pytest

import kgen
from kgen.errors import DtypeError, KgenError, LayoutError, ShapeError
from kgen.kernels.gemm.mma import GemmMma
from kgen.kernels.gemm.route import gemm_request, uses_tensor_cores
from kgen.measurement import Measurement, Provenance, Record
from kgen.problem import Target

from fakes import BASE, FakeArray, fake_dispatch

# an sm_80 device: the portable family runs everything (the Hopper one needs sm_90a and a driver
# to encode its tensor maps); routing on the H200 is checked without launching
TARGET = Target(name="NVIDIA A100-SXM4-80GB", cc=(8, 0), sm_count=108, smem_per_block=48 * 1024,
                smem_per_block_optin=163 * 1024, smem_per_sm=164 * 1024)
H200 = Target.h200()
MMA = GemmMma()


@pytest.fixture
def fake():
    with fake_dispatch(TARGET) as f:
        yield f


def _args(launch):
    return [x.item() if hasattr(x, "item") else x for x in launch.args]


def test_float16_goes_to_the_tensor_cores_with_pointers_sizes_and_leading_dims(fake):
    a = FakeArray((100, 64), "float16")
    bt = FakeArray((48, 64), "float16", ptr=BASE + 0x100_0000)     # B given as a transposed view
    c = kgen.gemm(a, bt.T)
    assert c.dtype == np.float16 and c.shape == (100, 48)
    (kernel, launch), = fake.launcher.launches
    assert kernel.entry.startswith("gemm_mma_f16_nt_")
    args = _args(launch)
    assert args[:4] == [a.ptr, bt.ptr, c.ptr, 0]                    # no bias
    assert args[4:10] == [100, 48, 64, 64, 64, 48]                  # m n k lda ldb ldc
    assert args[10:] == [1.0, 0.0]
    problem = MMA.problem(100, 48, 64, "float16", "NT")
    geo = MMA.launch(problem, fake.dispatcher.choose(MMA, problem, TARGET).config)
    assert (launch.grid, launch.block, launch.shared_mem) == (geo.grid, geo.block, geo.shared_mem)


def test_a_repeated_call_reuses_the_plan(fake):
    a, b = FakeArray((64, 64), "float16"), FakeArray((64, 64), "float16", ptr=BASE + 0x100_0000)
    kgen.gemm(a, b)
    kgen.gemm(a, b)
    assert len(fake.launcher.kernels) == 1 and len(fake.launcher.launches) == 2


def test_uint16_is_bfloat16_only_when_told(fake):
    a, b = FakeArray((32, 16), "uint16"), FakeArray((16, 8), "uint16", ptr=BASE + 0x100_0000)
    with pytest.raises(DtypeError, match="dtype='bfloat16'"):
        kgen.gemm(a, b)
    c = kgen.gemm(a, b, dtype="bfloat16")
    assert c.dtype == np.uint16
    assert "_bf16_nn_" in fake.launcher.launches[0][0].entry     # (32 x 8 x 16: gemm_skinny's)
    out = kgen.gemm(a, b, dtype="bfloat16", out_dtype="float32")
    assert out.dtype == np.float32


def test_bias_and_activation_are_fused_into_one_launch(fake):
    a, b = FakeArray((64, 32), "float16"), FakeArray((32, 40), "float16", ptr=BASE + 0x100_0000)
    bias = FakeArray((40,), "float16", ptr=BASE + 0x200_0000)
    kgen.gemm(a, b, bias=bias, activation="gelu")
    (kernel, launch), = fake.launcher.launches
    assert _args(launch)[3] == bias.ptr
    loaded = [x for x in fake.dispatcher._loaded.values()][0]
    assert loaded.problem["epilogue"] == "bias_gelu"
    with pytest.raises(ShapeError, match="one value per column"):
        kgen.gemm(a, b, bias=FakeArray((64,), "float16"))
    with pytest.raises(DtypeError, match="bias is float32"):
        kgen.gemm(a, b, bias=FakeArray((40,), "float32"))
    with pytest.raises(KgenError, match="unknown activation"):
        kgen.gemm(a, b, activation="tanh")


def test_float32_is_ieee_unless_tf32_is_asked_for(fake):
    a, b = FakeArray((64, 64)), FakeArray((64, 64), ptr=BASE + 0x100_0000)
    kgen.gemm(a, b)
    assert fake.launcher.launches[-1][0].entry.startswith("gemm_simt_f32_")
    kgen.gemm(a, b, precision="tf32")
    assert fake.launcher.launches[-1][0].entry.startswith("gemm_mma_tf32_")
    with pytest.raises(KgenError, match="precision='tf32'"):
        kgen.gemm(a, b, activation="relu")
    with pytest.raises(DtypeError, match="float32 inputs"):
        kgen.gemm(FakeArray((8, 8), "float16"), FakeArray((8, 8), "float16"), precision="tf32")


def test_bad_operands_raise_typed_errors(fake):
    a = FakeArray((64, 32), "float16")
    with pytest.raises(ShapeError, match="inner dimensions"):
        kgen.gemm(a, FakeArray((31, 8), "float16"))
    with pytest.raises(DtypeError, match="a is float16 and b is float64"):
        kgen.gemm(a, FakeArray((32, 8), "float64"))
    with pytest.raises(LayoutError, match="neither row-major"):
        kgen.gemm(a, FakeArray((32, 8), "float16", strides=(16, 2)))
    with pytest.raises(ShapeError, match="c has shape"):
        kgen.gemm(a, FakeArray((32, 8), "float16"), FakeArray((64, 9), "float16"))
    with pytest.raises(DtypeError, match="can write"):
        kgen.gemm(a, FakeArray((32, 8), "float16"), out_dtype="float64")


def test_a_tuned_record_is_used(fake):
    problem = MMA.problem(256, 256, 256, "float16", "NN")
    space = MMA.space(problem, TARGET)
    config = next(c for c in space.sample(50, seed=4) if c.name != MMA.default_config(problem, TARGET).name)
    prov = Provenance(device=TARGET.name, cc="8.0", template_digest=MMA.template_digest())
    fake.dispatcher.db.commit([Record("gemm_mma", Measurement(config.name, config.as_dict(), problem.key,
                                                              times_ms=(0.01,) * 5), prov)])
    kgen.gemm(FakeArray((256, 256), "float16"), FakeArray((256, 256), "float16", ptr=BASE + 0x100_0000))
    assert fake.launcher.launches[0][0].entry == config.name


def test_routing_by_dtype_precision_and_epilogue():
    assert not uses_tensor_cores("float32", None, "none", None)
    assert uses_tensor_cores("float32", "tf32", "none", None)
    assert uses_tensor_cores("float64", None, "none", None)
    (spec, problem), = gemm_request("gemm", 64, 64, 64, "bfloat16", "TN", TARGET, epilogue="bias_relu")
    assert spec.family == "gemm_mma" and problem["epilogue"] == "bias_relu" and problem["layout"] == "TN"
    # on the H200 the Hopper family comes first where TMA can read the operands
    found = gemm_request("gemm", 64, 64, 64, "bfloat16", "TN", H200)
    assert [s.family for s, _ in found] == ["gemm_wgmma", "gemm_mma"]
    found = gemm_request("gemm", 64, 63, 63, "bfloat16", "NN", H200)     # 126-byte rows: no TMA
    assert [s.family for s, _ in found] == ["gemm_mma"]
    (spec, _), = gemm_request("gemm", 64, 64, 64, "float64", "NN", H200)
    assert spec.family == "gemm_mma"
    (spec, problem), = gemm_request("gemm", 64, 64, 64, "float32", "NN", TARGET)
    assert spec.family == "gemm" and problem.family == "gemm"
    with pytest.raises(KgenError, match="not a GEMM family"):
        gemm_request("vector_add", 1, 1, 1, "float32", "NN", TARGET, precision="tf32")


def test_cli_routes_tensor_core_dtypes():
    from kgen.cli import _request

    shape = ["--m", "128", "--n", "64", "--k", "32"]
    spec, problem = _request(["gemm", *shape, "--dtype", "float16", "--layout", "nt", "--out-dtype", "float32"], TARGET)
    assert spec.family == "gemm_mma" and problem["out_dtype"] == "float32" and problem["layout"] == "NT"
    spec, problem = _request([*shape, "--precision=tf32"], TARGET)          # the default family: gemm
    assert spec.family == "gemm_mma" and problem["precision"] == "tf32"


def test_unaligned_operands_are_staged_for_the_hopper_family_where_that_wins(monkeypatch):
    from kgen.ops.gemm_tc import make_plan

    monkeypatch.setenv("KGEN_VENDOR", "0")
    with fake_dispatch(H200) as f:
        a = FakeArray((4096, 4095), "float16")                      # rows of 8190 bytes: no TMA
        b = FakeArray((4095, 4096), "float16", ptr=BASE + 0x1000_0000)
        plan = make_plan(f.dispatcher, a, b, None, None, None, None, None, None)
        assert plan.spec.family == "gemm_wgmma" and plan.staging.stage == (True, False)
        assert plan.problem["align_a"] == 8 and plan.staging.lds == (4096, 4096)
        assert 0 < plan.staging.cost_ms() < 0.1
        monkeypatch.setenv("KGEN_STAGING", "0")
        plan = make_plan(f.dispatcher, a, b, None, None, None, None, None, None)
        assert plan.spec.family == "gemm_mma" and plan.staging is None


def test_an_unaligned_output_is_written_by_the_kernel_or_through_padded_rows_where_it_is_large(monkeypatch):
    """C's rows of 2002 bytes (N = 1001) cannot be stored by TMA: a Hopper config storing by TMA
    writes them itself, a row at a time (nothing staged for C). Where only the caller's C makes
    them so (N = 1000, C a view of rows 1001 wide), that config writes into 16-byte rows and
    copies them back, from KGEN_STAGING_C_MIN_BYTES on."""
    from kgen.ops.gemm_tc import make_plan

    monkeypatch.setenv("KGEN_VENDOR", "0")
    with fake_dispatch(H200) as f:
        a = FakeArray((8192, 16), "float16")
        b = FakeArray((16, 1001), "float16", ptr=BASE + 0x1000_0000)      # B's rows unaligned too
        plan = make_plan(f.dispatcher, a, b, None, None, None, None, None, None)
        assert plan.spec.family == "gemm_wgmma" and plan.config.get("TMA_STORE", 0) == 1
        assert plan.spec.rows_by_band(plan.problem, plan.config)
        assert plan.staging.stage == (False, True) and plan.staging.out is None and plan.ldc == 1001
        b = FakeArray((16, 1000), "float16", ptr=BASE + 0x1000_0000)
        c = FakeArray((8192, 1000), "float16", ptr=BASE + 0x2000_0000, strides=(1001, 1))
        plan = make_plan(f.dispatcher, a, b, c, None, None, None, None, None)
        assert plan.config.get("TMA_STORE", 0) == 1 and not plan.spec.rows_by_band(plan.problem, plan.config)
        assert plan.staging.out == (8192, 1000, "float16") and plan.staging.ldc == 1000
        assert plan.ldc == 1001 and plan.staging.label == "c"
        monkeypatch.setenv("KGEN_STAGING_C_MIN_BYTES", str(1 << 30))
        plan = make_plan(f.dispatcher, a, b, c, None, None, None, None, None)
        assert plan.staging is None
        monkeypatch.delenv("KGEN_STAGING_C_MIN_BYTES")
        plan = make_plan(f.dispatcher, a, b, None, None, None, None, None, None)   # aligned rows: nothing staged
        assert plan.staging is None


def test_a_tensor_core_output_that_aliases_an_input_is_refused(fake):
    from kgen.errors import InputError

    a, b = FakeArray((64, 64), "float16"), FakeArray((64, 64), "float16", ptr=BASE + 0x100_0000)
    kgen.gemm(a, b, FakeArray((64, 64), "float16", ptr=BASE + 0x200_0000))
    with pytest.raises(InputError, match="overlaps"):
        kgen.gemm(a, b, FakeArray((64, 64), "float16", ptr=b.ptr + 128))    # the same plan's signature


def test_a_float32_call_with_k_0_and_a_small_side_stays_on_the_cuda_core_family(fake, monkeypatch):
    """C = beta * C: gemm_skinny streams k and has no config for K = 0."""
    monkeypatch.setenv("KGEN_SKINNY_MAX", "16")
    monkeypatch.setenv("KGEN_VENDOR", "0")
    a, b = FakeArray((4, 0), "float32"), FakeArray((0, 3), "float32", ptr=BASE + 0x100_0000)
    assert kgen.gemm_choice(a, b).family == "gemm"
    assert kgen.gemm_choice(FakeArray((4, 5), "float32"), FakeArray((5, 3), "float32", ptr=BASE + 0x100_0000)
                            ).family == "gemm_skinny"


@pytest.mark.parametrize("skinny_max", ["0", "16"])
def test_a_skinny_float32_call_may_go_to_gemm_skinny(fake, monkeypatch, skinny_max):
    """float32 with no tf32 is the CUDA-core family's; a small side within KGEN_SKINNY_MAX and no
    tuned record of it sends the call to gemm_skinny (float32 computed exactly), with X (the
    small operand) and Y as its first arguments."""
    monkeypatch.setenv("KGEN_SKINNY_MAX", skinny_max)
    monkeypatch.setenv("KGEN_VENDOR", "0")
    a = FakeArray((300, 8), "float32")
    b = FakeArray((300, 4), "float32", ptr=BASE + 0x100_0000)      # N = 4: the small side
    c = kgen.gemm(a.T, b)                                                 # (8 x 300) @ (300 x 4)
    assert c.shape == (8, 4) and c.dtype == np.float32
    (kernel, launch), = fake.launcher.launches
    choice = kgen.gemm_choice(a.T, b)
    if skinny_max == "0":
        assert kernel.entry.startswith("gemm_simt_f32_tn_") and choice.family == "gemm"
        return
    assert kernel.entry.startswith("gemm_skinny_f32_tn_") and choice.family == "gemm_skinny"
    args = _args(launch)
    assert args[:3] == [b.ptr, a.ptr, c.ptr]          # N small: X = B^T, Y = A^T
    assert args[4:7] == [4, 8, 300]                   # small side, big side, k
