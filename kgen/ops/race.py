"""A first call that no measurement decides: its candidates timed on the call's own operands.

A GEMM problem with no record (neither a tuned config nor the vendor library's time) would
run on a ranking alone: the vendor library before every cost model's pick, or, with
``KGEN_VENDOR=0``, the pick predicted fastest. Both are guesses where it matters most (the
generated kernel beat cuBLAS by more than 5 % on 151 of the 480 rows of the random shape set,
and the model's family choice errs on thin problems: docs/untuned_gemm.md), so where
``KGEN_RACE`` is on the plan's first call times the candidates instead: the vendor call and the picks of the
``KGEN_RACE_FAMILIES`` best-ranked families, each on the call's operands into a scratch
output of the caller's row stride (the caller's ``c`` is never written), ``KGEN_RACE_RUNS``
runs in each of two rounds, L2 flushed, on the caller's stream; the fastest (a generated
kernel only where faster than the vendor call by more than ``KGEN_VENDOR_MARGIN``) serves the
process from then on (``Dispatcher.settle``, how "raced"). It is what ``cudnn.benchmark``
does for convolutions: the cost is paid once per problem, beside the compile of each
generated candidate. No race runs on a launcher that cannot time (tests' fakes), during
CUDA graph capture, or with fewer than two candidates; a race that fails leaves the
ranking's choice. The 2-D GEMM paths race in ``gemm_tc`` and ``gemm_simt``; the paths whose
families a ``route`` names (batched and grouped GEMM, K-grouped GEMM, conv2d) in
``race_routed``.

>>> from kgen.ops.race import fastest
>>> fastest([0.2, 0.1, 0.3])
1
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from kgen.knobs import knobs
from kgen.ops.caller import on_caller_stream

log = logging.getLogger(__name__)


def can_race(launcher) -> bool:
    """Whether first calls race at all: the knob, and a launcher that can time."""
    return knobs.race and callable(getattr(launcher, "time_calls", None))


def fastest(times: Sequence[float]) -> int:
    """Index of the least time (the first of equals: candidates come best-ranked first)."""
    return min(range(len(times)), key=lambda i: (times[i], i))


def race(launcher, calls: Sequence[Callable[[], None]], kind: str, device: int) -> list[float] | None:
    """Milliseconds of each of ``calls`` (``launcher.time_calls``) on the caller's stream
    (``kind``: the caller's array library), or None where no race may run or it failed."""
    if len(calls) < 2 or not can_race(launcher):
        return None
    try:
        with on_caller_stream(kind, device):
            return launcher.time_calls(calls, max(1, knobs.race_runs))
    except Exception as exc:       # the ranking's choice stands; the call itself will say what is wrong
        log.warning("a first-call race failed (%s); keeping the ranking's choice", exc)
        return None


def keep_fastest(dispatcher, loads: Sequence[Any], calls: Sequence[Callable[[], None]], kind: str,
                 device: int) -> tuple[int, Any] | None:
    """Race ``calls`` (each running the candidate loaded in ``loads``, same order) and keep the
    fastest, the vendor library's time less KGEN_VENDOR_MARGIN (``kgen.vendor.ranking_ms``), as
    its problem's choice (``Dispatcher.settle``): (its index, the kept choice), or
    None where no race ran."""
    from kgen.vendor import ranking_ms

    times = race(dispatcher.launcher, calls, kind, device)
    if times is None:
        return None
    best = fastest([ranking_ms(ms, load.choice.vendor) for load, ms in zip(loads, times)])
    if log.isEnabledFor(logging.DEBUG):
        log.debug("raced %s: %s; kept %s", loads[best].problem.key,
                  ", ".join(f"{load.choice.config.name} {ms * 1e3:.2f} us" for load, ms in zip(loads, times)),
                  loads[best].choice.config.name)
    return best, dispatcher.settle(loads[best], device, times[best])


def next_model_picks(spec, problem, target, first, count: int) -> list:
    """(spec, problem, choice) of the cost model's best-ranked configs for ``problem`` after
    ``first`` (the config already in the race), at most ``count - 1`` of them: what a race
    times beside the model's pick, where the model ranks well but its first pick often enough
    is not the fastest."""
    from kgen.dispatch import Choice
    from kgen.kernels.gemm import cost

    if count <= 1:
        return []
    found = [(config, ms) for config, ms in cost.picks(spec, problem, target, count) if config != first]
    return [(spec, problem, Choice(config, "model", predicted_ms=ms)) for config, ms in found[:count - 1]]


def scratch_output(launcher, kind: str, like: Any, rows: int, cols: int, row_stride: int, dtype: str):
    """An uninitialised output of the caller's library, ``rows`` × ``cols`` with the caller's
    ``row_stride`` (elements), for candidates to write while they are timed."""
    from kgen.ops.caller import empty_output

    stride = max(row_stride, cols, 1)
    whole = empty_output(launcher, kind == "torch", like, (max(rows, 1), stride), dtype)
    return whole if stride == cols else whole[:rows, :cols]


def race_routed(route, problem, device: int, kind: str, operands: dict, output: str, like,
                vendor_run: Callable[[Any, Any], Callable[[], None]] | None = None) -> bool:
    """The race of a family path that ``route(target, problem)`` names the families of (batched
    and grouped GEMM, conv2d): the generated picks of the ``KGEN_RACE_FAMILIES`` best-ranked of
    them and, with ``vendor_run(loaded, scratch)`` (a call of the vendor library into
    ``scratch``), the vendor library where it is an unmeasured candidate, each on the call's
    ``operands`` with the output ``output`` replaced by a scratch array of ``like``'s shape,
    dtype and library (alpha 1 and beta 0 where the operands carry them), and the fastest kept
    (``keep_fastest``). False where no race ran; a problem with fewer than two candidates, or
    whose race could not run (CUDA graph capture), is not tried again in the process (the mark
    goes with the dispatcher's plans on ``kgen.refresh()``)."""
    from kgen import dispatch
    from kgen.arrays import describe
    from kgen.ops.caller import new_array

    dispatcher = dispatch.default_dispatcher()
    declined = ("race declined", problem.key, device)
    if declined in dispatcher.plans or not can_race(dispatcher.launcher):
        return False
    vendor, generated = None, []
    for order, (spec, p) in enumerate(route(dispatcher.target(device), problem)):
        choice = dispatcher.decide(spec, p, device)
        if choice.vendor:
            vendor = vendor or (spec, p, choice)
            choice = dispatcher.generated(spec, p, device)
        generated.append((choice.rank, order, spec, p, choice))
    generated.sort(key=lambda entry: entry[:2])
    contenders = ([vendor] if vendor is not None else []) + [
        (spec, p, choice) for _, _, spec, p, choice in generated[:max(0, knobs.race_families)]]
    if len(contenders) < 2 or (vendor is not None and vendor_run is None):     # (an untimed library would lose)
        dispatcher.plans[declined] = True
        return False
    loads = dispatcher.load_many(contenders, device)
    with on_caller_stream(kind, device):           # on the operands' device, in the caller's stream order
        scratch = new_array(like, like.shape, like.dtype, launcher=dispatcher.launcher)
    on_scratch = {**operands, output: type(operands[output])(describe(scratch, "scratch").ptr)}
    on_scratch.update({name: value for name, value in (("alpha", 1.0), ("beta", 0.0)) if name in operands})

    def timed(loaded):
        if loaded.choice.vendor:
            return vendor_run(loaded, scratch)
        return lambda: loaded.spec.run(loaded.kernel, loaded.problem, loaded.choice.config, on_scratch)

    if keep_fastest(dispatcher, loads, [timed(loaded) for loaded in loads], kind, device) is None:
        dispatcher.plans[declined] = True
        return False
    return True

