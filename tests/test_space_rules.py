"""kgen.space_rules: constraints and a name as text, compiled into a space's check."""

from __future__ import annotations

import itertools
import random

import pytest

from kgen.errors import SpaceError
from kgen.kernels.gemm.problem import gemm_problem
from kgen.kernels.gemm.simt import GemmSimt
from kgen.problem import Target
from kgen.space import Param, Space
from kgen.space_rules import Rules

PARAMS = (Param("block", (32, 64, 128, 256)), Param("vec", (1, 2, 4)), Param("deep", (0, 1)))


def rules(**constants) -> Rules:
    return Rules([p.name for p in PARAMS], {"limit": 512, "tag": "t", **constants},
                 {"work": "block * vec", "bytes": "work * (2 if deep else 1)"},
                 [("work fits", "work <= limit"), ("vec divides block", "block % vec == 0"),
                  ("deep only for wide blocks", "not deep or block >= 128"), ("bytes fit", "bytes <= 2 * limit")],
                 "{tag}_b{block}_v{vec}_d{deep}")


def test_each_constraint_reads_the_parameters_of_its_text_and_lets():
    assert [c.params for c in rules().constraints()] == [("block", "vec"), ("block", "vec"), ("block", "deep"),
                                                         ("block", "vec", "deep")]


def test_the_check_agrees_with_the_constraints_and_the_namer_on_every_config():
    r = rules()
    space = Space(PARAMS, r.constraints(), {"WORK": r.let("work")}, r.namer, r.check)
    seen = 0
    for block in (32, 64, 128, 256):
        for vec in (1, 2, 4):
            for deep in (0, 1):
                values = {"block": block, "vec": vec, "deep": deep}
                valid = not space.violations(values)
                assert r.check(block, vec, deep) == (space.make(values).name if valid else None)
                assert space.trusted_name(values) == r.check(block, vec, deep)
                seen += valid
    assert 0 < seen < 24
    product = itertools.product(*(p.choices for p in PARAMS))       # enumeration's order
    assert [c.name for c in space.configs()] == [name for values in product if (name := r.check(*values))]
    assert space.full_values({"block": 64, "vec": 4, "deep": 0})["WORK"] == 256


def test_constants_are_values_never_text():
    """A constant is a variable of the compiled functions (their closure's): a value with
    braces or quotes is rendered as it is, never evaluated."""
    r = rules(tag="x}{__import__('os')}\"'")
    assert r.check(64, 2, 0) == "x}{__import__('os')}\"'_b64_v2_d0"


def test_spaces_compiled_from_one_text_keep_their_own_constants():
    """Rules of one text with other constants share the compiled code, not the constants: used
    in turn, each judges and names by its own, however the calls interleave."""
    wide, narrow, other = rules(), rules(limit=64), rules(tag="u")
    for _ in range(3):
        assert wide.check(64, 4, 0) == "t_b64_v4_d0" and narrow.check(64, 4, 0) is None
        assert other.check(64, 4, 0) == "u_b64_v4_d0" and narrow.check(32, 2, 0) == "t_b32_v2_d0"
        assert [c.holds({"block": 64, "vec": 4, "deep": 0}) for c in narrow.constraints()][0] is False
        assert wide.let("bytes")({"block": 64, "vec": 4, "deep": 1}) == 512


def test_a_constant_no_text_reads_may_have_any_name():
    r = Rules(["block"], {"limit": 8, "not an identifier": 1, "class": 2}, {}, [("fits", "block <= limit")],
              "b{block}")
    assert r.check(8) == "b8" and r.check(9) is None


@pytest.mark.parametrize("lets, rule, name, words", [
    ({}, ("r", "nosuch < 3"), "{block}", "unknown names ['nosuch']"),
    ({}, ("r", "block <"), "{block}", "not an expression"),
    ({"block": "vec * 2"}, ("r", "block > 0"), "{block}", "not a new identifier"),
    ({"later": "sooner + 1", "sooner": "1"}, ("r", "later > 0"), "{block}", "unknown names ['sooner']"),
    ({}, ("r", "block > 0"), "{nosuch}", "the name"),
    ({}, ("r", "block > 0  # a comment"), "{block}", "do not compile"),
    ({"v": "block"}, ("r", "v > 0"), "{block}", "'v' names the values"),
])
def test_a_broken_text_is_a_space_error(lets, rule, name, words):
    with pytest.raises(SpaceError, match=words.replace("[", r"\[").replace("]", r"\]")):
        Rules(["block", "vec"], {}, lets, [rule], name)


def test_a_space_refuses_a_check_compiled_from_other_constraints_or_another_namer():
    r = rules()
    with pytest.raises(SpaceError, match="kgen.space_rules"):
        Space(PARAMS, r.constraints()[:2], {}, r.namer, r.check)
    with pytest.raises(SpaceError, match="kgen.space_rules"):
        Space(PARAMS, r.constraints(), {}, lambda v: "other", r.check)
    with pytest.raises(SpaceError, match="kgen.space_rules"):
        Space(PARAMS[::-1], r.constraints(), {}, r.namer, r.check)
    renamed = Space(PARAMS, r.constraints(), {}, r.namer, r.check).renamed("t_", "u_")
    assert renamed.check is None and renamed.trusted_name({"block": 64, "vec": 2, "deep": 0}) == "u_b64_v2_d0"


@pytest.mark.parametrize("dtype, layout, aligns", [("float32", "NN", (4, 4)), ("float16", "TN", (8, 2)),
                                                   ("float64", "NT", (1, 2)), ("float32", "TT", (1, 1))])
def test_the_simt_gemm_check_says_what_its_constraints_say(dtype, layout, aligns):
    """The compiled check of the CUDA-core GEMM's space against its constraints one by one,
    on random values of every parameter (most invalid) and on its valid configs."""
    problem = gemm_problem(1000, 72, 520, dtype, layout).replace(align_a=aligns[0], align_b=aligns[1])
    space = GemmSimt().space(problem, Target.h200())
    assert space.check is not None
    rng, valid = random.Random(3), 0
    for _ in range(4000):
        values = {p.name: rng.choice(p.choices) for p in space.params}
        broken = space.violations(values)
        got = space.check(*(values[n] for n in space.names))
        assert got == (None if broken else space.make(values).name), (values, broken)
        valid += not broken
    assert valid > 0
    for config in space.sample(40, seed=1):
        assert space.check(*(config[n] for n in space.names)) == config.name
