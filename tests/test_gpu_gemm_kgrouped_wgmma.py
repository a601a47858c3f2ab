"""K-grouped GEMM on wgmma on the GPU: sampled configs on uneven, empty and short groups against
the float64 products (NaN-poisoned outputs); Inf and NaN in the rows just past a group's end,
inside its last k-block, leave its sums alone (they are zeroed or skipped); ``kgen.gemm_kgrouped``
runs this family where TMA can read the rows."""

from __future__ import annotations

import pytest

from kgen.kernels.gemm.kgrouped import kgrouped_problem
from kgen.kernels.gemm.kgrouped_wgmma import FAMILY, GemmKGroupedWgmma

from memory_gpu import check_config, check_sampled, target

pytestmark = pytest.mark.gpu

SPEC = GemmKGroupedWgmma()
CASES = [   # groups, m, n, k (rows in all), dtype, out_dtype
    (8, 256, 136, 1000, "bfloat16", None),
    (64, 64, 200, 300, "float16", None),            # about 5 rows a group, some groups empty
    (5, 128, 64, 61, "bfloat16", "float32"),        # fewer rows than a k-block in all
    (16, 512, 384, 8192, "bfloat16", None),
    (1, 40, 24, 777, "float16", "float32"),
    (200, 128, 128, 30000, "bfloat16", None),       # many groups
]


def _problem(*args):
    return kgrouped_problem(*args, family=FAMILY)


@pytest.mark.parametrize("case", CASES)
def test_sampled_configs_are_correct(case):
    groups, m, n, k, dtype, out = case
    check_sampled(SPEC, _problem(groups, m, n, k, dtype, out), 4, seed=groups)


def test_values_past_a_groups_end_do_not_reach_its_sums():
    import cupy

    p = _problem(3, 128, 192, 200, "float16", None)
    space = SPEC.space(p, target())
    for i, config in enumerate([SPEC.default_config(p, target())] + space.sample(5, seed=7)):
        operands = SPEC.inputs(p, seed=i)
        # group 2 holds rows 90..119: its one k-block runs steps of rows 90..105 and 106..121 (rows
        # 120 and 121 zeroed) and skips 122..153; rows from 120 on belong to no group
        operands["ends"] = cupy.asarray([37, 90, 120], dtype=cupy.int32)
        operands["a"][121] = cupy.inf
        operands["b"][130] = cupy.nan
        operands["a"][150, 3] = -cupy.inf
        check, _ = check_config(SPEC, p, config, operands=operands)
        assert check.ok, f"{config.name}: {check.detail}"


def test_kgen_gemm_kgrouped_runs_this_family_where_tma_reads_the_rows():
    import cupy

    import kgen
    from kgen.ops.gemm_kgrouped import routed

    rng = cupy.random.default_rng(3)
    a = (rng.random((3000, 256), dtype=cupy.float32) - 0.5).astype(cupy.float16)
    b = (rng.random((3000, 384), dtype=cupy.float32) - 0.5).astype(cupy.float16)
    ends = cupy.asarray([700, 700, 1999, 2500], dtype=cupy.int32)
    spec, _, _ = routed(kgrouped_problem(4, 256, 384, 3000, "float16"), 0)
    assert spec.family == FAMILY
    c = kgen.gemm_kgrouped(a, b, ends)
    a64, b64 = a.astype(cupy.float64), b.astype(cupy.float64)
    want = cupy.stack([a64[:700].T @ b64[:700], cupy.zeros((256, 384)), a64[700:1999].T @ b64[700:1999],
                       a64[1999:2500].T @ b64[1999:2500]])
    assert float(cupy.abs(c.astype(cupy.float64) - want).max()) < 5e-3 * float(cupy.abs(want).max())
