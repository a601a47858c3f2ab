"""The call path of the tensor-core GEMM families, for CuPy, PyTorch and JAX arrays.

``kgen.gemm`` sends a call here when it needs the tensor cores (see ``kgen.kernels.gemm.route``). The
first call of a signature validates the operands, asks the dispatcher for each family's
best kernel and keeps the fastest known one; later calls reuse that plan. The result has
the caller's array type; the kernel runs on the caller's current stream (PyTorch's for
PyTorch tensors, CuPy's otherwise; JAX inputs are waited for first).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from kgen.arrays import ArrayInfo, array_kind, describe, one_library
from kgen.errors import DeviceError, DtypeError, InputError, LayoutError, ShapeError
from kgen.kernels.gemm import rules
from kgen.kernels.gemm.operands import check_output, matmul_shape, operand_layout
from kgen.kernels.gemm.route import (EXACT_FLOAT32_FAMILIES, exact_rival, routed, tensor_core_candidates,
                                     untuned_group, uses_tensor_cores)
from kgen.kernels.gemm.staging import Staging, output_staged
from kgen.kernels.gemm.dtypes import ITEMSIZE, allowed_outputs, epilogue_name
from kgen.knobs import knobs
from kgen.problem import Problem
from kgen.measure.arg_pack import cupy_ndarray
from kgen.ops import race
from kgen.ops.caller import empty_output, to_jax, torch_stream


@dataclass
class TcPlan:
    spec: Any
    problem: Problem
    kernel: Any
    config: Any
    launch: Any
    kind: str            # the caller's array type: cai | torch | jax
    device: int
    how: str = ""
    build: Any = None    # (pointers, alpha, beta) -> kernel arguments
    bound: Any = None    # kernel.bind(...) with the first call's arguments as the template
    simt: bool = False   # float32 without tf32 after all: the CUDA-core path runs it
    vendor: Any = None   # the vendor library's call (a, b, c, alpha, beta, bias), when chosen
    staging: Any = None  # Staging: operands copied into padded rows before each launch (C: and back after)
    spans: tuple = (0, 0, 0)   # bytes A, B and C reach from their first element (aliasing checks)
    ldc: int = 0         # C's row stride (elements) in the caller's array


def input_dtype(info: ArrayInfo, dtype: str | None, name: str) -> str:
    if info.dtype == "uint16" and dtype in (None, "bfloat16"):
        if dtype is None:
            raise DtypeError(f"{name} is uint16: kgen reads uint16 arrays only as bfloat16 bits, when told",
                             remedy="pass dtype='bfloat16'")
        return "bfloat16"
    if dtype not in (None, info.dtype):
        raise DtypeError(f"{name} is {info.dtype}, not the dtype={dtype} asked for",
                         remedy="cast it, or leave dtype unset")
    return info.dtype


def make_plan(dispatcher, a, b, c, bias, activation, precision, dtype, out_dtype, exact: bool = False) -> TcPlan:
    """Validate everything (typed errors), then choose and load the kernel. ``exact``: a float32
    call with no tf32 that the CUDA-core path hands over (``gemm_simt``): only families that
    compute float32 exactly (gemm_skinny) are candidates."""
    one_library(a=a, b=b, c=c, bias=bias)
    ai, bi = describe(a, "a"), describe(b, "b")
    m, n, k = matmul_shape(ai, bi)
    in_a, in_b = input_dtype(ai, dtype, "a"), input_dtype(bi, dtype, "b")
    if in_a != in_b:
        raise DtypeError(f"a is {in_a} and b is {in_b}", remedy="cast both to one dtype")
    if ai.device != bi.device:
        raise DeviceError(f"a is on device {ai.device} and b on device {bi.device}")
    if not exact and not uses_tensor_cores(in_a, precision, "none" if bias is None and activation is None else "bias",
                                           out_dtype):
        return TcPlan(None, None, None, None, None, array_kind(a), ai.device, simt=True)
    out = out_dtype or in_a
    if out not in allowed_outputs(in_a):
        raise DtypeError(f"{in_a} inputs can write {list(allowed_outputs(in_a))}, not {out}")
    if c is not None:
        if array_kind(c) == "jax":
            raise InputError("c is a JAX array, and JAX arrays are immutable",
                             remedy="leave c unset: the result comes back as a new JAX array")
        check_output(describe(c, "c"), m, n, out, (out, "uint16" if out == "bfloat16" else out), ai.device)
    if bias is not None:
        bi_ = describe(bias, "bias")
        if bi_.shape != (n,):
            raise ShapeError(f"bias has shape {list(bi_.shape)}, expected [{n}] (one value per column of c)")
        if bi_.dtype not in (out, "uint16" if out == "bfloat16" else out):
            raise DtypeError(f"bias is {bi_.dtype} but the output dtype is {out}", remedy=f"pass bias as {out}")
        if bi_.device != ai.device:
            raise DeviceError(f"bias is on device {bi_.device}, a and b on device {ai.device}")
        if bi_.strides[0] != 1 and n > 1:
            raise LayoutError("bias must be contiguous", remedy="pass a contiguous copy of bias")
    la, lda = operand_layout(ai, "a")
    lb, ldb = operand_layout(bi, "b")
    target = dispatcher.target(ai.device)
    args = dict(m=m, n=n, k=k, dtype=in_a, layout=la + lb, out_dtype=out,
                epilogue=epilogue_name(bias is not None, activation),
                align_a=rules.alignment(ai.ptr, lda, ai.itemsize), align_b=rules.alignment(bi.ptr, ldb, bi.itemsize))
    kind = array_kind(a)
    handed = ("tf32 request on the CUDA cores", tuple(sorted(args.items())), ai.device)
    if not exact and handed in dispatcher.plans:        # this process's race of the request chose the rival
        return TcPlan(None, None, None, None, None, kind, ai.device, "raced", simt=True)
    racing = race.can_race(dispatcher.launcher)
    candidates = tensor_core_candidates(args, target, contending=True)    # (``_decidable`` sorts them)
    if exact:
        candidates = [found for found in candidates if found[0].family in EXACT_FLOAT32_FAMILIES]
    if candidates and (m == 0 or n == 0):
        spec, problem, _ = candidates[0]
        return TcPlan(spec, problem, None, None, None, kind, ai.device)
    ranked, vendor = _ranked(dispatcher, candidates, (m, n, k, la + lb, in_a, kind), ai.device, exact, racing)
    if not racing:
        ranked = _decidable(ranked)
    if not ranked:                      # (exact: no family computing float32 exactly takes it)
        return TcPlan(None, None, None, None, None, kind, ai.device, simt=True)
    ci = describe(c, "c") if c is not None else None
    ldc = ci.strides[0] if ci is not None else n

    def planned(spec, problem, staging, loaded) -> TcPlan:
        """The plan running ``loaded`` (a family's choice, its kernel loaded) on this call's operands."""
        config = loaded.choice.config
        spans = rules.footprints(m, n, k, la + lb, (lda, ldb, max(ldc, 1)),
                                 (ai.itemsize, bi.itemsize, ITEMSIZE[problem["out_dtype"]]))
        if loaded.choice.vendor:
            return TcPlan(spec, problem, None, config, None, kind, ai.device, loaded.choice.how,
                          vendor=spec.vendor_call(problem), spans=spans)
        lds = (lda, ldb)
        if staging is not None:
            lds = tuple(ld if not staged else padded for ld, padded, staged in
                        zip((lda, ldb), staging.lds, staging.stage))
        user_ldc, kernel_ldc = max(ldc, 1), ldc
        output_plan = getattr(spec, "output_plan", None)
        if (knobs.staging and output_plan is not None and output_plan(problem, config) is not None
                and not spec.rows_by_band(problem, config)      # the kernel writes such rows well itself
                and output_staged(m, n, user_ldc, problem["out_dtype"], ci.ptr if ci is not None else 0)):
            staging = staging or Staging((False, False), (rules.storage_shape(m, n, k, la + lb, "a"),
                                                          rules.storage_shape(m, n, k, la + lb, "b")), in_a, kind)
            staging.out = (m, n, problem["out_dtype"])
            kernel_ldc = staging.ldc
        return TcPlan(spec, problem, loaded.kernel, config, spec.launch(problem, config), kind, ai.device,
                      loaded.choice.how, spec.arg_builder(problem, config, (*lds, max(kernel_ldc, 1))),
                      staging=staging, spans=spans, ldc=user_ldc)

    if racing and ranked[0][4].time_ms is None:         # no measurement decides: race
        raced_families = ranked[:max(0, knobs.race_families)]
        contenders = ([vendor] if vendor is not None else []) + raced_families \
            + _next_picks(ranked[0], target) + _spread_picks(raced_families, target)
        rival = None if exact or in_a != "float32" else _exact_rival(args, target, contenders)
        if len(contenders) + (rival is not None) >= 2:
            raced = _race(dispatcher, contenders, planned, (a, b, bias, m, n, ldc, ai.device, kind), rival)
            if raced is not None:
                if raced.simt:
                    dispatcher.plans[handed] = True
                return raced
    if racing:                          # no race ran: the ranking alone, the vendor library first
        ranked = _decidable(_ranked(dispatcher, candidates, (m, n, k, la + lb, in_a, kind), ai.device, exact,
                                    False)[0]) or ranked
    _, spec, problem, staging, choice = ranked[0]
    if choice.config == dispatcher.decide(spec, problem, ai.device).config:
        return planned(spec, problem, staging, dispatcher.prepare(spec, problem, ai.device))  # the winner's alone
    # the family's generated choice where its own is the library, which does not run this way
    # (staged operands, or float32 computed exactly: the library would read it as tf32)
    return planned(spec, problem, staging, dispatcher.load(spec, problem, ai.device, choice))


def _ranked(dispatcher, candidates, call: tuple, device: int, exact: bool, racing: bool):
    """(entries, vendor): an entry (rank, spec, problem, staging, choice) per candidate family,
    best first, and, where ``racing`` and the vendor library is an unmeasured candidate, its
    entry apart (each family's entry then its generated choice: what a race times the vendor
    against). ``call``: (m, n, k, layout, input dtype, the caller's array kind)."""
    m, n, k, layout, dtype, kind = call
    entries, vendor = [], None
    for order, (spec, problem, stage) in enumerate(candidates):
        staging = None
        if any(stage):
            staging = Staging(stage, (rules.storage_shape(m, n, k, layout, "a"),
                                      rules.storage_shape(m, n, k, layout, "b")), dtype, kind)
        choice = dispatcher.decide(spec, problem, device)
        if choice.vendor and choice.time_ms is None and racing:
            if vendor is None and staging is None and not exact:
                vendor = ((0, 0.0, order), spec, problem, None, choice)
            choice = dispatcher.generated(spec, problem, device)
        if choice.vendor and (staging is not None or exact):
            continue                    # the library reads the operands as they are (and float32 as tf32 here)
        group, ms = choice.rank
        rank = (untuned_group(spec.family, group), ms + (staging.cost_ms() if staging is not None else 0.0), order)
        entries.append((rank, spec, problem, staging, choice))
    entries.sort(key=lambda entry: entry[0])
    return entries, vendor


def _decidable(entries: list) -> list:
    """The entries of ``_ranked`` a ranking without a race may choose: a measured choice of any
    family, or an unmeasured pick of a family routed for the request (gemm_skinny's picks for
    half precision contend only in a race or by a measured record: ``route.routed``)."""
    return [entry for entry in entries if entry[4].time_ms is not None or routed(entry[1].family, entry[2])]


def _next_picks(entry, target) -> list:
    """Entries (as ``_ranked``'s) of the cost model's next ``KGEN_RACE_TC_PICKS`` - 1 configs of
    the best-ranked family where its choice is the model's pick, for a race to time beside it."""
    rank, spec, problem, staging, choice = entry
    if choice.how != "model":
        return []
    return [(rank, spec, problem, staging, picked)
            for _, _, picked in race.next_model_picks(spec, problem, target, choice.config, knobs.race_tc_picks)]


def _spread_picks(entries, target) -> list:
    """Entries (as ``_ranked``'s) of the config spreading over the SMs (``spread_choice``) of
    each family among ``entries`` that has one, where that family's choice is its model's pick
    and the pick runs on a few SMs (gemm_skinny on a few outputs with a long K), for a race to
    time beside the pick."""
    from kgen.dispatch import Choice

    found = []
    for rank, spec, problem, staging, choice in entries:
        spread = getattr(spec, "spread_choice", None)
        picked = spread(problem, target, choice.config) if spread is not None and choice.how == "model" else None
        if picked is not None:
            found.append((rank, spec, problem, staging, Choice(picked[0], "model", predicted_ms=picked[1])))
    return found


def _exact_rival(args: dict, target, contenders: list):
    """(spec, problem, choice) of the CUDA-core family's pick a tf32 request's race times beside
    ``contenders`` (``route.exact_rival``), or None."""
    from kgen.dispatch import Choice

    predicted = [choice.predicted_ms for _, _, _, _, choice in contenders
                 if not choice.vendor and choice.predicted_ms is not None]
    found = exact_rival(args, target, min(predicted) if predicted else None)
    if found is None:
        return None
    spec, problem, config, ms = found
    return spec, problem, Choice(config, "model", predicted_ms=ms)


def _race(dispatcher, contenders, planned, call: tuple, rival=None) -> TcPlan | None:
    """The plan of the fastest of ``contenders`` (entries of ``_ranked``) and ``rival`` (a
    tf32 request's CUDA-core pick, ``_exact_rival``) timed on this call's operands
    (``kgen.ops.race``), kept as its problem's choice; None where no race ran. Where the rival
    wins, the plan hands the request to the CUDA-core path (``simt``), whose plan then finds
    that choice kept."""
    a, b, bias, m, n, ldc, device, kind = call
    wanted = [(spec, problem, choice) for _, spec, problem, _, choice in contenders]
    loads = dispatcher.load_many(wanted + ([rival] if rival is not None else []), device)
    plans = [planned(spec, problem, staging, loaded)
             for (_, spec, problem, staging, _), loaded in zip(contenders, loads)]
    out = plans[0].problem["out_dtype"]
    scratch = race.scratch_output(dispatcher.launcher, kind, a, m, n, ldc, out)
    calls = [lambda plan=plan: run(dispatcher, plan, a, b, scratch, 1.0, 0.0, bias) for plan in plans]
    if rival is not None:
        exact = loads[-1]
        operands = {"a": a, "b": b, "c": scratch, "alpha": 1.0, "beta": 0.0}
        plans.append(TcPlan(None, None, None, None, None, kind, device, simt=True))
        calls.append(lambda: exact.spec.run(exact.kernel, exact.problem, exact.choice.config, operands))
    kept = race.keep_fastest(dispatcher, loads, calls, kind, device)
    if kept is None:
        return None
    winner = plans[kept[0]]
    winner.how = kept[1].how
    return winner


def _view(x) -> tuple[tuple, int]:
    """(what decides the plan, data pointer) of an operand, as cheaply as its type allows: a CuPy
    array's own attributes (its ``__cuda_array_interface__`` is a dict built per read)."""
    if type(x) is cupy_ndarray():
        memory = x.data
        ptr = memory.ptr
        return ("cupy", x.shape, x.strides, x.dtype.char, ptr & 15, memory.device_id), ptr
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        ptr = x.data_ptr()
        return ("torch", x.shape, x.stride(), x.dtype, ptr & 15, x.get_device()), ptr
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:
        info = describe(x)      # a JAX array (waited for), or the error saying what to pass
        return (array_kind(x), info.shape, info.strides, info.dtype, info.ptr & 15, info.device), info.ptr
    ptr = cai["data"][0]
    dev = getattr(x, "device", None)
    return ("cai", cai["shape"], cai["strides"], cai["typestr"], ptr & 15, getattr(dev, "id", dev)), ptr


def call(dispatcher, a, b, c=None, alpha: float = 1.0, beta: float = 0.0, *, bias=None, activation=None,
         precision=None, dtype=None, out_dtype=None):
    """C = act(alpha * a @ b + beta * c + bias) on the tensor cores (see ``kgen.gemm``); None
    where the call belongs to the CUDA-core family (float32 without tf32 or an epilogue)."""
    (va, pa), (vb, pb) = _view(a), _view(b)
    vc, pc = _view(c) if c is not None else (None, 0)
    vbias, pbias = _view(bias) if bias is not None else (None, 0)
    sig = ("tc", va, vb, vc, vbias, activation, precision, dtype, out_dtype)
    plan = dispatcher.plans.get(sig)
    if plan is None:
        plan = dispatcher.plans[sig] = make_plan(dispatcher, a, b, c, bias, activation, precision, dtype, out_dtype)
    if plan.simt:
        return None
    return run(dispatcher, plan, a, b, c, alpha, beta, bias, (pa, pb, pc, pbias))


def run(dispatcher, plan: TcPlan, a, b, c, alpha: float, beta: float, bias=None, pointers=None):
    """The launch of ``plan`` on the call's arrays (``pointers``: their data pointers, a, b, c and
    bias, where the caller has read them), a new output of the caller's type where ``c`` is None."""
    pa, pb, pc, pbias = pointers if pointers is not None else (
        _view(a)[1], _view(b)[1], _view(c)[1] if c is not None else 0, _view(bias)[1] if bias is not None else 0)
    problem = plan.problem
    if c is None:
        c = empty_output(dispatcher.launcher, plan.kind == "torch", a, (problem["m"], problem["n"]),
                         problem["out_dtype"])
        pc = _view(c)[1]
        beta = 0.0
    elif rules.aliases(pc, plan.spans[2], ((pa, plan.spans[0]), (pb, plan.spans[1]))):
        raise InputError("c overlaps a or b in memory: the kernel would read what it writes",
                         remedy="pass a separate output array (or none, for a new one)")
    if plan.kernel is not None:
        stream = torch_stream(plan.device) if plan.kind == "torch" else None
        staging, into = plan.staging, pc
        if staging is not None:
            pa, pb = staging.pointers(a, b, pa, pb, problem["layout"], plan.device, stream)
            if staging.out is not None:
                into = staging.output_in(c, pc, plan.ldc, beta, plan.device, stream)
        args = plan.build(pa, pb, into, pbias, alpha, beta, stream, plan.device)
        if plan.bound is None:
            geo = plan.launch
            plan.bound = plan.kernel.bind(geo.grid, geo.block, geo.shared_mem, args)
        plan.bound(args, stream=stream)
        if into != pc:
            staging.output_back(c, pc, plan.ldc, plan.device, stream)
    elif plan.vendor is not None:
        plan.vendor(a, b, c, alpha, beta, bias)
    return to_jax(c, problem["out_dtype"]) if plan.kind == "jax" else c
