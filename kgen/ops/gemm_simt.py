"""The call path of the CUDA-core GEMM family (float32, float64, float16 storage): a plan per
call signature (operands validated, kernel chosen and bound), then one launch on the
caller's stream."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kgen.kernels.gemm import rules
from kgen.kernels.gemm.route import exact_float32_routed
from kgen.kernels.gemm.simt import argument_dims, scalar_type
from kgen.kernels.gemm.operands import operand_layout, problem_from_operands
from kgen.arrays import array_kind
from kgen.knobs import knobs
from kgen.measure.arg_pack import data_pointer
from kgen.ops import gemm_tc, race
from kgen.ops.caller import empty_output
from kgen.problem import Problem
from kgen.registry import get_spec
from kgen.space import Config


@dataclass
class _Plan:
    """Everything a repeated call with the same signature needs, precomputed."""

    problem: Problem
    kernel: Any = None
    config: Config | None = None
    launch: Any = None        # kernel.bind(...): (a, b, c pointers, *dims, alpha, beta) -> launch
    dims: tuple = ()          # m, n, k, lda, ldb, ldc as the kernel's scalar types
    split_k: bool = False
    how: str = ""             # how dispatch chose (kgen.dispatch.Choice.how)
    spans: tuple = (0, 0, 0)  # bytes A, B and C reach from their first element (aliasing checks)
    vendor: Any = None        # the vendor library's call, when dispatch chose it
    torch: bool = False       # the caller's arrays are PyTorch tensors: so is a new output
    delegate: Any = None      # a gemm_tc plan of a family computing float32 exactly (gemm_skinny)


def _device_id(x) -> int | None:
    dev = getattr(x, "device", None)
    if dev is None:
        return None
    ident = getattr(dev, "id", None)
    return ident if ident is not None else getattr(dev, "index", None)


def _signature(a, b, c, ia, ib, ic) -> tuple:
    """A hashable key of everything that decides the plan."""
    sig = (ia["shape"], ia["strides"], ia["typestr"], ia["data"][0] & 15, _device_id(a),
           ib["shape"], ib["strides"], ib["typestr"], ib["data"][0] & 15, _device_id(b))
    if ic is not None:
        sig += (ic["shape"], ic["strides"], ic["typestr"], _device_id(c))
    return sig


def make_plan(dispatcher, a, b, c) -> _Plan:
    """Validate the operands (typed errors), choose and load the kernel."""
    from kgen.arrays import describe

    problem, device = problem_from_operands(a, b, c)
    plan = _Plan(problem, torch=array_kind(a) == "torch")
    if problem["m"] == 0 or problem["n"] == 0:
        return plan
    ai, bi = describe(a, "a"), describe(b, "b")
    lds = (operand_layout(ai, "a")[1], operand_layout(bi, "b")[1],
           describe(c, "c").strides[0] if c is not None else problem["n"])
    plan.spans = rules.footprints(problem["m"], problem["n"], problem["k"], problem["layout"], lds,
                                  (ai.itemsize,) * 3)
    spec = get_spec("gemm")
    choice = dispatcher.decide(spec, problem, device)
    racing = choice.vendor and choice.time_ms is None and race.can_race(dispatcher.launcher)
    call = (a, b, ai, bi, lds, device)
    if exact_float32_routed(problem["m"], problem["n"], problem["dtype"]) and \
            (racing or choice.how in ("arch", "model", "nearest", "default")):
        delegate = gemm_tc.make_plan(dispatcher, a, b, c, None, None, None, None, None, exact=True)
        if not delegate.simt:
            if not racing or _delegate_won(dispatcher, problem, device):
                plan.delegate, plan.how = delegate, delegate.how
                return plan
            raced = _race(dispatcher, plan, dispatcher.prepare(spec, problem, device), delegate, call)
            if raced is not None:
                return raced
            racing = False              # no race could run: the ranking's choice, below
    loaded = dispatcher.prepare(spec, problem, device)
    if racing:
        raced = _race(dispatcher, plan, loaded, None, call)
        if raced is not None:
            return raced
    elif loaded.choice.how == "model" and race.can_race(dispatcher.launcher):
        raced = _race(dispatcher, plan, None, None, call, loaded)
        if raced is not None:
            return raced
    return _bound(plan, loaded, ai, bi, lds)


def _bound(plan: _Plan, loaded, ai, bi, lds) -> _Plan:
    """``plan`` running ``loaded`` (the vendor library's call, or a kernel bound for the call's operands)."""
    spec, problem, config = loaded.spec, plan.problem, loaded.choice.config
    plan.config, plan.how = config, loaded.choice.how
    if loaded.choice.vendor:
        plan.vendor = spec.vendor_call(problem)
        return plan
    geo = spec.launch(problem, config)
    scalar = scalar_type(problem)
    plan.kernel, plan.split_k = loaded.kernel, config["SK"] > 1
    plan.dims = argument_dims(problem, ai, bi, lds[2])
    template = (np.uint64(0), np.uint64(0), np.uint64(0), *plan.dims, scalar(0), scalar(0))
    plan.launch = loaded.kernel.bind(geo.grid, geo.block, geo.shared_mem, template)
    return plan


def _model_picks(dispatcher, problem: Problem, device: int, first) -> list:
    """The loaded kernels of the cost model's ``KGEN_RACE_PICKS`` best-ranked configs of the
    CUDA-core family for ``problem``, ``first`` (its pick, loaded) first: the model ranks
    configs well and its first pick badly often enough that timing its next few pays (130 x
    15704 x 6448 NT on an H100: the pick ran 1.78 ms, the second 1.00, cuBLAS 0.83;
    scripts/experiments/family_reach.py)."""
    wanted = race.next_model_picks(first.spec, problem, dispatcher.target(device), first.choice.config,
                                   knobs.race_picks)
    return [first] + (dispatcher.load_many(wanted, device) if wanted else [])


def _race(dispatcher, plan: _Plan, vendor, delegate, call: tuple, generated=None) -> _Plan | None:
    """The fastest of the unmeasured vendor call (``vendor``, loaded; None: generated kernels
    only) and the generated route (``delegate``, the plan of a family computing float32
    exactly, else this family's choice, or ``generated``, loaded, where given; a cost model's
    pick with its next picks, ``_model_picks``), timed on this call's operands
    (``kgen.ops.race``) and kept as the problem's choice; None where no race ran."""
    a, b, ai, bi, lds, device = call
    problem = plan.problem
    kind = "torch" if plan.torch else "cai"
    scratch = race.scratch_output(dispatcher.launcher, kind, a, problem["m"], problem["n"], lds[2],
                                  problem["dtype"])
    pointers = (data_pointer(a), data_pointer(b), data_pointer(scratch))
    loads, plans, calls = [], [], []
    if vendor is not None:
        vendor_plan = _bound(replace(plan), vendor, ai, bi, lds)
        loads.append(vendor)
        plans.append(vendor_plan)
        calls.append(lambda: launch(vendor_plan, a, b, scratch, pointers, 1.0, 0.0))
    if delegate is None:
        spec = get_spec("gemm")
        if generated is None:
            generated = dispatcher.load(spec, problem, device, dispatcher.generated(spec, problem, device))
        picks = _model_picks(dispatcher, problem, device, generated) if generated.choice.how == "model" else [generated]
        for pick in picks:
            rival = _bound(replace(plan), pick, ai, bi, lds)
            loads.append(pick)
            plans.append(rival)
            calls.append(lambda rival=rival: launch(rival, a, b, scratch, pointers, 1.0, 0.0))
    else:           # the delegate's choice (a race among its own candidates may have settled it; with the
        # vendor on and no such race, its family's own choice is the library: its generated one instead)
        chosen = dispatcher.decide(delegate.spec, delegate.problem, device)
        if chosen.vendor:
            chosen = dispatcher.generated(delegate.spec, delegate.problem, device)
        loads.append(dispatcher.load(delegate.spec, delegate.problem, device, chosen))
        plans.append(replace(plan, delegate=delegate, how=delegate.how))
        calls.append(lambda: gemm_tc.run(dispatcher, delegate, a, b, scratch, 1.0, 0.0))
    kept = race.keep_fastest(dispatcher, loads, calls, kind, device)
    if kept is None:
        return None
    winner = plans[kept[0]]
    winner.how = kept[1].how
    if winner.delegate is not None:
        winner.delegate.how = winner.how
        dispatcher.plans[_delegate_won_key(problem, device)] = True
    return winner


def _delegate_won_key(problem: Problem, device: int) -> tuple:
    return ("exact family won the vendor race", problem.key, device)


def _delegate_won(dispatcher, problem: Problem, device: int) -> bool:
    """Whether this process's race of ``problem`` against the vendor call kept the family that
    computes float32 exactly (a race among that family's own candidates does not count)."""
    return _delegate_won_key(problem, device) in dispatcher.plans


def float32_interface(x):
    """``x.__cuda_array_interface__`` when x is a float32 device array, else None."""
    try:
        cai = x.__cuda_array_interface__
    except Exception:          # no interface, or one that refuses the dtype (torch bfloat16)
        return None
    return cai if cai["typestr"] == "<f4" else None


def call(dispatcher, a, b, c, alpha: float, beta: float, cupy_arrays: bool, ia):
    """C = alpha * a @ b + beta * c on CUDA cores (``ia``: a's array interface where a is no
    CuPy array); a new output of the caller's type when ``c`` is None."""
    if cupy_arrays:       # CuPy's own attributes: cheaper than __cuda_array_interface__
        pa, pb, pc = a.data.ptr, b.data.ptr, c.data.ptr if c is not None else 0
        sig = ("cupy", a.shape, a.strides, pa & 15, a.data.device_id,
               b.shape, b.strides, b.dtype.char, pb & 15, b.data.device_id)
        if c is not None:
            sig += (c.shape, c.strides, c.dtype.char, c.data.device_id)
    else:
        try:
            ib = b.__cuda_array_interface__
            ic = c.__cuda_array_interface__ if c is not None else None
        except AttributeError:   # not device arrays: the slow path says what is wrong
            problem_from_operands(a, b, c)
            raise
        sig = _signature(a, b, c, ia, ib, ic)
        pa, pb, pc = ia["data"][0], ib["data"][0], ic["data"][0] if ic is not None else 0
    plan = dispatcher.plans.get(sig)
    if plan is None:
        plan = dispatcher.plans[sig] = make_plan(dispatcher, a, b, c)
    if plan.delegate is not None:
        return gemm_tc.run(dispatcher, plan.delegate, a, b, c, alpha, beta)
    if c is None:
        problem = plan.problem
        c = empty_output(dispatcher.launcher, plan.torch, a, (problem["m"], problem["n"]), problem["dtype"])
        pc = data_pointer(c)
        beta = 0.0
    elif rules.aliases(pc, plan.spans[2], ((pa, plan.spans[0]), (pb, plan.spans[1]))):
        from kgen.errors import InputError

        raise InputError("c overlaps a or b in memory: the kernel would read what it writes",
                         remedy="pass a separate output array (or none, for a new one)")
    launch(plan, a, b, c, (pa, pb, pc), alpha, beta)
    return c


def launch(plan: _Plan, a, b, c, pointers: tuple, alpha: float, beta: float) -> None:
    """``plan``'s work on the call's arrays (``pointers``: a's, b's and c's data pointers)."""
    if plan.launch is None:
        if plan.vendor is not None:
            plan.vendor(a, b, c, alpha, beta, None)
        return                   # (else an empty output: nothing to compute)
    if plan.split_k:
        plan.kernel.scale(c, beta)
    plan.launch((*pointers, *plan.dims, alpha, beta))
