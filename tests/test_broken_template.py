"""A user's broken template stops a tune at once with a TemplateError that shows the source,
instead of burning the budget on configs that can never compile."""

import re
from pathlib import Path

import pytest

from kgen import KernelSpec, Launch, Param, Problem, Space
from kgen.db import MemoryStore
from kgen.errors import TemplateError
from kgen.problem import Target
from kgen.runners import Runner
from kgen.search import tune


class NeverMeasures(Runner):
    """A runner that must not be reached: nothing compiles."""

    needs_binaries = True

    def submit(self, task):
        raise AssertionError("a config that did not compile was sent to be measured")


class Broken(KernelSpec):
    family = "broken"
    template_source = 'extern "C" __global__ void {{ entry }}(float* x) { x[threadIdx.x] = {{ BLOCK }} +; }'

    def space(self, problem, target):
        return Space([Param("BLOCK", (32, 64, 128, 256))], namer=lambda v: f"broken_b{v['BLOCK']}")

    def launch(self, problem, config):
        return Launch((1, 1, 1), (config["BLOCK"], 1, 1))


class Undefined(Broken):
    family = "undefined"
    template_source = 'extern "C" __global__ void {{ entry }}(float* x) { x[0] = {{ NOT_A_PARAMETER }}; }'


def test_c_syntax_error_stops_the_tune_and_saves_the_source():
    db = MemoryStore()
    with pytest.raises(TemplateError) as info:
        tune(Broken(), Problem.of("broken", n=1), Target.h200(), NeverMeasures(), db, trials=4, sampler="exhaustive")
    text = str(info.value)
    assert "failed to compile" in text and "expected an expression" in text
    saved = re.search(r"source saved at (\S+\.cu)", text).group(1)
    assert "+;" in Path(saved).read_text()
    assert db.count() == 4 and all(r.measurement.failure.kind == "compile" for r in db.records("broken"))


def test_undefined_template_variable_is_named():
    with pytest.raises(TemplateError, match="NOT_A_PARAMETER"):
        tune(Undefined(), Problem.of("undefined", n=1), Target.h200(), NeverMeasures(), MemoryStore(), trials=2)
