"""The elementwise and cast families with no GPU: the expression whitelist, problems from
fields and calls, spaces, rendering, sampled configs compiled for sm_90 with 16-byte loads
in their SASS, and export's replay of scalars given at the call."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from kgen.cli import app
from kgen.errors import DtypeError, ExpressionError, InputError, ShapeError
from kgen.export import launch_recipe
from kgen.kernels.memory.cast import Cast, cast_problem
from kgen.kernels.memory.elementwise import Elementwise, elementwise_problem, parse_operands
from kgen.kernels.memory.elements import vector_widths
from kgen.kernels.memory.expr import parse
from kgen.problem import Problem, Target
from kgen.render import render

from compiling import compile_cases, compile_failures, compiled_rows, sass_or_skip

SPEC, CAST = Elementwise(), Cast()
PER_CASE = 12
CASES = [
    ("a * x + y", {"a": "scalar", "x": "full", "y": "full"}, "float32", "float32"),
    ("gelu(x) * y + z", {"x": "full", "y": "row", "z": "col"}, "bfloat16", "bfloat16"),
    ("exp(x) / (1 + maximum(x, y))", {"x": "full", "y": "full"}, "float16", "float32"),
]


@pytest.mark.parametrize("text", [
    "x.real", "__import__('os').system('ls')", "x[0]", "lambda: x", "foo(x)", "x if y else z", "x == y",
    "x | y", "x // y", "not x", "'s' + x", "1e400 * x", "abs(x, y)", "exp(x=1)", "2 * exp", "[x]", "x; y",
    "_x + 1", "x @ y", "True * x", "exp(*x)", "f'{x}'",
])
def test_the_parser_rejects_what_is_not_whitelisted_naming_the_token(text):
    with pytest.raises(ExpressionError) as err:
        parse(text)
    assert str(err.value), text
    assert "remedy" in str(err.value)


def test_the_parser_names_the_offending_token_and_its_column():
    with pytest.raises(ExpressionError, match=r"unknown function 'system' at column 5"):
        parse("x + system(y)")
    with pytest.raises(ExpressionError, match=r"'x.real' \(Attribute\)"):
        parse("2 * x.real")


def test_the_expression_renders_from_its_tree_and_its_text_is_canonical():
    assert parse("a*x+y").text == parse(" a * x +   y").text == "a * x + y"
    e = parse("-x ** 2 + sigmoid(y) / 3")
    assert e.names == ("x", "y")
    assert e.cuda() == "((-kgen_pow(v_x, 2.0f)) + (kgen_sigmoid(v_y) / 3.0f))"


def test_problems_are_checked():
    p = elementwise_problem("a*x + y", {"a": "scalar", "x": "full", "y": "row"}, 3, 5, "float16")
    assert p["expr"] == "a * x + y" and p["out_dtype"] == "float16"
    with pytest.raises(InputError, match="no operand given for y"):
        elementwise_problem("x + y", {"x": "full"}, 1, 8, "float32")
    with pytest.raises(InputError, match="z given but not read"):
        elementwise_problem("x", {"x": "full", "z": "full"}, 1, 8, "float32")
    with pytest.raises(InputError, match="reads no array"):
        elementwise_problem("a * 2", {"a": "scalar"}, 1, 8, "float32")
    with pytest.raises(InputError, match="at most 4"):
        elementwise_problem("a+b+c+d+e", dict.fromkeys("abcde", "full"), 1, 8, "float32")
    with pytest.raises(ShapeError):
        elementwise_problem("x", {"x": "full"}, 0, 8, "float32")
    with pytest.raises(DtypeError, match="float64"):
        elementwise_problem("x", {"x": "full"}, 1, 8, "float64")
    with pytest.raises(InputError, match="kind"):
        parse_operands("x:diagonal")


def test_a_hostile_key_never_renders():
    """A problem read from a shared file renders only through the checked tree."""
    bad = Problem.of("elementwise", expr="x); asm(\"trap;\"); (x", operands="x:full", rows=1, cols=8,
                     dtype="float32", out_dtype="float32")
    config = SPEC.default_config(elementwise_problem("x", {"x": "full"}, 1, 8, "float32"), Target.h200())
    with pytest.raises(ExpressionError):
        render(SPEC, bad, config, Target.h200())


def test_imported_records_hold_only_canonical_checked_expressions():
    """A shared record's expression is checked as a call's is: the canonical text over exactly
    its operands; anything else is refused at import, never stored."""
    from kgen.db.validity import Validator

    t = Target.h200()
    good = elementwise_problem("a*x + y", {"a": "scalar", "x": "full", "y": "full"}, 1, 4096, "float32")
    config = SPEC.default_config(good, t)
    assert Validator().why("elementwise", good.key, config.name, config.as_dict(), 1.0, t.name, "9.0", "d") is None
    hostile = [good.replace(expr='x); asm("trap;"); (x'), good.replace(expr="a*x+y"),
               good.replace(operands="a:scalar,x:full"), good.replace(operands="a:scalar,x:full,y:diag")]
    for problem in hostile:
        why = Validator().why("elementwise", problem.key, config.name, config.as_dict(), 1.0, t.name, "9.0", "d")
        assert why and "problem_key" in why, problem.key


def test_the_space_follows_the_widest_dtype_and_the_default_uses_16_byte_vectors():
    t = Target.h200()
    p = elementwise_problem("x", {"x": "full"}, 1, 1 << 20, "bfloat16")
    assert SPEC.space(p, t).params[0].choices == vector_widths("bfloat16") == (1, 2, 4, 8)
    assert SPEC.default_config(p, t)["VEC"] == 8
    p32 = cast_problem(1, 1 << 20, "bfloat16", "float32")
    assert CAST.default_config(p32, t)["VEC"] == 4
    geo = SPEC.launch(p, SPEC.default_config(p, t))
    assert geo.grid[0] * geo.block[0] * 8 * 2 >= 1 << 20


def test_requests_come_from_cli_fields():
    t = Target.h200()
    _, p = SPEC.request(t, expr="2*x + y", cols=1000, rows=3, dtype="float16", operands=None, out_dtype=None)
    assert p.key == "elementwise|cols=1000|dtype=float16|expr=2 * x + y|operands=x:full,y:full|out_dtype=float16|rows=3"
    _, c = CAST.request(t, cols=77, dtype="float32", out_dtype="bfloat16", scale=True)
    assert c == cast_problem(1, 77, "float32", "bfloat16", scaled=True)
    out = CliRunner().invoke(app, ["families", "elementwise"])
    assert out.exit_code == 0 and "--expr" in out.output and "--operands" in out.output


def test_bytes_count_each_operand_once():
    p = elementwise_problem("a * x + y + z", {"a": "scalar", "x": "full", "y": "row", "z": "col"}, 10, 100,
                            "float16", "float32")
    assert SPEC.bytes(p) == (1000 + 100 + 10) * 2 + 1000 * 4


def test_export_replays_scalars_given_at_the_call():
    p = elementwise_problem("a * x + y", {"a": "scalar", "x": "full", "y": "full"}, 1, 4096, "float32")
    recipe = launch_recipe(SPEC, p, SPEC.default_config(p, Target.h200()))
    assert recipe["args"][:3] == [{"pointer": "x"}, {"pointer": "y"}, {"scalar": "a", "type": "float32"}]
    assert recipe["args"][3] == {"pointer": "out"}
    assert recipe["args"][4] == {"type": "int64", "value": 4096}
    json.dumps(recipe)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()

    def jobs():
        for i, (expr, kinds, dtype, out_dtype) in enumerate(CASES):
            p = elementwise_problem(expr, kinds, 33, 4099, dtype, out_dtype)
            space = SPEC.space(p, target)
            configs = space.sample(PER_CASE, seed=i) + [SPEC.default_config(p, target)]
            for config in configs:
                yield expr, p, config, render(SPEC, p, config, target, space)
        p = cast_problem(1, 1 << 20, "float32", "bfloat16", scaled=True)
        for config in CAST.space(p, target).sample(PER_CASE, seed=9):
            yield "cast", p, config, render(CAST, p, config, target)

    return compile_cases(tmp_path_factory, jobs(), "elementwise")


def test_sampled_configs_compile_for_sm90_without_spills(compiled):
    rows = compiled_rows(compiled)
    assert len(rows) >= 30
    failed = compile_failures(rows)
    assert not failed, failed
    assert not [c.name for _, c, _, r in rows if r.binary.resources.get("spill_stores")]


def test_16_byte_vectors_load_and_store_as_128_bit(compiled):
    """Every step's vectors load and store whole (16-bit elements are not split into narrow stores)."""
    size = {"float32": 4, "float16": 2, "bfloat16": 2}
    wide = [(p, c, r) for case in compiled.values() for p, c, _, r in case
            if c["VEC"] * size[p["dtype"]] == 16 and c["VEC"] * size[p["out_dtype"]] == 16]
    assert len(wide) >= 3
    for p, config, result in random.Random(0).sample(wide, 3):
        sass = sass_or_skip(result.binary.cubin)
        arrays = sum(kind == "full" for kind in parse_operands(p["operands"]).values())
        assert sass.count("LDG.E.128") >= arrays * config["ITEMS"], config.name
        assert sass.count("STG.E.128") >= config["ITEMS"], config.name
