"""`kgen tune --sanitize`: one config run once under compute-sanitizer's memcheck.

The guard zones of every trial (kgen.measure.guard) catch a stray write near an output at no
cost; memcheck catches every out-of-bounds or misaligned access, reads and far writes
included, but slows a kernel by orders of magnitude, so it checks the config a tune keeps.

``sanitize(spec, problem, config, target)`` starts ``compute-sanitizer --tool memcheck`` on
this module (``python -m kgen.sanitize JOB``), which compiles the config (the compile cache
makes that instant after a tune), runs it once on fresh inputs and checks its outputs; the
report says how many errors memcheck found and whether the outputs were right.

>>> SanitizeReport(ran=False, errors=0, correct=None, detail="compute-sanitizer not found").ok
True
>>> errors_in("========= ERROR SUMMARY: 3 errors")
3
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kgen.knobs import knobs

_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+) error")
_ERROR_EXIT = 86       # memcheck's exit status when it found errors (--error-exitcode)
_WRONG_EXIT = 87       # the job's when the outputs were wrong


@dataclass(frozen=True)
class SanitizeReport:
    ran: bool                    # False: no compute-sanitizer here (nothing was checked)
    errors: int                  # memcheck's error count
    correct: bool | None         # the outputs matched the reference (None: not run)
    detail: str                  # memcheck's first findings, or why nothing ran

    @property
    def ok(self) -> bool:
        return self.errors == 0 and self.correct is not False


def errors_in(output: str) -> int | None:
    """The error count of memcheck's summary line in ``output`` (None: no summary)."""
    found = _SUMMARY.findall(output)
    return int(found[-1]) if found else None


def find_sanitizer() -> str | None:
    """compute-sanitizer's path: ``KGEN_SANITIZER``, else on PATH, else under /usr/local/cuda."""
    chosen = knobs.sanitizer
    if chosen:
        return chosen if Path(chosen).is_file() else None
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/compute-sanitizer")
    return str(default) if default.is_file() else None


def command(tool: str, job: Path) -> list[str]:
    """The command line that runs ``job`` (a pickled request) under memcheck, every allocation
    followed by ``KGEN_GUARD_BYTES`` of padding: the driver places small allocations side by
    side, so a write just past one lands in the next, which memcheck would take for valid."""
    from kgen.knobs import knobs

    return [tool, "--tool", "memcheck", "--error-exitcode", str(_ERROR_EXIT), "--print-limit", "20",
            "--leak-check", "no", "--padding", str(max(knobs.guard_bytes, 0)),
            sys.executable, "-m", "kgen.sanitize", str(job)]


def sanitize(spec, problem, config, target, device: int = 0, timeout_s: float = 900.0) -> SanitizeReport:
    """Run ``config`` of ``spec`` on ``problem`` once under memcheck on GPU ``device``."""
    tool = find_sanitizer()
    if tool is None:
        return SanitizeReport(False, 0, None, "compute-sanitizer not found (install the CUDA toolkit, or set "
                                              "KGEN_SANITIZER to its path): the best config was not sanitized")
    with tempfile.TemporaryDirectory(prefix="kgen-sanitize-") as folder:
        job = Path(folder) / "job.pkl"
        job.write_bytes(pickle.dumps((spec, problem, dict(config.as_dict()), target, device)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))   # user families import
        try:
            done = subprocess.run(command(tool, job), capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            return SanitizeReport(True, 0, None, f"memcheck did not finish within {timeout_s:.0f} s")
    output = done.stdout + done.stderr
    errors = errors_in(output)
    if errors is None:
        return SanitizeReport(True, 0, None, f"memcheck gave no summary (exit status {done.returncode}): "
                                             + _tail(output))
    correct = {0: True, _WRONG_EXIT: False}.get(done.returncode)     # memcheck's own status hides the job's
    findings = [line for line in output.splitlines() if line.startswith("=========") and "ERROR SUMMARY" not in line]
    return SanitizeReport(True, errors, correct, "\n".join(findings[:12]) if errors else _tail(output, 3))


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run_job(path: str) -> int:
    """The child: compile, run once on fresh inputs, check; 0 when right, _WRONG_EXIT otherwise."""
    import cupy

    from kgen.compile import compile_source
    from kgen.measure.launch import CupyKernel
    from kgen.measure.verify import verify
    from kgen.render import render

    spec, problem, values, target, device = pickle.loads(Path(path).read_bytes())
    cupy.cuda.Device(device).use()
    cupy.cuda.set_allocator(None)      # one cudaMalloc per array: memcheck sees each one's bounds, not a pool's
    space = spec.space(problem, target)
    config = space.trusted(values)
    if config is None:
        print(f"kgen sanitize: {values} is not a valid config of {problem.key}")
        return _WRONG_EXIT
    compiled = compile_source(render(spec, problem, config, target, space))
    if compiled.failure is not None:
        print(f"kgen sanitize: {config.name} does not compile: {compiled.failure.detail[:500]}")
        return _WRONG_EXIT
    operands = spec.inputs(problem, seed=1)
    expected = spec.reference(problem, operands)
    check = verify(spec, problem, config, CupyKernel(compiled.binary.cubin, compiled.binary.entry), operands,
                   expected)
    print(f"kgen sanitize: {config.name}: {'correct' if check.ok else 'WRONG ' + check.detail}")
    return 0 if check.ok else _WRONG_EXIT


if __name__ == "__main__":
    sys.exit(_run_job(sys.argv[1]))
