"""Which GEMM family runs a request: CUDA cores (float32) or the tensor-core path.

float32 without tf32 and without an epilogue stays on the CUDA-core family ``gemm``;
float16, bfloat16, float64, tf32 and every fused epilogue take the tensor-core path: the
Hopper family ``gemm_wgmma`` where it runs the problem, the portable ``gemm_mma``, and, for a
problem with a side of 16 or less, ``gemm_skinny`` (CUDA cores streaming the big operand: such
a problem is bound by memory, and the tile families waste most of each tile on it).

>>> uses_tensor_cores("float32", None, "none", None)
False
>>> uses_tensor_cores("bfloat16", None, "none", None)
True
"""

from __future__ import annotations

import functools

from kgen.errors import DtypeError, KgenError
from kgen.kernels.gemm.dtypes import ITEMSIZE, TC_INPUTS
from kgen.kernels.gemm.problem import tc_problem
from kgen.problem import Problem, Target
from kgen.registry import get_spec

# the families of the tensor-core path, preferred first; a family missing from the registry is skipped
TC_PATH_FAMILIES = ("gemm_wgmma", "gemm_mma", "gemm_skinny")
PRECISIONS = (None, "ieee", "tf32")
# families of that path that compute float32 exactly: a float32 call with no tf32 may go to them
EXACT_FLOAT32_FAMILIES = ("gemm_skinny",)
# A tf32 request's first-call race also times the CUDA-core family's pick (float32 exactly: at
# least as precise as tf32) where K is long and that pick is predicted within EXACT_RIVAL_SLACK
# of the best tensor-core pick. There the tensor-core families run a few tiles of many dependent
# k steps and the cost model's predictions for them are several times too low: 40 x 53 x 14440 TN
# on an H100, gemm_wgmma predicted 16 us and ran 54, the CUDA-core family 37.8 at split-K 16 and
# cuBLAS 17; 26 x 512 x 14782 TN, gemm_wgmma 56 us, the CUDA-core family 34
# (docs/evidence/nvidia-h100-80gb-hbm3/family_reach_e3c4eb7.jsonl).
EXACT_RIVAL_MIN_K = 1024
EXACT_RIVAL_SLACK = 2.0


def uses_tensor_cores(dtype: str, precision: str | None, epilogue: str, out_dtype: str | None) -> bool:
    if precision not in PRECISIONS:
        raise KgenError(f"unknown precision {precision!r}", remedy="use 'tf32' or leave it unset")
    if dtype == "float32":
        if precision == "tf32":
            return True
        if epilogue != "none" or (out_dtype not in (None, "float32")):
            raise KgenError("float32 GEMM with a fused epilogue runs on tensor cores, as tf32",
                            remedy="pass precision='tf32' (--precision tf32), or apply bias and "
                                   "activation after the call")
        return False
    if precision == "tf32":
        raise DtypeError(f"precision 'tf32' applies to float32 inputs, not {dtype}")
    return True


def routed(family: str, problem: Problem, contending: bool = False) -> bool:
    """Whether a request for ``gemm`` may go to ``family``: gemm_skinny only up to KGEN_SKINNY_MAX
    and, on its model's pick alone, for the dtypes of KGEN_SKINNY_DTYPES; where a measurement
    decides (``contending``: a first-call race, or a measured record) for every dtype it runs (a
    family named in the request itself, ``kgen tune gemm_skinny``, runs whatever it supports)."""
    return family != "gemm_skinny" or skinny_routed(problem["m"], problem["n"], problem["dtype"], contending)


def skinny_routed(m: int, n: int, dtype: str, contending: bool = False) -> bool:
    """Whether a gemm request of this shape and input dtype may go to gemm_skinny
    (``contending``: decided by a measurement, ``routed``)."""
    from kgen.knobs import knobs

    return min(m, n) <= knobs.skinny_max and (contending or dtype in knobs.skinny_dtypes)


def exact_float32_routed(m: int, n: int, dtype: str) -> bool:
    """Whether a float32 call with no tf32 and no epilogue (the CUDA-core family's) may go to a
    family of ``EXACT_FLOAT32_FAMILIES`` instead: a small side within KGEN_SKINNY_MAX, where
    KGEN_SKINNY_ROUTE=first (the CUDA-core family's own untuned pick is no better judged)."""
    from kgen.knobs import knobs

    return dtype == "float32" and skinny_routed(m, n, dtype) and knobs.skinny_route == "first"


def exact_rival(problem_args: dict, target: Target, best_ms: float | None):
    """(spec, problem, config, predicted ms) of the CUDA-core family's model pick that a tf32
    request's first-call race times beside the tensor-core picks (``EXACT_RIVAL_MIN_K``), or
    None: a request with an epilogue or a half-precision output, a short K, or a pick predicted
    slower than ``EXACT_RIVAL_SLACK`` times ``best_ms`` (the best tensor-core prediction)."""
    from kgen.kernels.gemm.problem import gemm_problem

    if (problem_args["dtype"] != "float32" or problem_args.get("epilogue", "none") != "none"
            or problem_args.get("out_dtype") not in (None, "float32") or problem_args["k"] < EXACT_RIVAL_MIN_K):
        return None
    spec = get_spec("gemm")
    problem = gemm_problem(problem_args["m"], problem_args["n"], problem_args["k"], "float32", problem_args["layout"],
                           problem_args.get("align_a"), problem_args.get("align_b"))
    picked = spec.model_choice(problem, target)
    if picked is None or (best_ms is not None and picked[1] > EXACT_RIVAL_SLACK * best_ms):
        return None
    return spec, problem, picked[0], picked[1]


def untuned_group(family: str, group: float) -> float:
    """The rank group (``kgen.dispatch.Choice.rank``) of a family's choice for a request: an
    untuned pick of ``gemm_skinny`` ranks before the tile families' untuned picks under
    KGEN_SKINNY_ROUTE=first (the default): their cost model was fitted on almost no problem with
    a side of 16 or less, and its predictions there are off by up to an order of magnitude
    (docs/untuned_gemm.md)."""
    from kgen.knobs import knobs

    if family == "gemm_skinny" and group >= 2 and knobs.skinny_route == "first":
        return 1.5
    return group


@functools.lru_cache(maxsize=1024)
def families_that_run(target: Target, problem: Problem, families: tuple[str, ...]) -> tuple[tuple[object, Problem], ...]:
    """(spec, problem) of each of ``families`` (in their order) that runs ``problem``, the
    problem's fields as that family's problem (batched and grouped GEMM: wgmma, then mma.sync).
    Remembered: every call asks for it, and the answer depends on nothing else."""
    found = []
    for family in families:
        spec, candidate = get_spec(family), Problem.of(family, **dict(problem.params))
        if spec.supports(candidate, target):
            found.append((spec, candidate))
    return tuple(found)


def tensor_core_specs(problem_args: dict, target: Target, contending: bool = False) -> list[tuple[object, Problem]]:
    """(spec, problem) of every tensor-core family that can run the request, preferred first
    (``contending``: those a measurement may choose, ``routed``)."""
    from kgen.registry import families

    found = []
    known = families()
    for family in TC_PATH_FAMILIES:
        if family not in known:
            continue
        spec = get_spec(family)
        problem = tc_problem(family, **problem_args)
        if spec.supports(problem, target) and routed(family, problem, contending):
            found.append((spec, problem))
    if not found:
        raise DtypeError(f"no tensor-core GEMM family runs {problem_args['dtype']} on {target.name} "
                         f"(compute capability {target.cc[0]}.{target.cc[1]})",
                         remedy="tensor-core GEMM needs sm_80 or later")
    return found


def tensor_core_candidates(problem_args: dict, target: Target,
                           contending: bool = False) -> list[tuple[object, Problem, tuple[bool, bool]]]:
    """(spec, problem, staged operands) of every way the tensor cores can run the request:
    each family that runs it as it is (nothing staged), then each family that runs it once
    the operands it cannot read are copied into padded rows (``staging``; KGEN_STAGING).
    ``contending``: the ways a measurement may choose (a race's or a record's, ``routed``)."""
    from kgen.knobs import knobs
    from kgen.registry import families

    found = [(spec, problem, (False, False)) for spec, problem in tensor_core_specs(problem_args, target, contending)]
    if not knobs.staging:
        return found
    direct = {spec.family for spec, _, _ in found}
    for family in TC_PATH_FAMILIES:
        if family in direct or family not in families():
            continue
        spec = get_spec(family)
        needed = getattr(spec, "staging_needed", None)
        stage = needed(tc_problem(family, **problem_args)) if needed is not None else (False, False)
        if not any(stage):
            continue
        widest = 16 // ITEMSIZE[problem_args["dtype"]]
        staged = tc_problem(family, **{**problem_args, **{key: widest for key, on in
                                                          (("align_a", stage[0]), ("align_b", stage[1])) if on}})
        if spec.supports(staged, target):
            found.append((spec, staged, stage))
    return found


def gemm_request(family: str, m: int, n: int, k: int, dtype: str, layout: str, target: Target,
                 out_dtype: str | None = None, epilogue: str = "none", precision: str | None = None,
                 align_a: int | None = None, align_b: int | None = None) -> list[tuple[object, Problem]]:
    """(spec, problem) pairs for a GEMM request by family name: ``gemm`` routes by dtype."""
    from kgen.kernels.gemm.problem import gemm_problem

    if family == "gemm" and not uses_tensor_cores(dtype, precision, epilogue, out_dtype):
        return [(get_spec("gemm"), gemm_problem(m, n, k, dtype, layout, align_a, align_b))]
    if dtype not in TC_INPUTS:
        raise DtypeError(f"dtype {dtype!r} is not supported by gemm", remedy=f"use one of {sorted(TC_INPUTS)}")
    args = dict(m=m, n=n, k=k, dtype=dtype, layout=layout, out_dtype=out_dtype, epilogue=epilogue,
                align_a=align_a, align_b=align_b)
    if family == "gemm":
        return tensor_core_specs(args, target)
    if family not in TC_PATH_FAMILIES:
        raise KgenError(f"{family!r} is not a GEMM family", remedy="use gemm, gemm_mma, gemm_wgmma or gemm_skinny")
    spec = get_spec(family)
    problem = tc_problem(family, **args)
    if not spec.supports(problem, target):
        raise KgenError(f"{family} cannot run {problem.key} on {target.name}",
                        remedy="use family gemm, which picks one that can")
    return [(spec, problem)]


def request_args(m: int, n: int, k: int, dtype: str, layout: str, **options) -> dict:
    """The tensor-core problem fields of a request's options (``tensor_core_candidates``' first argument)."""
    return dict(m=m, n=n, k=k, dtype=dtype, layout=layout, out_dtype=options.get("out_dtype"),
                epilogue=options.get("epilogue", "none"), align_a=options.get("align_a"),
                align_b=options.get("align_b"))


def preferred_request(family: str, m: int, n: int, k: int, dtype: str, layout: str, target: Target,
                      **options) -> tuple[object, Problem]:
    """The (spec, problem) a tune of the request should search: for ``gemm`` on the tensor
    cores, the way to run it (a family, directly or with staged operands) whose cost-model
    pick is predicted fastest, the staging copy included, as an untuned call would rank them;
    otherwise the first of ``gemm_request``."""
    from kgen.kernels.gemm.staging import staging_ms

    if family != "gemm" or not uses_tensor_cores(dtype, options.get("precision"), options.get("epilogue", "none"),
                                                 options.get("out_dtype")):
        return gemm_request(family, m, n, k, dtype, layout, target, **options)[0]
    gemm_request(family, m, n, k, dtype, layout, target, **options)       # the request's own checks
    args = request_args(m, n, k, dtype, layout, **options)

    def predicted(candidate) -> tuple[float, float]:
        spec, problem, stage = candidate
        picked = spec.model_choice(problem, target)
        return (untuned_group(spec.family, 2), (picked[1] if picked else float("inf"))
                + staging_ms(m, n, k, layout, dtype, stage))

    spec, problem, _ = min(tensor_core_candidates(args, target), key=predicted)
    return spec, problem


def rival_requests(family: str, m: int, n: int, k: int, dtype: str, layout: str, target: Target,
                   **options) -> list[tuple[object, Problem]]:
    """(spec, problem) of every way other than ``preferred_request``'s that dispatch may run a
    ``gemm`` request: the other families (and staged operands) a first-call race would time
    (``tensor_core_candidates``, contending: gemm_skinny for every dtype, whose measured records
    dispatch ranks whatever KGEN_SKINNY_DTYPES says), or, for float32 on the CUDA cores, the families that
    compute float32 exactly and take its small side. A tune of the request measures their picks
    beside its search, so that dispatch compares measured times across families. None for a
    request naming one family."""
    if family != "gemm":
        return []
    chosen_spec, chosen = preferred_request(family, m, n, k, dtype, layout, target, **options)
    args = request_args(m, n, k, dtype, layout, **options)
    if uses_tensor_cores(dtype, options.get("precision"), args["epilogue"], args["out_dtype"]):
        found = [(spec, problem) for spec, problem, _ in tensor_core_candidates(args, target, True)]
    elif exact_float32_routed(m, n, dtype):
        found = [(spec, problem) for spec, problem, _ in tensor_core_candidates(args, target)
                 if spec.family in EXACT_FLOAT32_FAMILIES]
    else:
        found = []
    return [(spec, problem) for spec, problem in found
            if (spec.family, problem) != (chosen_spec.family, chosen)]
