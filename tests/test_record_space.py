"""scripts/record_space.py --extend, with a replay standing in for the GPU (no GPU needed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import record_space  # noqa: E402

from kgen.db.exchange import read_records  # noqa: E402
from kgen.kernels.gemm.problem import gemm_problem  # noqa: E402
from kgen.problem import Target  # noqa: E402
from kgen.runners import Recording, ReplayRunner  # noqa: E402
from kgen.registry import get_spec  # noqa: E402

RECORDING = ROOT / "tests" / "data" / "h200_gemm_mma_bf16_space.jsonl.gz"   # a sampled space
TARGET = Target.h200("NVIDIA H200")


def _args(**over) -> argparse.Namespace:
    values = dict(extend=str(RECORDING), timeout=60.0, seed=0, live_seeds=0, live_trials=5, around_picks=1,
                  around_best=0)
    values.update(over)
    return argparse.Namespace(**values)


def test_the_neighbourhood_holds_the_anchor_and_its_valid_one_parameter_changes():
    spec, problem = get_spec("gemm"), gemm_problem(1000, 1000, 1000)
    space = spec.space(problem, TARGET)
    anchor = spec.default_config(problem, TARGET).as_dict()
    around = record_space.neighbourhood(space, [anchor])
    assert around[space.make(anchor).name] == anchor
    for values in around.values():
        assert space.is_valid(values)
        assert sum(values[p.name] != anchor[p.name] for p in space.params) <= 1
    changed = {p.name for values in around.values() for p in space.params if values[p.name] != anchor[p.name]}
    assert {"BM", "BN", "SK", "TM"} <= changed


def test_extend_keeps_every_old_record_and_adds_only_unrecorded_configs(capsys):
    old = read_records(RECORDING)
    recording = Recording.from_records(old)
    with ReplayRunner(recording) as runner:
        records = record_space.extend(_args(around_best=2), "gemm_mma", TARGET, runner)
    assert records[: len(old)] == old
    added = records[len(old):]
    assert added, "the picks' neighbourhoods hold configs the recording lacks"
    assert all((r.measurement.problem_key, r.measurement.config_name) not in recording.entries for r in added)
    # a replay answers an unrecorded config with a failure; the GPU measures it
    assert all(not r.measurement.ok for r in added)
    out = capsys.readouterr().out
    assert out.count("configs added") == len(recording.problems())
    assert "median 1.0" in out or "median 0.9" in out        # the recorded fastest, re-measured by the replay


def test_extend_without_anchors_or_live_tunes_adds_nothing(capsys):
    old = read_records(RECORDING)
    with ReplayRunner(Recording.from_records(old)) as runner:
        records = record_space.extend(_args(around_picks=0), "gemm_mma", TARGET, runner)
    assert len(records) == len(old)
    assert "0 configs added" in capsys.readouterr().out


def test_extend_skips_other_families(capsys):
    old = read_records(RECORDING)      # gemm_mma records only
    with ReplayRunner(Recording.from_records(old)) as runner:
        assert len(record_space.extend(_args(), "gemm", TARGET, runner)) == len(old)
    assert capsys.readouterr().out == ""
