"""The first-call race (kgen.ops.race) with fake arrays and a launcher that answers scripted
times (kernels really compile): which candidates a problem no record decides races, which one
it keeps, that the caller's output is never the race's, and that no race runs where it may not
(KGEN_RACE=0, a launcher that cannot time, a race that could not run)."""

from __future__ import annotations

import contextlib

import pytest

import kgen
from kgen.problem import Target

from fakes import BASE, FakeArray, FakeLauncher, fake_dispatch

# an sm_80 device: the portable families run everything without a driver (see test_tc_dispatch)
TARGET = Target(name="NVIDIA A100-SXM4-80GB", cc=(8, 0), sm_count=108, smem_per_block=48 * 1024,
                smem_per_block_optin=163 * 1024, smem_per_sm=164 * 1024)


class TimingLauncher(FakeLauncher):
    """A fake launcher that can time: each race's candidates get ``times`` in order (None: the
    race could not run, as during graph capture)."""

    def __init__(self, times):
        super().__init__()
        self.times = times
        self.races: list[int] = []

    def time_calls(self, calls, runs):
        assert runs >= 1 and all(callable(c) for c in calls)
        self.races.append(len(calls))
        return None if self.times is None else list(self.times[:len(calls)])


@contextlib.contextmanager
def racing(times, monkeypatch, vendor=True, race=True, target=TARGET):
    monkeypatch.setenv("KGEN_VENDOR", "1" if vendor else "0")
    monkeypatch.setenv("KGEN_RACE", "1" if race else "0")          # (the test session's default: off)
    monkeypatch.setattr("kgen.ops.race.on_caller_stream", lambda kind, device: contextlib.nullcontext())
    with fake_dispatch(target) as fake:
        fake.dispatcher._launcher = fake.launcher = TimingLauncher(times)
        yield fake


def _half(m=256, n=256, k=64):
    return FakeArray((m, k), "float16"), FakeArray((k, n), "float16", ptr=BASE + 0x100_0000)


def test_the_generated_pick_that_wins_serves_every_later_call(monkeypatch):
    with racing([0.020, 0.010], monkeypatch) as fake:            # vendor 20 us, gemm_mma's pick 10 us
        a, b = _half()
        c = FakeArray((256, 256), "float16", ptr=BASE + 0x200_0000)
        choice = kgen.gemm_choice(a, b, c)
        assert (choice.family, choice.how) == ("gemm_mma", "raced") and choice.config != "cublas"
        assert fake.launcher.races == [2]
        kgen.gemm(a, b, c)
        kgen.gemm(a, b, c)
        assert fake.launcher.races == [2]                        # decided once, for the problem
        launches = [launch for _, launch in fake.launcher.launches]
        assert len(launches) == 2 and all(int(launch.args[2]) == c.ptr for launch in launches)
        assert fake.launcher.allocated, "the race wrote a scratch output, not the caller's c"
        loaded = fake.dispatcher.loaded("gemm_mma")
        assert loaded[-1][1].how == "raced" and loaded[-1][1].time_ms == pytest.approx(0.010)


def test_the_vendor_library_that_wins_is_kept_with_its_time(monkeypatch):
    with racing([0.005, 0.010], monkeypatch) as fake:
        a, b = _half()
        choice = kgen.gemm_choice(a, b)
        assert (choice.config, choice.how) == ("cublas", "raced")
        assert fake.launcher.races == [2] and not fake.launcher.launches
        again = kgen.gemm_choice(a, b)      # a new plan ranks the race's measured time first: no new race
        assert again.config == "cublas" and fake.launcher.races == [2]


@pytest.mark.parametrize("generated_ms, kept", [(0.0098, "cublas"), (0.0095, "gemm_mma")])
def test_a_generated_pick_must_beat_the_vendor_library_by_the_margin(monkeypatch, generated_ms, kept):
    with racing([0.010, generated_ms], monkeypatch):          # the default margin: 3 %
        a, b = _half()
        choice = kgen.gemm_choice(a, b)
        assert choice.how == "raced" and (choice.config == "cublas") == (kept == "cublas")
        assert kept == "cublas" or choice.family == kept


def test_two_families_race_without_the_vendor(monkeypatch):
    monkeypatch.setenv("KGEN_SKINNY_DTYPES", "float16")
    with racing([0.030, 0.010], monkeypatch, vendor=False) as fake:
        a, b = _half(2000, 8, 512)                  # a side of 8: gemm_skinny and gemm_mma both run it
        first = kgen.gemm_choice(a, b)
        assert fake.launcher.races == [2] and first.how == "raced"
        assert first.family == "gemm_mma"          # second in rank (skinny ranks first), faster here


def test_a_half_problem_with_a_small_side_races_gemm_skinny_whatever_kgen_skinny_dtypes_says(monkeypatch):
    """gemm_skinny is no float16 candidate on a ranking alone (KGEN_SKINNY_DTYPES' default), but a
    race times it beside the tile family; where it wins, a later signature of the problem keeps
    it without a new race."""
    monkeypatch.delenv("KGEN_SKINNY_DTYPES", raising=False)
    winners = {}
    for times in ([0.010, 0.030], [0.030, 0.010]):
        with racing(times, monkeypatch, vendor=False) as fake:
            a, b = _half(2000, 8, 512)
            choice = kgen.gemm_choice(a, b)
            assert fake.launcher.races == [2] and choice.how == "raced"
            winners[choice.family] = times
            if choice.family == "gemm_skinny":
                c = FakeArray((2000, 8), "float16", ptr=BASE + 0x200_0000, strides=(16, 1))
                assert kgen.gemm_choice(a, b, c).family == "gemm_skinny" and fake.launcher.races == [2]
    assert set(winners) == {"gemm_mma", "gemm_skinny"}              # each won where it was timed faster
    with racing(None, monkeypatch, vendor=False, race=False):
        assert kgen.gemm_choice(*_half(2000, 8, 512)).family == "gemm_mma"


def test_a_few_outputs_over_a_long_k_race_gemm_skinnys_pick_spread_over_the_sms(monkeypatch):
    """16 x 1 x 5735: gemm_skinny's model picks one unsplit block; the race also times its best
    config that fills half the SMs (``GemmSkinny.spread_choice``), and keeps it where faster."""
    from kgen.kernels.gemm.problem import tc_problem
    from kgen.registry import get_spec

    skinny = get_spec("gemm_skinny")
    problem = tc_problem("gemm_skinny", 16, 1, 5735, "float16")
    spread = skinny.spread_choice(problem, TARGET, skinny.model_choice(problem, TARGET)[0])[0]
    with racing([0.030, 0.030, 0.030, 0.010], monkeypatch) as fake:
        a, b = _half(16, 1, 5735)
        choice = kgen.gemm_choice(a, b)
        assert fake.launcher.races == [4]            # cuBLAS, gemm_mma, gemm_skinny's pick, its spread pick
        assert (choice.family, choice.how, choice.config) == ("gemm_skinny", "raced", spread.name)


def test_exact_float32_with_a_few_outputs_races_the_spread_pick_then_the_vendor(monkeypatch):
    """3 x 3 x 5256 float32 (exact: gemm_skinny alone): its pick and its spread pick race first,
    then the winner races cuBLAS (each race is given the times 30 us, then 10 us); later plans
    of the problem race no more."""
    from kgen.dispatch import default_dispatcher
    from kgen.kernels.gemm.problem import tc_problem
    from kgen.ops import gemm_simt
    from kgen.registry import get_spec

    skinny = get_spec("gemm_skinny")
    problem = tc_problem("gemm_skinny", 3, 3, 5256, "float32")
    spread = skinny.spread_choice(problem, TARGET, skinny.model_choice(problem, TARGET)[0])[0]
    with racing([0.030, 0.010], monkeypatch) as fake:
        a, b = FakeArray((3, 5256)), FakeArray((5256, 3), ptr=BASE + 0x100_0000)
        choice = kgen.gemm_choice(a, b)
        assert fake.launcher.races == [2, 2]
        assert (choice.family, choice.how, choice.config) == ("gemm_skinny", "raced", spread.name)
        plan = gemm_simt.make_plan(default_dispatcher(), a, b, None)
        assert plan.delegate is not None and plan.delegate.config.name == spread.name
        assert fake.launcher.races == [2, 2]


def test_the_race_takes_as_many_families_as_the_knob_says(monkeypatch):
    monkeypatch.setenv("KGEN_SKINNY_DTYPES", "float16")
    monkeypatch.setenv("KGEN_RACE_FAMILIES", "1")
    with racing([0.030, 0.010, 0.001], monkeypatch) as fake:
        a, b = _half(2000, 8, 512)
        kgen.gemm_choice(a, b)
        assert fake.launcher.races == [2]           # the vendor library and the best-ranked family


def test_the_race_times_the_best_families_next_picks_when_asked(monkeypatch):
    """KGEN_RACE_TC_PICKS=3: the best-ranked tensor-core family's next two model picks race
    beside its pick; the fastest (here the third) is kept for the problem."""
    from kgen.kernels.gemm import cost
    from kgen.kernels.gemm.problem import tc_problem
    from kgen.registry import get_spec

    monkeypatch.setenv("KGEN_RACE_TC_PICKS", "3")
    with racing([0.030, 0.020, 0.010], monkeypatch, vendor=False) as fake:
        a, b = _half()
        choice = kgen.gemm_choice(a, b)
        ranked = [c.name for c, _ in cost.picks(get_spec("gemm_mma"), tc_problem("gemm_mma", 256, 256, 64, "float16"),
                                                  TARGET, 3)]
        assert fake.launcher.races == [3] and (choice.family, choice.how) == ("gemm_mma", "raced")
        assert choice.config == ranked[2]


def test_float32_on_cuda_cores_races_the_vendor_library(monkeypatch):
    with racing([0.050, 0.020, 0.030, 0.040], monkeypatch) as fake:
        a, b = FakeArray((300, 200)), FakeArray((200, 100), ptr=BASE + 0x100_0000)
        choice = kgen.gemm_choice(a, b)
        assert (choice.family, choice.how) == ("gemm", "raced") and choice.config.startswith("gemm_simt_f32_")
        kgen.gemm(a, b)
        assert fake.launcher.races == [4] and len(fake.launcher.launches) == 1   # cuBLAS, the model's 3 picks


@pytest.mark.parametrize("picks", [3, 1])
def test_float32_generated_only_races_the_models_next_picks(picks, monkeypatch):
    """With KGEN_VENDOR=0 an untuned float32 problem on the CUDA cores times the cost model's
    KGEN_RACE_PICKS best-ranked configs and keeps the fastest (here the second); with one pick
    there is nothing to race and the model's pick runs."""
    from kgen.kernels.gemm import cost
    from kgen.kernels.gemm.problem import gemm_problem
    from kgen.registry import get_spec

    monkeypatch.setenv("KGEN_RACE_PICKS", str(picks))
    with racing([0.050, 0.020, 0.030], monkeypatch, vendor=False) as fake:
        a, b = FakeArray((300, 200)), FakeArray((200, 100), ptr=BASE + 0x100_0000)
        choice = kgen.gemm_choice(a, b)
        ranked = [c.name for c, _ in cost.picks(get_spec("gemm"), gemm_problem(300, 100, 200), TARGET, 3)]
        if picks == 3:
            assert fake.launcher.races == [3] and (choice.config, choice.how) == (ranked[1], "raced")
        else:
            assert fake.launcher.races == [] and (choice.config, choice.how) == (ranked[0], "model")
        kgen.gemm(a, b)
        assert fake.launcher.races == ([3] if picks == 3 else [])


def test_a_float32_small_side_keeps_the_exact_family_that_wins_and_races_once(monkeypatch):
    """An exact float32 call with a side of 16 or less races the vendor library against
    gemm_skinny: where gemm_skinny wins, its own generated choice is what is kept (not the
    library, which is also a candidate of its family's problem where PyTorch is installed) and
    later plans of the problem take it without a new race. The plan the race times is the
    family's kernel, never the library's tf32 call."""
    from kgen.dispatch import default_dispatcher
    from kgen.kernels.gemm import vendor
    from kgen.ops import gemm_simt

    monkeypatch.setattr(vendor, "_torch_installed", lambda: True)
    monkeypatch.setattr(vendor, "_torch_call", lambda problem: lambda *args: None)
    with racing([0.050, 0.010], monkeypatch) as fake:
        a, b = FakeArray((4, 176)), FakeArray((176, 4096), ptr=BASE + 0x100_0000)   # (its pick fills the SMs)
        choice = kgen.gemm_choice(a, b)
        assert (choice.family, choice.how) == ("gemm_skinny", "raced") and fake.launcher.races == [2]
        (_, kept), = fake.dispatcher.loaded("gemm_skinny")
        assert not kept.vendor and kept.time_ms == pytest.approx(0.010)
        for _ in range(2):
            plan = gemm_simt.make_plan(default_dispatcher(), a, b, None)
            assert plan.delegate is not None and plan.delegate.config.name == choice.config
            assert plan.delegate.vendor is None       # never the library, which would read float32 as tf32
        assert fake.launcher.races == [2]


@pytest.mark.parametrize("winner", ["gemm", "gemm_mma"])
def test_a_long_k_tf32_request_races_the_exact_cuda_core_pick(winner, monkeypatch):
    """A tf32 request with a long K and small M and N also times the CUDA-core family's pick
    (float32 exactly): where it wins, the request runs on the CUDA-core path with that kept
    choice and no second race; where the tensor-core pick wins, it runs as before."""
    times = [0.050, 0.020] if winner == "gemm" else [0.020, 0.050]
    with racing(times, monkeypatch, vendor=False) as fake:
        a, b = FakeArray((40, 14440)), FakeArray((14440, 53), ptr=BASE + 0x100_0000)
        c = FakeArray((40, 53), ptr=BASE + 0x200_0000)
        choice = kgen.gemm_choice(a, b, c, precision="tf32")
        assert (choice.family, choice.how) == (winner, "raced") and fake.launcher.races == [2]
        kgen.gemm(a, b, c, precision="tf32")
        kgen.gemm(a, b, c, precision="tf32")
        assert fake.launcher.races == [2]
        launches = fake.launcher.launches          # the two calls (the race's runs are the timer's)
        assert [kernel.entry for kernel, _ in launches] == [choice.config] * 2
        assert all(int(launch.args[2]) == c.ptr for _, launch in launches)
        if winner == "gemm":
            (_, kept), = fake.dispatcher.loaded("gemm")
            assert kept.config.name == choice.config and kept.time_ms == pytest.approx(0.020)


def test_a_short_k_tf32_request_races_no_cuda_core_pick(monkeypatch):
    with racing([0.050, 0.020], monkeypatch, vendor=False) as fake:
        a, b = FakeArray((40, 256)), FakeArray((256, 53), ptr=BASE + 0x100_0000)
        choice = kgen.gemm_choice(a, b, precision="tf32")
        assert choice.family == "gemm_mma" and fake.launcher.races == []      # one candidate: nothing to race


@pytest.mark.parametrize("setting", ["knob off", "no race possible"])
def test_without_a_race_the_ranking_decides_as_before(setting, monkeypatch):
    with racing(None, monkeypatch, race=setting != "knob off") as fake:
        a, b = _half()
        choice = kgen.gemm_choice(a, b)
        assert (choice.config, choice.how) == ("cublas", "vendor")
        assert fake.launcher.races == ([] if setting == "knob off" else [2])


def test_a_launcher_that_cannot_time_never_races(monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "1")
    with fake_dispatch(TARGET):
        choice = kgen.gemm_choice(*_half())
        assert (choice.config, choice.how) == ("cublas", "vendor")


def test_an_untuned_batch_races_cublas_and_the_generated_pick(monkeypatch):
    import kgen.ops.gemm_batched as batched
    from kgen.kernels.gemm import vendor

    monkeypatch.setattr(vendor, "_torch_installed", lambda: True)          # (the batched vendor call is PyTorch's)
    monkeypatch.setattr(batched, "new_array", lambda like, shape, dtype: FakeArray(shape, "float16",
                                                                                    ptr=BASE + (1 << 26)))
    monkeypatch.setattr("kgen.ops.launch.on_caller_stream", lambda kind, device: contextlib.nullcontext())
    with racing([0.050, 0.010], monkeypatch) as fake:
        a = FakeArray((4, 64, 32), "float16", strides=(64 * 32, 32, 1))
        b = FakeArray((4, 32, 48), "float16", ptr=BASE + 0x100_0000, strides=(32 * 48, 48, 1))
        kgen.gemm(a, b)
        kgen.gemm(a, b)
        assert fake.launcher.races == [2]                          # once: the race's time decides from then on
        (_, choice), = fake.dispatcher.loaded("gemm_batched")
        assert choice.how == "raced" and choice.time_ms == pytest.approx(0.010)
        assert len(fake.launcher.launches) == 2                    # the two calls; the race's runs are the timer's


def test_a_batch_with_one_candidate_does_not_race(monkeypatch):
    import kgen.ops.gemm_batched as batched

    monkeypatch.setattr(batched, "new_array", lambda like, shape, dtype: FakeArray(shape, "float16",
                                                                                    ptr=BASE + (1 << 26)))
    monkeypatch.setattr("kgen.ops.launch.on_caller_stream", lambda kind, device: contextlib.nullcontext())
    with racing([0.050, 0.010], monkeypatch, vendor=False) as fake:
        a = FakeArray((4, 64, 32), "float16", strides=(64 * 32, 32, 1))
        b = FakeArray((4, 32, 48), "float16", ptr=BASE + 0x100_0000, strides=(32 * 48, 48, 1))
        kgen.gemm(a, b)
        kgen.gemm(a, b)
        assert fake.launcher.races == [] and len(fake.launcher.launches) == 2


def test_float32_with_a_small_side_races_the_vendor_library_against_the_exact_family(monkeypatch):
    """float32 with a side of 16 or less goes to gemm_skinny (exact float32): the one generated
    candidate there, raced against cuBLAS (and, where the race cannot run, the ranking's cuBLAS)."""
    with racing([0.050, 0.010], monkeypatch) as fake:
        a, b = FakeArray((3000, 200)), FakeArray((200, 8), ptr=BASE + 0x100_0000)
        choice = kgen.gemm_choice(a, b)
        assert (choice.family, choice.how) == ("gemm_skinny", "raced") and fake.launcher.races == [2]
    with racing(None, monkeypatch) as fake:
        assert kgen.gemm_choice(a, b).config == "cublas" and fake.launcher.races == [2]


def test_a_raced_problem_is_still_tuned_in_the_background_when_asked(monkeypatch):
    monkeypatch.setenv("KGEN_TUNE_ON_MISS", "4")
    tuned = []
    with racing([0.020, 0.010], monkeypatch) as fake:
        fake.dispatcher._miss_tuner = lambda spec, problem, target, device, db: tuned.append(problem.key)
        kgen.gemm_choice(*_half())
        for thread in list(fake.dispatcher.background.values()):
            thread.join(5)
        assert len(tuned) == 1 and fake.launcher.races == [2]


def _routed_cases():
    """(route, problem, output operand, output shape) of each family path that races by
    ``race_routed``, on problems that both of its families run on Hopper."""
    from kgen.kernels.conv.problem import conv2d_problem
    from kgen.kernels.gemm.grouped import grouped_problem
    from kgen.kernels.gemm.kgrouped import kgrouped_problem
    from kgen.ops import conv, gemm_grouped, gemm_kgrouped

    return [
        (conv._route(), conv2d_problem(2, 14, 14, 64, 128, 3, 3, padding=1, dtype="float16"), "y", (2, 14, 14, 128)),
        (gemm_grouped._route(), grouped_problem(4, 512, 256, 128, "float16", "NT"), "c", (512, 256)),
        (gemm_kgrouped._route(), kgrouped_problem(4, 128, 256, 2048, "float16"), "c", (4, 128, 256)),
    ]


@pytest.mark.parametrize("case", range(3), ids=["conv2d", "grouped", "kgrouped"])
def test_a_routed_family_path_races_its_families_once_and_keeps_the_faster(case, monkeypatch):
    """conv2d, grouped and K-grouped GEMM: where no measurement decides, the first call times both
    families' picks into a scratch output and the faster serves every later call; each family
    wins where it is timed faster."""
    import numpy as np

    from kgen.arrays import describe
    from kgen.ops.caller import CallerArray
    from kgen.ops.launch import first_ranked, raced_route

    route, problem, output, shape = _routed_cases()[case]
    hopper = Target.h200()

    def ranked(p, device):
        return first_ranked(route, p, device, "a family path")
    winners = set()
    for times in ([0.010, 0.030], [0.030, 0.010]):
        with racing(times, monkeypatch, vendor=False, target=hopper) as fake:
            out = FakeArray(shape, "float16", ptr=BASE + 0x400_0000)
            like = CallerArray(out, "cai", describe(out, "out"), "float16")
            operands = {output: np.uint64(out.ptr)}
            spec, chosen, choice = raced_route(ranked, route, problem, 0, "cai", operands, output, like)
            assert choice.how == "raced" and fake.launcher.races == [2]
            assert len(fake.launcher.allocated) == 1          # the scratch output, never the caller's
            again = raced_route(ranked, route, problem, 0, "cai", operands, output, like)
            assert again[0].family == spec.family and fake.launcher.races == [2]
            winners.add(spec.family)
    assert len(winners) == 2


def test_a_routed_problem_with_one_family_does_not_race(monkeypatch):
    import numpy as np

    from kgen.arrays import describe
    from kgen.ops.caller import CallerArray
    from kgen.ops.launch import first_ranked, raced_route

    route, problem, output, shape = _routed_cases()[0]
    with racing([0.010, 0.030], monkeypatch, vendor=False) as fake:            # sm_80: mma.sync alone
        out = FakeArray(shape, "float16", ptr=BASE + 0x400_0000)
        like = CallerArray(out, "cai", describe(out, "out"), "float16")
        spec, _, choice = raced_route(lambda p, d: first_ranked(route, p, d, "conv2d"), route, problem, 0, "cai",
                                      {output: np.uint64(out.ptr)}, output, like)
        assert spec.family == "conv2d" and choice.how != "raced" and fake.launcher.races == []
