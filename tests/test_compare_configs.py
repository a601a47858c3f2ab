"""scripts/compare_configs.py's reading of its arguments (no GPU)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import compare_configs  # noqa: E402


def test_problems_and_their_configs_in_order():
    items = ["bfloat16:NN:4096x4096x4096", "cfg_a", "cfg_b",
             "softmax|cols=50257|dtype=bfloat16|rows=4096", "softmax_bulk_x"]
    assert compare_configs._groups(items) == [("bfloat16:NN:4096x4096x4096", ["cfg_a", "cfg_b"]),
                                              ("softmax|cols=50257|dtype=bfloat16|rows=4096", ["softmax_bulk_x"])]


def test_a_problem_key_has_no_gemm_baseline():
    assert compare_configs.is_problem_key("rmsnorm|cols=5120|dtype=bfloat16|rows=8192")
    assert not compare_configs.is_problem_key("float16:TN:8192x8191x16")


def test_a_config_before_any_problem_is_refused():
    with pytest.raises(SystemExit, match="name a problem"):
        compare_configs._groups(["cfg_a", "float32:NN:8x8x8"])
