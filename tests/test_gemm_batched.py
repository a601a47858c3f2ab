"""Batched GEMM with no GPU: problems, the space (gemm_mma's, renamed), the default tile counting
every batch, rendering (the batch strides compiled in), launch geometry and arguments, sampled
configs compiled for sm_90 with HMMA in their SASS, and ``kgen.gemm``'s checks of 3-D operands
before any launch."""

from __future__ import annotations

import re

import pytest

from kgen.errors import DtypeError, FieldError, InputError, LayoutError, ShapeError
from kgen.fields import parse_args
from kgen.kernels.gemm.batched import GemmBatched, batch_strides, batched_problem, leading_dims
from kgen.problem import Problem, Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, sass_or_skip
from fakes import BASE, FakeArray

SPEC = GemmBatched()


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def test_problem_key_strides_and_registration():
    p = batched_problem(8, 100, 60, 40, "float16", "TN", "b", epilogue="bias")
    assert Problem.from_key(p.key) == p and isinstance(get_spec("gemm_batched"), GemmBatched)
    assert (p["batch"], p["broadcast"], p["layout"]) == (8, "b", "TN")
    assert batch_strides(p) == (100 * 40, 0, 100 * 60)
    assert batch_strides(batched_problem(8, 100, 60, 40, broadcast="a")) == (0, 40 * 60, 100 * 60)
    assert leading_dims(p) == (100, 60, 60)          # A stored K x M: lda = M; B N-major: ldb = N


@pytest.mark.parametrize("args,kw,error", [
    ((0, 8, 8, 8), {}, ShapeError), ((70000, 8, 8, 8), {}, ShapeError), ((True, 8, 8, 8), {}, ShapeError),
    ((2, 0, 8, 8), {}, ShapeError), ((2, 8, 8, 8), {"broadcast": "c"}, InputError),
    ((2, 8, 8, 8), {"dtype": "int8"}, DtypeError),
])
def test_problem_validation(args, kw, error):
    with pytest.raises(error):
        batched_problem(*args, **kw)


def test_request_from_command_line_fields(target):
    values = parse_args(SPEC.fields(), ["--batch", "64", "--m", "512", "--n", "512", "--k", "64", "--dtype",
                                        "bfloat16", "--layout", "nt"], "gemm_batched")
    spec, problem = SPEC.request(target, **values)
    assert spec is SPEC and problem == batched_problem(64, 512, 512, 64, "bfloat16", "NT")
    with pytest.raises(FieldError):
        parse_args(SPEC.fields(), ["--m", "8", "--n", "8", "--k", "8"], "gemm_batched")      # batch is required
    with pytest.raises(InputError):
        SPEC.request(target, **parse_args(SPEC.fields(), ["--batch", "2", "--m", "8", "--n", "8", "--k", "8",
                                                           "--dtype", "float32"], "gemm_batched"))


def test_default_tile_counts_every_batch(target):
    one = SPEC.default_config(batched_problem(1, 512, 512, 512), target)
    many = SPEC.default_config(batched_problem(256, 512, 512, 512), target)
    area = lambda c: c["BM"] * c["BN"]       # noqa: E731
    assert area(many) > area(one)            # 256 batches fill the SMs with large tiles; one batch needs small ones
    for p in (batched_problem(64, 33, 70, 17, "float16", "TT", "a"), batched_problem(3, 1, 1, 1)):
        space = SPEC.space(p, target)
        config = SPEC.default_config(p, target)
        assert space.is_valid(config.as_dict()) and config.name.startswith("gemm_batched_")


def test_render_launch_and_arguments(target):
    p = batched_problem(12, 100, 72, 40, "bfloat16", "NT", "b", epilogue="bias_relu")
    config = SPEC.default_config(p, target)
    code = render(SPEC, p, config, target).code
    assert "A += (long long)blockIdx.y * 4000ll;" in code and "B += (long long)blockIdx.y * 0ll;" in code
    assert "C += (long long)blockIdx.y * 7200ll;" in code
    v = config.as_dict()
    launch = SPEC.launch(p, config)
    assert launch.grid == (-(-100 // v["BM"]) * -(-72 // v["BN"]), 12, 1)
    args = SPEC.args(p, config, {"a": BASE, "b": BASE + 1024, "c": BASE + 4096, "bias": BASE + 8192, "alpha": 2.0})
    assert [int(x) for x in args[:4]] == [BASE, BASE + 1024, BASE + 4096, BASE + 8192]
    assert [int(x) for x in args[4:10]] == [100, 72, 40, 40, 40, 72]
    assert [float(x) for x in args[10:]] == [2.0, 0.0]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()

    def jobs():
        for dtype in ("bfloat16", "float16"):
            for i, (layout, broadcast) in enumerate((("NN", "none"), ("TN", "b"), ("NT", "a"))):
                p = batched_problem(16, 200, 136, 72, dtype, layout, broadcast, epilogue=("none", "bias", "gelu")[i])
                space = SPEC.space(p, target)
                for config in space.sample(17, seed=i):
                    yield dtype, p, config, render(SPEC, p, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "gemm_batched")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sampled_configs_compile_with_hmma(compiled, dtype):
    rows = compiled[dtype]
    assert len(rows) >= 50 and compile_failures(rows) == []
    for _, config, _, result in rows[:: max(1, len(rows) // 6)]:
        assert re.search(r"\bHMMA\.", sass_or_skip(result.binary.cubin)), config.name


# ---------------------------------------------------------------- kgen.gemm on 3-D operands, before any launch

def _gemm(a, b, **kw):
    import kgen

    return kgen.gemm(a, b, **kw)


@pytest.mark.parametrize("a,b,kw,error", [
    (FakeArray((4, 8, 16), "float16"), FakeArray((4, 12, 8), "float16", ptr=BASE + 4096), {}, ShapeError),
    (FakeArray((4, 8, 16), "float16"), FakeArray((3, 16, 8), "float16", ptr=BASE + 4096), {}, ShapeError),
    (FakeArray((4, 8, 16), "float16"), FakeArray((4, 16, 8), "float64", ptr=BASE + 4096), {}, DtypeError),
    (FakeArray((4, 8, 16), "float32"), FakeArray((4, 16, 8), "float32", ptr=BASE + 4096), {}, DtypeError),
    (FakeArray((4, 8, 16), "float16", strides=(256, 16, 1)), FakeArray((4, 16, 8), "float16", ptr=BASE + 4096), {},
     LayoutError),                                                                   # batch not dense
    (FakeArray((4, 8, 16), "float16", strides=(128, 1, 8)), FakeArray((4, 16, 8), "float16", ptr=BASE + 4096), {},
     None),                                                                          # transposed matrices: fine
    (FakeArray((2, 4, 8, 16), "float16"), FakeArray((16, 8), "float16", ptr=BASE + 4096), {}, ShapeError),
    (FakeArray((4, 8, 16), "float16"), FakeArray((4, 16, 8), "float16", ptr=BASE + 4096), {"out_dtype": "float64"},
     DtypeError),
])
def test_checks_before_any_launch(a, b, kw, error, monkeypatch):
    import kgen.ops.gemm_batched as batched

    launched = []
    monkeypatch.setattr(batched, "_run", lambda problem, device, kind, operands, arrays: launched.append(
        (problem, device, kind, operands)))
    monkeypatch.setattr(batched, "new_array", lambda like, shape, dtype: FakeArray(shape, "float16", ptr=BASE + (1 << 24)))
    if error is None:
        _gemm(a, b)
        (problem, device, kind, operands), = launched
        assert problem["layout"] == "TN" and problem["batch"] == 4
        assert operands["a"] == BASE and operands["c"] == BASE + (1 << 24)
        return
    with pytest.raises(error):
        _gemm(a, b, **kw)
    assert not launched


def test_cublas_is_the_candidate_of_untuned_batches_unless_turned_off(target, monkeypatch):
    from kgen.dispatch import Dispatcher
    from kgen.kernels.gemm import vendor

    monkeypatch.setattr(vendor, "_torch_installed", lambda: True)     # (the vendor call is PyTorch's)
    monkeypatch.setenv("KGEN_VENDOR", "1")                            # (the tests' default is 0)
    problem = batched_problem(16, 128, 128, 64, "bfloat16", "NT")
    assert SPEC.vendor_supported(problem)
    assert Dispatcher().choose(SPEC, problem, target).vendor
    monkeypatch.setenv("KGEN_VENDOR", "0")
    assert not Dispatcher().choose(SPEC, problem, target).vendor


def test_a_c_overlapping_an_input_is_refused():
    a = FakeArray((4, 8, 16), "float16")
    b = FakeArray((4, 16, 8), "float16", ptr=BASE + 4096)
    with pytest.raises(InputError):
        _gemm(a, b, c=FakeArray((4, 8, 8), "float16", ptr=BASE + 4096 + 128))


def test_an_empty_batch_launches_nothing(monkeypatch):
    import kgen.ops.gemm_batched as batched

    monkeypatch.setattr(batched, "_run", lambda *args: pytest.fail("launched"))
    monkeypatch.setattr(batched, "new_array", lambda like, shape, dtype: FakeArray(shape, "float16", ptr=BASE + 4096))
    out = _gemm(FakeArray((0, 8, 16), "float16"), FakeArray((0, 16, 8), "float16", ptr=BASE + 1024))
    assert out.shape == (0, 8, 8)


def test_the_alignment_is_the_pointers(monkeypatch):
    import kgen.ops.gemm_batched as batched

    launched = []
    monkeypatch.setattr(batched, "_run", lambda problem, *args: launched.append(problem))
    monkeypatch.setattr(batched, "new_array", lambda like, shape, dtype: FakeArray(shape, "float16", ptr=BASE + (1 << 24)))
    _gemm(FakeArray((4, 8, 16), "float16", ptr=BASE + 2), FakeArray((4, 16, 8), "float16", ptr=BASE + 4096))
    assert (launched[0]["align_a"], launched[0]["align_b"]) == (1, 8)


def test_one_weight_for_every_batch(monkeypatch):
    """A row-major batch times one matrix is one 2-D GEMM where the array can be reshaped; an
    array that cannot (a bare __cuda_array_interface__ object) runs as a batch with B broadcast."""
    import kgen.ops.gemm_batched as batched

    launched, flattened = [], []
    monkeypatch.setattr(batched, "_run", lambda problem, *args: launched.append(problem))
    monkeypatch.setattr(batched, "new_array", lambda like, shape, dtype: FakeArray(shape, "float16", ptr=BASE + (1 << 24)))
    _gemm(FakeArray((4, 8, 16), "float16"), FakeArray((16, 8), "float16", ptr=BASE + 4096))
    assert launched[0]["broadcast"] == "b" and launched[0]["batch"] == 4

    class Reshapable(FakeArray):
        def reshape(self, *shape):
            flattened.append(shape)
            return FakeArray(shape, self.dtype, self.ptr)

    monkeypatch.setattr(batched, "_flattened", lambda gemm, a, b, c, alpha, beta, kw: flattened.append(a.shape))
    _gemm(Reshapable((4, 8, 16), "float16"), FakeArray((16, 8), "float16", ptr=BASE + 4096))
    assert flattened == [(4, 8, 16)] and len(launched) == 1
