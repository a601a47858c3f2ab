"""scripts/tc_table.py: the tensor-core table of docs/tensor_cores.md is the results file's, row
for row, the README's is a selection of its rows, and each problem's row is its best family's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts.tc_table import DEFAULT, MID_SHAPES, best_rows, mid_geomeans, table  # noqa: E402


def _row(family, m, n, k, ratio, dtype="bfloat16", **extra):
    return {"op": "gemm", "family": family, "dtype": dtype, "precision": dtype, "layout": "NN",
            "m": m, "n": n, "k": k, "kgen_ms": 1.0, "kgen_tflops": 100.0, "ratio_vs_cublas": ratio,
            "baselines": {"cublas": ratio}, "commit": "abc1234", "l2": "flushed-clean", **extra}


def _readme_tc_rows(readme: str, header: str) -> list[str]:
    """The lines of the README's table that starts with the tensor-core table's header."""
    lines = readme.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_tables_are_the_results_files():
    rows = json.loads(DEFAULT.read_text())["rows"]
    expected = table(rows)
    doc = (ROOT / "docs" / "tensor_cores.md").read_text()
    assert expected in doc, "docs/tensor_cores.md's table differs: paste `python scripts/tc_table.py`"
    readme = (ROOT / "README.md").read_text()
    header, separator, *lines = expected.splitlines()
    assert f"{header}\n{separator}\n" in readme, "README lost its tensor-core table"
    chosen = _readme_tc_rows(readme, header)
    assert len(chosen) >= 8 and len(set(chosen)) == len(chosen)
    for line in chosen:
        assert line in lines, f"README's tensor-core row is not the results file's: {line}"
    for dtype, mean in mid_geomeans(rows).items():
        assert f"{mean:.3f}" in doc and f"{mean:.3f}" in readme


def test_each_problem_keeps_its_best_familys_row_and_cuda_core_rows_are_left_out():
    rows = [_row("gemm_mma", 1000, 1000, 1000, 0.8), _row("gemm_wgmma", 1000, 1000, 1000, 0.9),
            _row("gemm_simt", 4096, 4096, 4096, 1.1, dtype="float32"),
            _row("gemm_wgmma", 4096, 4096, 4096, 0.99), _row("gemm_wgmma", 16, 4096, 4096, 1.0,
                                                             bandwidth_fraction=0.5)]
    chosen = best_rows(rows)
    assert [(r["family"], r["m"]) for r in chosen] == [("gemm_wgmma", 4096), ("gemm_wgmma", 1000),
                                                        ("gemm_wgmma", 16)]   # large, mid, decode
    text = table(rows)
    assert "| bf16 1000³ | NN | wgmma |" in text and "| 0.50" in text and "simt" not in text
    assert mid_geomeans(rows) == {}      # not every mid shape has a row


def test_the_mid_shape_mean_is_geometric():
    rows = [_row("gemm_wgmma", *s, r) for s, r in zip(MID_SHAPES, (0.5, 2.0, 1.0, 1.0, 1.0))]
    assert abs(mid_geomeans(rows)["bfloat16"] - 1.0) < 1e-12
