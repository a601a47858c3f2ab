"""Param / Space / Constraint / Config, and the GEMM space's static constraints (no GPU)."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from kgen.errors import SpaceError
from kgen.kernels.gemm.simt import GemmSimt
from kgen.kernels.gemm.problem import gemm_problem
from kgen.problem import Target
from kgen.space import Config, Constraint, Param, Space

C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ---------------------------------------------------------------- a small space

PARAMS = [Param("a", (1, 2, 3, 4)), Param("b", (8, 16, 32)), Param("c", ("x", "y")), Param("d", (0.5, 1.0))]
RULES = [
    ("a*b <= 64", lambda v: v["a"] * v["b"] <= 64, ("a", "b")),
    ("c=y needs a even", lambda v: v["c"] == "x" or v["a"] % 2 == 0, ("a", "c")),
    ("d<1 only with b<32", lambda v: v["d"] == 1.0 or v["b"] < 32, ("b", "d")),
    ("prod fits", lambda v: v["prod"] <= 96, None),      # reads a derived value: final only
]
DERIVED = {"prod": lambda v: v["a"] * v["b"] * (2 if v["c"] == "y" else 1)}


def small_space(early: bool = True) -> Space:
    constraints = [Constraint(n, f, p if early else None) for n, f, p in RULES]
    return Space(PARAMS, constraints, DERIVED)


def brute_force() -> list[dict]:
    out = []
    for combo in itertools.product(*(p.choices for p in PARAMS)):
        v = dict(zip([p.name for p in PARAMS], combo))
        full = dict(v, prod=DERIVED["prod"](v))
        if all(f(full) for _, f, _ in RULES):
            out.append(v)
    return out


def test_enumeration_equals_brute_force_filter():
    space = small_space()
    got = [c.as_dict() for c in space.configs()]
    want = brute_force()
    assert 0 < len(want) < space.size()          # the constraints do cut something
    assert got == want                            # same set, in product order


def test_early_pruning_gives_the_same_set_as_final_only():
    early, final = small_space(early=True), small_space(early=False)
    assert early.configs() == final.configs()
    assert [c.name for c in early.configs()] == [c.name for c in final.configs()]


def test_names_are_unique_c_identifiers():
    configs = small_space().configs()
    names = [c.name for c in configs]
    assert all(C_IDENT.match(n) for n in names), names
    assert len(set(names)) == len(names)


def test_find_returns_the_valid_configs_of_the_names_given():
    space = small_space()
    configs = space.configs()
    picked = [configs[0].name, configs[-1].name]
    found = space.find(picked + ["no_such_config"])
    assert list(found) == picked and all(found[n] == c for n, c in zip(picked, (configs[0], configs[-1])))
    assert space.find([]) == {}


def test_config_access_equality_and_hash():
    space = small_space()
    c = space.config(a=2, b=16, c="y", d=0.5)
    assert c["b"] == 16 and c.as_dict() == {"a": 2, "b": 16, "c": "y", "d": 0.5}
    with pytest.raises(KeyError):
        c["nope"]
    twin = space.make({"d": 0.5, "c": "y", "b": 16, "a": 2})   # order of the dict does not matter
    assert twin == c and hash(twin) == hash(c) and len({c, twin}) == 1
    assert isinstance(c, Config) and list(c.as_dict()) == ["a", "b", "c", "d"]


def test_sample_is_deterministic_valid_and_distinct():
    space = small_space()
    s1, s2 = space.sample(6, seed=7), space.sample(6, seed=7)
    assert s1 == s2 and [c.name for c in s1] == [c.name for c in s2]
    assert len(s1) == 6 and len(set(s1)) == 6
    assert all(space.is_valid(c.as_dict()) for c in s1)
    assert {c.name for c in space.sample(6, seed=8)} != {c.name for c in s1} or len(space.configs()) <= 6
    # asking for more than exist gives every valid config once
    every = space.sample(len(space.configs()) + 3, seed=1)
    assert sorted(c.name for c in every) == sorted(c.name for c in space.configs())


def test_violations_name_the_broken_constraints():
    space = small_space()
    assert space.violations({"a": 2, "b": 16, "c": "y", "d": 0.5}) == []
    assert space.violations({"a": 3, "b": 32, "c": "y", "d": 0.5}) == [
        "a*b <= 64", "c=y needs a even", "d<1 only with b<32", "prod fits"]
    assert space.violations({"a": 4, "b": 16, "c": "x", "d": 1.0}) == []
    assert space.violations({"a": 4, "b": 16, "c": "y", "d": 1.0}) == ["prod fits"]
    # a value outside the choices is named too
    broken = space.violations({"a": 5, "b": 16, "c": "x", "d": 1.0})
    assert len(broken) == 1 and "a=5" in broken[0]
    with pytest.raises(SpaceError, match="prod fits"):
        space.config(a=4, b=16, c="y", d=1.0)


def test_violations_name_a_constraint_that_raises():
    space = Space([Param("x", (0, 1, 2))], [Constraint("4 % x == 0", lambda v: 4 % v["x"] == 0, ("x",))])
    assert [c["x"] for c in space.configs()] == [1, 2]
    broken = space.violations({"x": 0})
    assert len(broken) == 1 and broken[0].startswith("4 % x == 0") and "ZeroDivisionError" in broken[0]


def test_violations_reject_missing_or_unknown_values():
    space = small_space()
    with pytest.raises(SpaceError, match="missing"):
        space.violations({"a": 1, "b": 8, "c": "x"})
    with pytest.raises(SpaceError, match="unknown"):
        space.violations({"a": 1, "b": 8, "c": "x", "d": 1.0, "e": 0})


@pytest.mark.parametrize("make", [
    lambda: Param("1bad", (1, 2)),
    lambda: Param("has space", (1,)),
    lambda: Param("empty", ()),
    lambda: Param("dup", (1, 2, 1)),
    lambda: Space([Param("a", (1,)), Param("a", (2,))]),
], ids=["digit-first", "space-in-name", "no-choices", "repeated-choice", "repeated-param"])
def test_malformed_spaces_raise_space_error(make):
    with pytest.raises(SpaceError):
        make()


def test_a_namer_that_is_not_an_identifier_raises():
    space = Space([Param("a", (1, 2))], namer=lambda v: f"k-{v['a']}")
    with pytest.raises(SpaceError, match="identifier"):
        space.configs()


def test_default_namer_spells_floats_and_negatives_as_identifiers():
    space = Space([Param("s", (-1.5, 0.25, 2))])
    names = [c.name for c in space.configs()]
    assert all(C_IDENT.match(n) for n in names) and len(set(names)) == 3


# ---------------------------------------------------------------- the GEMM space

H200 = Target.h200()
SPEC = GemmSimt()


@pytest.fixture(scope="module")
def gemm_spaces():
    problems = [gemm_problem(64, 64, 64, "float32", "NN"),
                gemm_problem(64, 48, 128, "float16", "TN", align_a=2, align_b=8),
                gemm_problem(32, 64, 96, "float64", "NT", align_a=1)]
    return [(p, SPEC.space(p, H200)) for p in problems]


def test_gemm_enumerated_configs_satisfy_the_static_limits(gemm_spaces):
    for problem, space in gemm_spaces:
        configs = space.configs()
        assert configs, problem.key
        names = [c.name for c in configs]
        assert len(set(names)) == len(names)
        for c in configs:
            assert C_IDENT.match(c.name)
            full = space.full_values(c.as_dict())
            assert 64 <= full["THREADS"] <= 512, c.name
            assert full["SMEM"] <= H200.smem_per_block_optin, c.name
            assert c["VA"] <= problem["align_a"] and c["VB"] <= problem["align_b"], c.name
            assert full["THREADS"] == (c["BM"] // c["TM"]) * (c["BN"] // c["TN"])


def test_gemm_early_pruning_agrees_with_full_validity(gemm_spaces):
    """Enumerated set == valid points of the product (checked on random product points), and
    each constraint's declared ``params`` are enough to evaluate it."""
    rng = random.Random(3)
    for problem, space in gemm_spaces:
        enumerated = {c.name for c in space.configs()}
        for _ in range(1500):
            values = {p.name: rng.choice(p.choices) for p in space.params}
            assert space.is_valid(values) == (space.make(values).name in enumerated), values
            full = space.full_values(values)
            for c in space.constraints:
                if c.params is not None:
                    part = {k: values[k] for k in c.params}
                    assert bool(c.holds(part)) == bool(c.holds(full)), (c.name, values)
        # and the sampled valid configs are in the enumeration
        for c in space.sample(200, seed=1):
            assert c.name in enumerated


def test_gemm_invalid_configs_are_rejected_before_compiling():
    problem = gemm_problem(1024, 1024, 1024, "float32", "NN", align_a=2)
    space = SPEC.space(problem, H200)
    good = SPEC.default_config(problem, H200).as_dict()
    assert space.violations(good) == []

    huge = dict(good, BM=256, TM=2, BN=256, TN=2)          # 128 * 128 = 16384 threads
    assert space.full_values(huge)["THREADS"] == 16384
    assert "64 <= threads per block <= 512" in space.violations(huge)

    wide = dict(good, VA=4)                                 # align_a is 2
    assert "A vector fits alignment and tile" in space.violations(wide)

    with pytest.raises(SpaceError, match="threads per block"):
        space.config(**huge)


def test_gemm_shared_memory_limit_follows_the_target():
    problem = gemm_problem(256, 256, 256, "float64", "NN")
    small_target = Target(name="tiny", cc=(9, 0), sm_count=4, smem_per_block=16 * 1024,
                          smem_per_block_optin=16 * 1024, smem_per_sm=32 * 1024)
    big = SPEC.space(problem, H200)
    small = SPEC.space(problem, small_target)
    v = dict(BM=128, BN=128, TM=8, TN=8, BK=16, VA=2, VB=2, DB=1, UNROLL=0, GM=1, SK=1, MINB=1)
    assert big.full_values(v)["SMEM"] > 16 * 1024
    assert "shared memory fits the device" in small.violations(v)
    assert "shared memory fits the device" not in big.violations(v)


def test_neighbours_are_the_valid_configs_one_parameter_away():
    problem = gemm_problem(1000, 1000, 1000)
    space = SPEC.space(problem, H200)
    base = SPEC.default_config(problem, H200).as_dict()
    near = space.neighbours(base)
    assert near and len({c.name for c in near}) == len(near)
    for config in near:
        changed = [p.name for p in space.params if config[p.name] != base[p.name]]
        assert len(changed) == 1 and space.is_valid(config.as_dict())
    expected = sum(space.is_valid({**base, p.name: v}) for p in space.params for v in p.choices if v != base[p.name])
    assert len(near) == expected


def _mutated(rng, space):
    """Values of ``space``'s parameters: its choices, or now and then a value of another type,
    an unhashable one, or a number no choice has."""
    values = {p.name: rng.choice(p.choices) for p in space.params}
    if rng.random() < 0.3:
        name = rng.choice(space.names)
        values[name] = rng.choice([str(values[name]), [values[name]], 3, 7.0, True, None, "K"])
    return values


REQUESTS = {"gemm": dict(m=1000, n=72, k=520, dtype="float32"),
            "gemm_mma": dict(m=1000, n=72, k=520, dtype="float16"),
            "gemm_wgmma": dict(m=1000, n=72, k=520, dtype="bfloat16"),
            "conv2d": dict(n=2, c=64, h=14, w=14, k=128, r=3, s=3, stride=1, padding=1, dilation=1),
            "softmax": dict(rows=300, cols=1000)}


@pytest.mark.parametrize("family", sorted(REQUESTS))
def test_trusted_name_agrees_with_the_checked_config(family):
    """trusted_name's one-function check (every parameter given) says what trusted() says:
    the same name for a valid config, None for anything else (the small space too)."""
    from kgen.registry import get_spec

    spec, problem = get_spec(family).request(H200, **REQUESTS[family])
    rng = random.Random(7)
    for space in (small_space(), spec.space(problem, H200)):
        valid = 0
        for _ in range(3000):
            values = _mutated(rng, space)
            trusted = space.trusted(values)
            assert space.trusted_name(values) == (trusted.name if trusted else None), values
            valid += trusted is not None
        for config in space.sample(50, seed=2):
            assert space.trusted_name(config.as_dict()) == config.name
        assert valid > 0, problem.key


def test_trusted_name_takes_each_declared_choice_of_its_own_type_and_nothing_else():
    """The hot path (every parameter given) and the others: a value equal to a choice but of
    another type (True for 1, 1.0 for 1, 1 for 1.0, "1" for 1), an unhashable one, a key too
    many or too few is no config; a parameter with a default may be left out."""
    space = Space([Param("a", (0, 1, 2)), Param("b", ("x", "y")), Param("c", (0.5, 1.0)), Param("d", (True, False)),
                   Param("e", (4, 8), default=4)],
                  constraints=[Constraint("a+c <= 2", lambda v: v["a"] + v["c"] <= 2, ("a", "c"))],
                  namer=lambda v: f"t_a{v['a']}_{v['b']}_c{int(v['c'] * 2)}_d{int(v['d'])}_e{v['e']}")
    good = {"a": 1, "b": "y", "c": 1.0, "d": False, "e": 8}
    assert space.trusted_name(good) == space.trusted(good).name == "t_a1_y_c2_d0_e8"
    assert space.trusted_name({k: v for k, v in good.items() if k != "e"}) == "t_a1_y_c2_d0_e4"
    bad = [{"a": True}, {"a": 1.0}, {"a": "1"}, {"a": [1]}, {"a": 3}, {"b": b"y"}, {"c": 1}, {"d": 0},
           {"d": None}, {"a": 2, "c": 1.0}, {"extra": 1}]
    for change in bad:
        values = {**good, **change}
        assert space.trusted_name(values) is None and space.trusted(values) is None, change
    assert space.trusted_name({k: v for k, v in good.items() if k != "a"}) is None
    assert space.trusted_name({**{k: v for k, v in good.items() if k != "a"}, "A": 1}) is None


def test_trusted_name_refuses_a_namer_that_gives_no_c_identifier():
    for name in ("9lives", "has space", "semi;colon", "", "caf\u00e9"):
        space = Space([Param("a", (1, 2))], namer=lambda v, name=name: name)
        assert space.trusted_name({"a": 1}) is None, name
    assert Space([Param("a", (1, 2))], namer=lambda v: "_ok_1").trusted_name({"a": 2}) == "_ok_1"

