"""`kgen tune --sanitize` (kgen.sanitize): the command it runs and how it reads memcheck's
answer, with a stand-in for compute-sanitizer (no GPU); the real one on the GPU."""

import stat
import sys

import pytest
from typer.testing import CliRunner

from kgen.cli import app
from kgen.kernels.gemm.problem import gemm_problem
from kgen.problem import Target
from kgen.registry import get_spec
from kgen.sanitize import command, errors_in, find_sanitizer, sanitize
from user_family import as_module, with_stray_write


def _stand_in(tmp_path, text: str, status: int):
    """A compute-sanitizer stand-in that prints ``text`` and exits with ``status``; it checks
    that the job it was given is a file and that it was asked for memcheck."""
    tool = tmp_path / "compute-sanitizer"
    tool.write_text(f"#!/bin/sh\n[ \"$2\" = memcheck ] || exit 99\n"
                    f"for a; do last=$a; done\n[ -f \"$last\" ] || exit 98\n"
                    f"printf '%s\\n' '{text}'\nexit {status}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return tool


def _gemm():
    spec = get_spec("gemm")
    problem = gemm_problem(64, 64, 64)
    target = Target.h200()
    return spec, problem, spec.space(problem, target).configs()[0], target


def test_the_command_runs_this_module_under_memcheck(tmp_path):
    cmd = command("/x/compute-sanitizer", tmp_path / "job.pkl")
    assert cmd[:3] == ["/x/compute-sanitizer", "--tool", "memcheck"] and "--error-exitcode" in cmd
    assert cmd[-4:] == [sys.executable, "-m", "kgen.sanitize", str(tmp_path / "job.pkl")]
    assert cmd[cmd.index("--padding") + 1] == str(2 << 20)      # KGEN_GUARD_BYTES after each allocation
    assert errors_in("x\n========= ERROR SUMMARY: 0 errors\n") == 0 and errors_in("no summary") is None


def test_no_sanitizer_means_nothing_checked_and_said_so(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_SANITIZER", str(tmp_path / "missing"))
    assert find_sanitizer() is None
    report = sanitize(*_gemm())
    assert not report.ran and report.ok and "not found" in report.detail


@pytest.mark.parametrize("text, status, errors, correct", [
    ("========= ERROR SUMMARY: 0 errors", 0, 0, True),
    ("========= Invalid __global__ write of size 4 bytes|========= ERROR SUMMARY: 2 errors", 86, 2, None),
    ("kgen sanitize: WRONG|========= ERROR SUMMARY: 0 errors", 87, 0, False),
])
def test_memcheck_findings_and_wrong_outputs_are_reported(tmp_path, monkeypatch, text, status, errors, correct):
    monkeypatch.setenv("KGEN_SANITIZER", str(_stand_in(tmp_path, text.replace("|", "\n"), status)))
    report = sanitize(*_gemm())
    assert report.ran and (report.errors, report.correct) == (errors, correct)
    assert report.ok == (errors == 0 and correct is True)
    if errors:
        assert "Invalid __global__ write" in report.detail


def test_a_sanitizer_that_gives_no_summary_is_not_taken_for_clean(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_SANITIZER", str(_stand_in(tmp_path, "segmentation fault", 139)))
    report = sanitize(*_gemm())
    assert report.ran and report.correct is None and "no summary" in report.detail and report.ok is True
    assert "139" in report.detail


def test_sanitize_needs_a_gpu_not_a_replay(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["tune", "gemm", "--m", "64", "--n", "64", "--k", "64", "--replay", "x.jsonl",
                                      "--sanitize"])
    assert result.exit_code == 2 and "a replay has none" in result.output


@pytest.mark.gpu
def test_memcheck_finds_a_stray_write_and_passes_a_clean_kernel(tmp_path):
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed")
    text = with_stray_write("vadd_stray", "out[n + 1000] = 0.f;").replace("1 << 24", "1 << 12")
    with as_module(tmp_path, "kgen_stray_example", text) as module:
        spec, problem = module.spec, module.problem
        target = Target.detect(0)
        space = spec.space(problem, target)
        clean = sanitize(spec, problem, space.config(BLOCK=128, VEC=2), target)
        stray = sanitize(spec, problem, space.config(BLOCK=128, VEC=4), target)
    assert clean.ran and clean.errors == 0 and clean.correct is True, clean.detail
    assert stray.errors >= 1 and "Invalid __global__ write" in stray.detail, stray.detail
