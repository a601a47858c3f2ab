"""Collective agreement: before a collective, the ranks allgather a small descriptor of the
call (operation, shapes, layouts, dtypes, and each rank's own complaint if any), so ranks that
disagree all raise the same MismatchError instead of waiting on each other forever.

``KGEN_DIST_CHECK=0`` skips the descriptor exchange (a rank's own complaint then raises on
that rank alone).

>>> describe_disagreement("gemm", [("a", None), ("a", None), ("b", None)])
"ranks disagree on gemm: ranks 0, 1 have 'a'; rank 2 has 'b'"
"""

from __future__ import annotations

from kgen.dist.comm import Communicator
from kgen.dist.layout import Layout
from kgen.errors import MismatchError
from kgen.knobs import knobs


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _show(value) -> str:
    """A descriptor as a person reads it (layouts by name)."""
    if isinstance(value, Layout):
        return str(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(_show(v) for v in value) + ")"
    return repr(value)


def describe_disagreement(what: str, entries: list[tuple]) -> str | None:
    """The message for every rank's (descriptor, complaint), or None when they agree and no
    rank complains."""
    complaints = [(r, c) for r, (_, c) in enumerate(entries) if c]
    if complaints:
        return f"{what}: " + "; ".join(f"rank {r}: {c}" for r, c in complaints)
    groups: dict = {}
    for r, (descriptor, _) in enumerate(entries):
        groups.setdefault(_show(descriptor), []).append(r)
    if len(groups) == 1:
        return None
    return f"ranks disagree on {what}: " + "; ".join(f"{_ranks(rs)} {'has' if len(rs) == 1 else 'have'} {d}"
                                                     for d, rs in groups.items())


def agree(comm: Communicator, what: str, descriptor, complaint: str | None = None) -> None:
    """Raise the same MismatchError on every rank unless every rank passed an equal
    ``descriptor`` and none a ``complaint`` (a collective call)."""
    if comm.size == 1 or not knobs.dist_check:
        entries = [(descriptor, complaint)]
    else:
        comm.alive(knobs.dist_timeout_s)            # a dead or stuck rank: RankLostError, not a hang
        entries = comm.allgather_object((descriptor, complaint))
    message = describe_disagreement(what, entries)
    if message is not None:
        raise MismatchError(message, values=[d for d, _ in entries],
                            complaints=[c for _, c in entries])
