"""``kgen export``: tuned kernels as a self-contained Python package.

The package holds each kernel's CUDA source, a cubin for the tuned device's arch, PTX for
newer GPUs, a dispatch table (table.json) and a module whose only runtime dependency is
CuPy: no kgen, Optuna, Jinja2 or database. The module is the family's own
(``KernelSpec.export_runtime``, with its extra table entries and files), or the generic one,
which replays each problem's launch: its geometry and its arguments, recorded here as the
operands' names and the scalars' values.

>>> # export_package("gemm", "out", name="mykernels")   # then: import mykernels; mykernels.gemm(a, b)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kgen.compile import compile_ptx, compile_source
from kgen.errors import CompileError, KgenError
from kgen.multi import read_problems
from kgen.problem import Problem, Target
from kgen.provenance import kgen_version
from kgen.registry import get_spec
from kgen.render import render
from kgen.spec import KernelSpec
from kgen import tma_encode

log = logging.getLogger(__name__)

RUNTIME_DIR = Path(__file__).parent / "export_runtime"
# the helpers every exported runtime may import, by their names in the package
RUNTIME_FILES = {"_loader.py": RUNTIME_DIR / "loader.py", "_replay.py": RUNTIME_DIR / "replay.py",
                 "_tma.py": Path(tma_encode.__file__), "_launch.py": Path(__file__).parent / "measure" / "arg_pack.py"}
_PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "{family} kernels tuned by kgen for {device}"
requires-python = ">=3.9"
dependencies = {dependencies}

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


def _write_kernel(spec, problem, config, target, kernels: Path, written: dict, cc) -> str:
    """Source, cubin and PTX of one config on one problem, once per source; returns the files'
    stem. A family that compiles problem values into its kernels (a convolution's image sizes)
    renders one config name to several sources: each after the first gets a stem of its own
    (the name and the source's digest); the entry function keeps the config's name."""
    source = render(spec, problem, config, target)
    stem = written.get(source.digest)
    if stem is not None:
        return stem
    stem = config.name if config.name not in written.values() else f"{config.name}-{source.digest[:12]}"
    result = compile_source(source)
    if result.failure is not None:
        raise CompileError(f"{config.name} did not compile: {result.failure.detail[:500]}")
    (kernels / f"{stem}.cubin").write_bytes(result.binary.cubin)
    (kernels / f"{stem}.ptx").write_text(compile_ptx(source, source.arch.replace("sm_", "compute_")))
    (kernels / f"{stem}.cu").write_text(source.code)
    written[source.digest] = stem
    return stem


class _Operand:
    """Stands for an operand while a family's ``args`` are recorded for the generic runtime."""

    def __init__(self, name: str):
        self.name = name

    def as_scalar(self, dtype: str) -> "_ScalarOperand":
        """What ``kgen.spec.scalar_operand`` gives for this operand: a scalar read at the call."""
        return _ScalarOperand(self.name, dtype)


class _ScalarOperand:
    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, dtype


class _Operands(dict):
    def __missing__(self, name: str) -> _Operand:
        return _Operand(name)


def launch_recipe(spec, problem: Problem, config) -> dict:
    """The launch of ``config`` on ``problem`` as an exported runtime replays it: geometry, and
    the arguments as ``kgen.export_runtime.replay`` items: the family's ``arg_recipe``, else
    its ``args`` recorded with stand-ins (each argument an operand's pointer, a scalar given at
    the call, or a fixed value). KgenError where the family's arguments are computed from the
    arrays and it says no recipe (the family needs its own runtime)."""
    geo = spec.launch(problem, config)
    launch = {"grid": list(geo.grid), "block": list(geo.block), "shared_mem": geo.shared_mem}
    cleared = spec.cleared_outputs(problem, config)
    if cleared:
        launch["zero"] = cleared          # bytes of each named operand zeroed before the launch
    recipe = spec.arg_recipe(problem, config)
    if recipe is not None:
        return {**launch, "args": recipe}
    if type(spec).run is not KernelSpec.run:
        raise KgenError(f"the {spec.family} family launches in steps of its own (KernelSpec.run), which the "
                        "generic exported runtime cannot replay",
                        remedy="give the family an export runtime (KernelSpec.export_runtime)")
    remedy = "pass operands and numpy scalars from KernelSpec.args, or give the family its own export runtime"
    try:
        args = spec.args(problem, config, _Operands())
    except Exception as exc:
        raise KgenError(f"the {spec.family} family's arguments are computed from the operands "
                        f"({type(exc).__name__}: {exc}), which the generic exported runtime cannot replay",
                        remedy=remedy) from None
    recipe = []
    for arg in args:
        if isinstance(arg, _Operand):
            recipe.append({"pointer": arg.name})
        elif isinstance(arg, _ScalarOperand):
            recipe.append({"scalar": arg.name, "type": arg.dtype})
        elif isinstance(arg, np.generic) and arg.dtype.kind in "iuf":
            recipe.append({"type": arg.dtype.name, "value": arg.item()})
        else:
            raise KgenError(f"the {spec.family} family passes a {type(arg).__name__} argument, which the generic "
                            "exported runtime cannot replay", remedy=remedy)
    return {**launch, "args": recipe}


def export_package(family: str, out_dir: str | Path, name: str = "kgen_kernels", device: str | None = None,
                   problems: str | Path | None = None, db=None) -> ExportSummary:
    """Write package ``name`` under ``out_dir`` with the best tuned kernels of ``family``."""
    spec = get_spec(family)
    if not spec.export_runtime:
        raise KgenError(f"{family} kernels cannot be exported yet",
                        remedy="call them through kgen, or export a family that has an export runtime")
    if not name.isidentifier():
        raise KgenError(f"{name!r} is not a Python package name", remedy="use letters, digits and _")
    from kgen.db.trust import trusted_best
    from kgen.knobs import knobs

    if db is None:
        from kgen.db import open_default

        db = open_default()
    digest = spec.template_digest()
    device = _pick_device(db, family, digest, device)
    wanted = {p.key for _, p in read_problems(problems, spec, Target.h200(device))} if problems else None
    bests = []
    for key in db.problems(family, device, digest):
        if wanted is None or key in wanted:
            best = trusted_best(db, family, key, device, digest) if knobs.verified_only else \
                db.best(family, key, device, digest)     # as dispatch chooses (kgen.db.trust)
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
    written: dict[str, str] = {}          # source digest -> the files' stem
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
        recipe = launch_recipe(spec, problem, config) if spec.export_replays else {}
        stem = _write_kernel(spec, problem, config, target, kernels, written, cc)
        table["problems"][m.problem_key] = {"config": config.name, "kernel": stem, "values": config.as_dict(),
                                            "problem": problem.as_dict(), "time_ms": m.time_ms,
                                            **({"launch": {k: v for k, v in recipe.items() if k != "args"},
                                                "args": recipe["args"]} if recipe else {})}
    exported = [Problem.from_key(b.measurement.problem_key) for b in bests if b.measurement.problem_key not in skipped]
    table.update(spec.export_extras(
        target, exported, lambda problem, config: _write_kernel(spec, problem, config, target, kernels, written, cc)))
    (package / "table.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    module = (RUNTIME_DIR / spec.export_runtime).read_text()
    (package / "__init__.py").write_text(module.replace("__PACKAGE__", name).replace("__FAMILY__", family))
    for target_name, source in {**RUNTIME_FILES, **spec.export_files()}.items():
        shutil.copyfile(source, package / target_name)
    (Path(out_dir) / "pyproject.toml").write_text(
        _PYPROJECT.format(name=name, version=kgen_version().replace("+", ".post0+"), device=device, family=family,
                          dependencies=json.dumps(list(spec.export_dependencies))))
    return ExportSummary(package, device, arch, len(table["problems"]), len(written), tuple(skipped))
