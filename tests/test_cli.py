"""The command line through typer's test runner, with no GPU: replayed tunes, the database
views, info, and the errors a user can act on."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgen.cli import app

RECORDING = str(Path(__file__).parent / "data" / "h200_gemm_f32_simt.jsonl.gz")
SHAPE = ["--m", "1000", "--n", "1000", "--k", "1000"]
KEY = "gemm|align_a=4|align_b=4|dtype=float32|k=1000|layout=NN|m=1000|n=1000"


@pytest.fixture()
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")   # only what these tests tune
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_replayed_tune_stores_every_trial_and_resumes(cli):
    first = cli("tune", "gemm", *SHAPE, "--trials", "20", "--replay", RECORDING)
    assert first.exit_code == 0, first.output
    assert "measured now / from the database" in first.output and "20 / 0" in first.output
    again = cli("tune", "gemm", *SHAPE, "--trials", "30", "--replay", RECORDING)
    assert again.exit_code == 0, again.output
    assert "10 / 20" in again.output          # resumed: 20 known, 10 new

    listing = cli("db", "ls")
    assert listing.exit_code == 0 and "NVIDIA H200" in listing.output and " 30 " in listing.output
    shown = cli("db", "show", KEY, "--limit", "5")
    assert shown.exit_code == 0 and "30 records" in shown.output and "gemm_simt_f32_nn_" in shown.output


def test_info_lists_settings_and_families(cli):
    result = cli("info")
    assert result.exit_code == 0
    for text in ("KGEN_HOME", "KGEN_STRICT", "gemm", "nvrtc"):
        assert text in result.output


@pytest.mark.parametrize("args, words", [
    (["--dtype", "int8"], "not one of"),
    (["--layout", "NX"], "layout"),
    (["--sampler", "annealing"], "unknown sampler"),
])
def test_bad_options_exit_2_with_a_remedy(cli, args, words):
    result = cli("tune", "gemm", *SHAPE, "--replay", RECORDING, *args)
    assert result.exit_code == 2
    assert words in result.output and "remedy" in result.output


def test_problem_missing_from_the_recording_is_named(cli):
    result = cli("tune", "gemm", "--m", "5", "--n", "5", "--k", "5", "--replay", RECORDING)
    assert result.exit_code == 2 and "holds no measurements" in result.output


def test_db_show_of_an_unknown_problem(cli):
    result = cli("db", "show", "gemm|m=1")
    assert result.exit_code == 2 and "kgen db ls" in result.output


def test_tune_without_a_gpu_says_what_to_do(cli):
    try:
        from cupy.cuda import runtime

        if runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:
        pass
    result = cli("tune", "gemm", *SHAPE, "--trials", "2")
    assert result.exit_code == 2
    assert "no CUDA device" in result.output and "--replay" in result.output


@pytest.mark.parametrize("what", ["missing", "folder", "not gzip", "not a recording"])
def test_a_bad_replay_path_is_a_typed_error(cli, tmp_path, what):
    path = {"missing": tmp_path / "none.jsonl.gz", "folder": tmp_path}.get(what, tmp_path / "bad.jsonl.gz")
    if what == "not gzip":
        path.write_text('{"family": "gemm"}\n')
    elif what == "not a recording":
        path = tmp_path / "bad.jsonl"
        path.write_text("hello\n")
    result = cli("tune", "gemm", *SHAPE, "--replay", str(path))
    assert result.exit_code == 2 and "remedy" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("trials", ["0", "-3"])
def test_trials_must_be_at_least_one(cli, trials):
    result = cli("tune", "gemm", *SHAPE, "--trials", trials, "--replay", RECORDING)
    assert result.exit_code == 2 and "--trials" in result.output


def test_a_typo_is_reported_before_the_device_is_looked_for(cli):
    result = cli("tune", "gemm", *SHAPE, "--dtype", "int8")
    assert result.exit_code == 2 and "not one of" in result.output and "GPU" not in result.output


def test_no_device_error_is_a_device_error():
    from kgen.errors import DeviceError, NoDeviceError

    assert issubclass(NoDeviceError, DeviceError) and "replay" in NoDeviceError("x").remedy
