"""Where measurements happen: local GPU workers, or a replay of recorded measurements."""

from kgen.runners.base import Runner
from kgen.runners.local import LocalGPURunner
from kgen.runners.replay import Recording, ReplayRunner

__all__ = ["Runner", "LocalGPURunner", "Recording", "ReplayRunner"]
