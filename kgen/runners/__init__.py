"""Where measurements happen: local GPU workers, Dask workers, or a replay of recorded measurements."""

from kgen.runners.base import Runner
from kgen.runners.local import LocalGPURunner
from kgen.runners.replay import Recording, ReplayRunner

__all__ = ["Runner", "LocalGPURunner", "Recording", "ReplayRunner"]   # and, lazily, DaskRunner, FaultyReplay


def __getattr__(name: str):
    """DaskRunner and FaultyReplay load on first use, so that importing kgen never imports dask."""
    if name == "DaskRunner":
        try:
            from kgen.runners.dask import DaskRunner
        except ImportError as exc:
            from kgen.errors import KgenError

            raise KgenError(f"the Dask runner needs dask.distributed ({exc})",
                            remedy="pip install 'kgen[dist]'") from None
        return DaskRunner
    if name == "FaultyReplay":
        from kgen.runners.faults import FaultyReplay

        return FaultyReplay
    raise AttributeError(f"module 'kgen.runners' has no attribute {name!r}")
