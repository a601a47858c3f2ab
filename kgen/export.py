"""``kgen export``: tuned kernels as a self-contained Python package.

The package holds each kernel's CUDA source, a cubin for the tuned device's arch, PTX for
newer GPUs, a dispatch table (table.json) and a module whose only runtime dependency is
CuPy: no kgen, Optuna, Jinja2 or database.

>>> # export_package("gemm", "out", name="mykernels")   # then: import mykernels; mykernels.gemm(a, b)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from kgen.compile import compile_ptx, compile_source
from kgen.errors import CompileError, KgenError
from kgen.multi import read_problems
from kgen.problem import Problem, Target
from kgen.provenance import kgen_version
from kgen.render import render
from kgen.spec import get_spec

log = logging.getLogger(__name__)

_RUNTIMES = {"gemm": "gemm_module.py"}
_PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "GEMM kernels tuned by kgen for {device}"
requires-python = ">=3.9"
dependencies = ["cupy-cuda13x"]

[tool.setuptools.package-data]
{name} = ["table.json", "kernels/*"]
"""


@dataclass
class ExportSummary:
    path: Path
    device: str
    arch: str
    problems: int
    kernels: int
    skipped: tuple[str, ...] = ()   # problems whose best record is not a valid config: left out


def _pick_device(db, family: str, digest: str, device: str | None) -> str:
    devices = sorted({r.provenance.device for r in db.records(family, template_digest=digest)
                      if r.measurement.ok})
    if device:
        if device not in devices:
            raise KgenError(f"no tuned {family} records for device {device!r}",
                            remedy=f"tuned devices: {', '.join(devices) or 'none (tune first)'}")
        return device
    if len(devices) != 1:
        raise KgenError(f"the database holds {family} records of {len(devices)} devices",
                        remedy="choose one with --device: " + (", ".join(devices) or "none (tune first)"))
    return devices[0]


def _write_kernel(spec, problem, config, target, kernels: Path, written: set, cc) -> None:
    """Source, cubin and PTX of one config, once."""
    if config.name in written:
        return
    source = render(spec, problem, config, target)
    result = compile_source(source)
    if result.failure is not None:
        raise CompileError(f"{config.name} did not compile: {result.failure.detail[:500]}")
    (kernels / f"{config.name}.cubin").write_bytes(result.binary.cubin)
    (kernels / f"{config.name}.ptx").write_text(compile_ptx(source, f"compute_{cc[0]}{cc[1]}"))
    (kernels / f"{config.name}.cu").write_text(source.code)
    written.add(config.name)


def _unaligned_fallbacks(spec, target, bests, kernels: Path, written: set, cc) -> dict:
    """Per dtype and layout, a scalar-load kernel that serves operands of any alignment.

    It is the family's default config for the largest exported problem of that dtype and
    layout, with alignment 1 (so every vector width is 1).
    """
    largest: dict[str, Problem] = {}
    for best in bests:
        p = Problem.from_key(best.measurement.problem_key)
        key = f"{p['dtype']}|{p['layout']}"
        size = p["m"] * p["n"] * p["k"]
        if key not in largest or size > largest[key]["m"] * largest[key]["n"] * largest[key]["k"]:
            largest[key] = p
    out = {}
    for key, p in sorted(largest.items()):
        unaligned = p.replace(align_a=1, align_b=1)
        config = spec.default_config(unaligned, target)
        _write_kernel(spec, unaligned, config, target, kernels, written, cc)
        out[key] = {"config": config.name, "values": config.as_dict()}
    return out


def export_package(family: str, out_dir: str | Path, name: str = "kgen_kernels", device: str | None = None,
                   problems: str | Path | None = None, db=None) -> ExportSummary:
    """Write package ``name`` under ``out_dir`` with the best tuned kernels of ``family``."""
    if family not in _RUNTIMES:
        raise KgenError(f"export supports {sorted(_RUNTIMES)}; not {family!r}")
    if not name.isidentifier():
        raise KgenError(f"{name!r} is not a Python package name", remedy="use letters, digits and _")
    if db is None:
        from kgen.db import open_default

        db = open_default()
    spec = get_spec(family)
    digest = spec.template_digest()
    device = _pick_device(db, family, digest, device)
    wanted = {p.key for p in read_problems(problems)} if problems else None
    bests = []
    for key in db.problems(family, device, digest):
        if wanted is None or key in wanted:
            best = db.best(family, key, device, digest)
            if best is not None:
                bests.append(best)
    if not bests:
        raise KgenError(f"nothing to export: no tuned {family} problem on {device} matches",
                        remedy="tune the problems first, or check --problems")
    cc = tuple(int(x) for x in bests[0].provenance.cc.split("."))
    target = dataclasses.replace(Target.h200(device), cc=cc)
    arch = f"sm_{cc[0]}{cc[1]}"
    package = Path(out_dir) / name
    kernels = package / "kernels"
    if package.exists():
        shutil.rmtree(package)
    kernels.mkdir(parents=True)
    table = {"family": family, "device": device, "arch": arch, "kgen_version": kgen_version(),
             "template_digest": digest, "problems": {}}
    written: set[str] = set()
    skipped: list[str] = []
    for best in sorted(bests, key=lambda r: r.measurement.problem_key):
        m = best.measurement
        problem = Problem.from_key(m.problem_key)
        config = spec.space(problem, target).trusted(m.config)
        if config is None:           # a shared record's invalid values: never compiled or shipped
            log.warning("export: %s's best config %r is not a valid %s config; left out",
                        m.problem_key, m.config_name, family)
            skipped.append(m.problem_key)
            continue
        _write_kernel(spec, problem, config, target, kernels, written, cc)
        table["problems"][m.problem_key] = {"config": config.name, "values": config.as_dict(),
                                            "problem": problem.as_dict(), "time_ms": m.time_ms}
    bests = [b for b in bests if b.measurement.problem_key not in skipped]
    table["fallbacks"] = _unaligned_fallbacks(spec, target, bests, kernels, written, cc)
    (package / "table.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    runtime_dir = Path(__file__).parent / "export_runtime"
    module = (runtime_dir / _RUNTIMES[family]).read_text().replace("__PACKAGE__", name)
    (package / "__init__.py").write_text(module)
    shutil.copyfile(Path(__file__).parent / "kernels" / f"{family}_rules.py", package / "_rules.py")
    shutil.copyfile(Path(__file__).parent / "measure" / "arg_pack.py", package / "_launch.py")
    (Path(out_dir) / "pyproject.toml").write_text(
        _PYPROJECT.format(name=name, version=kgen_version().replace("+", ".post0+"), device=device))
    return ExportSummary(package, device, arch, len(table["problems"]), len(written), tuple(skipped))
