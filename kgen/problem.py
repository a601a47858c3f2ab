"""Problem (what is computed: family, shapes, dtypes, layouts, alignment) and Target (where).

>>> p = Problem.of("gemm", m=64, n=32, k=16, dtype="float32", layout="NN", align=4)
>>> p.key
'gemm|align=4|dtype=float32|k=16|layout=NN|m=64|n=32'
>>> p["m"]
64
"""

from __future__ import annotations

import math
from dataclasses import dataclass, asdict, field
from typing import Any, Mapping

from kgen.errors import NoDeviceError, SpaceError


@dataclass(frozen=True)
class Problem:
    """A family and its named parameters; ``key`` is the stable text identity."""

    family: str
    params: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, family: str, **params) -> "Problem":
        for k, v in params.items():
            if not isinstance(v, (int, str, float, bool)):
                raise SpaceError(f"problem parameter {k}={v!r} must be an int, float, str or bool")
        return cls(family, tuple(sorted(params.items())))

    @classmethod
    def from_key(cls, key: str) -> "Problem":
        family, *items = key.split("|")
        params = {}
        for item in items:
            k, _, v = item.partition("=")
            params[k] = int(v) if v.lstrip("-").isdigit() else v
        return cls.of(family, **params)

    def __getitem__(self, name: str) -> Any:
        for k, v in self.params:
            if k == name:
                return v
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def as_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def replace(self, **changes) -> "Problem":
        d = self.as_dict()
        d.update(changes)
        return Problem.of(self.family, **d)

    @property
    def key(self) -> str:
        return "|".join([self.family] + [f"{k}={v}" for k, v in self.params])

    def distance(self, other: "Problem", shape_params: tuple[str, ...]) -> float:
        """Euclidean distance on log2 of the shape parameters; inf unless all else matches."""
        if other.family != self.family:
            return math.inf
        mine, theirs = self.as_dict(), other.as_dict()
        if set(mine) != set(theirs):
            return math.inf
        for k in mine:
            if k not in shape_params and mine[k] != theirs[k]:
                return math.inf
        return math.sqrt(sum((math.log2(max(1, mine[s])) - math.log2(max(1, theirs[s]))) ** 2
                             for s in shape_params))


@dataclass(frozen=True)
class Target:
    """The device a kernel is built and measured for, and the software around it."""

    name: str
    cc: tuple[int, int]
    sm_count: int
    smem_per_block: int          # default per-block limit (48 KB)
    smem_per_block_optin: int    # after cudaFuncSetAttribute
    smem_per_sm: int
    regs_per_sm: int = 65536
    max_threads_per_block: int = 1024
    l2_bytes: int = 50 * 1024 * 1024
    driver_version: int = 0
    runtime_version: int = 0
    nvrtc_version: str = ""
    device_id: int = 0
    extra: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def arch(self) -> str:
        """The compile target: KGEN_ARCH if set, else this device's sm_XY."""
        from kgen.knobs import knobs

        return knobs.arch or f"sm_{self.cc[0]}{self.cc[1]}"

    @property
    def slug(self) -> str:
        """File-name form of the device name, e.g. 'nvidia-h200'."""
        return "-".join(self.name.lower().replace("_", " ").split())

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cc"] = list(self.cc)
        return d

    @classmethod
    def h200(cls, name: str = "NVIDIA H200", cc: tuple[int, int] = (9, 0),
             nvrtc: str | None = None) -> "Target":
        """The NVIDIA H200 (or a Hopper of that shape) as a GPU-less target: for CI and replay.
        ``nvrtc``: the NVRTC version to record (default: the installed one, looked up)."""
        if nvrtc is None:
            from kgen.toolkit import nvrtc_version

            nvrtc = nvrtc_version()
        return cls(name=name, cc=tuple(cc), sm_count=132, smem_per_block=48 * 1024,
                   smem_per_block_optin=227 * 1024, smem_per_sm=228 * 1024,
                   l2_bytes=60 * 1024 * 1024, nvrtc_version=nvrtc)

    @classmethod
    def detect(cls, device_id: int = 0) -> "Target":
        """The GPU this process sees (raises NoDeviceError when there is none)."""
        from kgen.toolkit import nvrtc_version

        try:
            from cupy.cuda import runtime

            count = runtime.getDeviceCount()
        except Exception as exc:  # no driver, no libcuda, no device
            raise NoDeviceError(f"no CUDA device is visible ({type(exc).__name__}: {exc})") from None
        if count == 0 or device_id >= count:
            raise NoDeviceError(f"CUDA device {device_id} does not exist ({count} visible)")
        props = runtime.getDeviceProperties(device_id)
        name = device_name(props)
        return cls(name=name, cc=(int(props["major"]), int(props["minor"])),
                   sm_count=int(props["multiProcessorCount"]),
                   smem_per_block=int(props["sharedMemPerBlock"]),
                   smem_per_block_optin=int(props.get("sharedMemPerBlockOptin", props["sharedMemPerBlock"])),
                   smem_per_sm=int(props["sharedMemPerMultiprocessor"]),
                   regs_per_sm=int(props["regsPerMultiprocessor"]),
                   max_threads_per_block=int(props["maxThreadsPerBlock"]),
                   l2_bytes=int(props["l2CacheSize"]),
                   driver_version=int(runtime.driverGetVersion()),
                   runtime_version=int(runtime.runtimeGetVersion()),
                   nvrtc_version=nvrtc_version(), device_id=device_id)


def device_name(props: Mapping[str, Any]) -> str:
    """The name in CUDA device properties (bytes or str, by CuPy version)."""
    return props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])


def target_from_dict(d: Mapping[str, Any]) -> Target:
    d = dict(d)
    d["cc"] = tuple(d["cc"])
    d["extra"] = tuple(tuple(x) for x in d.get("extra", ()))
    return Target(**d)
