"""One launch of a family's best known kernel on a caller's operands: on the operands'
device and the caller's current stream, through the default dispatcher (the tuned record,
else the family's model or default, loaded once)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kgen.dispatch import default_dispatcher
from kgen.ops.caller import CallerArray, on_caller_stream
from kgen.problem import Problem
from kgen.registry import get_spec


def pointer(array: CallerArray) -> np.uint64:
    """An array operand as the kernel argument it is (its device address)."""
    return np.uint64(array.ptr)


def launch_family(family: str, problem: Problem, device: int, kind: str, operands: Mapping[str, Any]) -> None:
    """Run ``family``'s kernel of ``problem`` on ``operands`` (pointers and scalars by name)."""
    spec = get_spec(family)
    with on_caller_stream(kind, device):
        default_dispatcher().call(spec, problem, operands, device)


def first_ranked(route, problem: Problem, device: int, what: str):
    """(spec, problem, choice) of the family that runs ``problem`` on ``device``: of those
    ``route(target, problem)`` names (preferred first), the one whose choice the dispatcher
    ranks first (measured times, then the vendor, then the models' picks), the preferred one of
    equals. DeviceError where none runs it."""
    from kgen import dispatch
    from kgen.errors import DeviceError

    dispatcher = dispatch.default_dispatcher()
    target = dispatcher.target(device)
    candidates = [(spec, p, dispatcher.decide(spec, p, device)) for spec, p in route(target, problem)]
    if not candidates:
        raise DeviceError(f"no {what} family runs on {target.name} (compute capability {target.cc})",
                          remedy="use a GPU of compute capability 8.0 or later")
    return min(enumerate(candidates), key=lambda item: (item[1][2].rank, item[0]))[1]


def choice_of(family: str, problem: Problem, device: int):
    """The dispatcher's choice for ``problem`` (config and how it was chosen), without a launch."""
    return default_dispatcher().decide(get_spec(family), problem, device)




def raced_route(routed, route, problem: Problem, device: int, kind: str, operands: Mapping[str, Any],
                output: str, like):
    """``routed(problem, device)``'s (spec, problem, choice), where no measurement decides it
    after a first-call race of the families ``route`` names (``kgen.ops.race.race_routed``;
    ``output``: the operand a scratch array like ``like`` replaces while they are timed)."""
    from kgen.ops import race

    found = routed(problem, device)
    if found[2].time_ms is None and race.race_routed(route, problem, device, kind, dict(operands), output, like):
        found = routed(problem, device)
    return found
