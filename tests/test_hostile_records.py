"""Records from a shared file are data: a value that is not one of a parameter's declared
choices (an identifier, a string for a number, a bool for an int, an invalid tile), or a
name that is not the one its values give, never reaches rendering, dispatch, a search's
known configs or an exported package."""

from __future__ import annotations

import pytest

from kgen.db import MemoryStore
from kgen.dispatch import Dispatcher
from kgen.errors import SpaceError
from kgen.export import export_package
from kgen.kernels.gemm.simt import GemmSimt
from kgen.kernels.gemm.problem import gemm_problem
from kgen.measurement import Measurement, Provenance, Record
from kgen.problem import Target
from kgen.render import render
from kgen.search import Tuner
from kgen.space import Config, Param

from fakes import FakeLauncher
from test_vendor import ScriptedGPU

SPEC = GemmSimt()
TARGET = Target.h200()
P = gemm_problem(512, 512, 512)


def _valid():
    return SPEC.default_config(P, TARGET)


def _hostile(**changes) -> dict:
    return {**_valid().as_dict(), **changes}


HOSTILE = {
    "identifier": _hostile(GM="K"),
    "macro": _hostile(MINB="evil_macro"),
    "string number": _hostile(BM="128"),
    "bool for int": _hostile(DB=True),
    "float for int": _hostile(GM=1.0),
    "invalid tile": _hostile(BM=100, TM=3),
    "unknown parameter": _hostile(EXTRA=1),
    "list": _hostile(BK=[16]),
}


def _record(values: dict, ms: float, name: str | None = None, problem=P) -> Record:
    """A record as a store may hold it from elsewhere (an older kgen's import, a team database),
    imported with --trust, so only dispatch's own checks stand between it and a launch."""
    m = Measurement(config_name=name or "gemm_simt_planted", config=values, problem_key=problem.key,
                    times_ms=(ms,) * 5)
    return Record(SPEC.family, m, Provenance(device=TARGET.name, cc="9.0", template_digest=SPEC.template_digest(),
                                              origin="trusted:shared.jsonl"))


def test_a_parameter_allows_its_choices_of_their_own_type_only():
    p = Param("X", (1, 8))
    assert p.allows(1) and p.allows(8)
    assert not any(p.allows(v) for v in (True, 1.0, "1", "K", [1], None))
    assert Param("F", (True, False)).allows(True) and not Param("F", (True, False)).allows(1)


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_render_refuses_values_that_are_not_declared_choices(what):
    values = HOSTILE[what]
    config = Config("gemm_simt_planted", tuple(values.items()))
    with pytest.raises(SpaceError):
        render(SPEC, P, config, TARGET)
    assert SPEC.space(P, TARGET).trusted(values) is None


def test_render_refuses_a_name_its_values_do_not_give():
    valid = _valid()
    with pytest.raises(SpaceError, match="not the name its values give"):
        render(SPEC, P, Config("evil_entry", valid.values), TARGET)
    assert render(SPEC, P, valid, TARGET).entry == valid.name


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_dispatch_passes_a_hostile_best_over_for_the_next_valid_record(what, monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    valid = _valid()
    db = MemoryStore([_record(HOSTILE[what], 1e-3), _record(valid.as_dict(), 1.0, valid.name)])
    choice = Dispatcher(db=db, launcher=FakeLauncher(), targets={0: TARGET}).choose(SPEC, P, TARGET)
    assert choice.how == "tuned" and choice.config.name == valid.name and choice.time_ms == 1.0


def test_dispatch_with_only_hostile_records_treats_the_problem_as_untuned(monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    db = MemoryStore([_record(v, 1e-3 * (i + 1), f"planted_{i}") for i, v in enumerate(HOSTILE.values())])
    launcher = FakeLauncher()
    loaded = Dispatcher(db=db, launcher=launcher, targets={0: TARGET}).prepare(SPEC, P, 0)
    assert loaded.choice.how == "model"
    assert all(k.entry.startswith("gemm_simt_f32_") for k in launcher.kernels)


def test_a_search_does_not_take_hostile_records_as_known(monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    db = MemoryStore([_record(HOSTILE["identifier"], 1e-3, "planted")])
    tuner = Tuner(SPEC, P, TARGET, ScriptedGPU(), db, sampler="random", seed=1)
    tuner._load_known()
    assert "planted" not in tuner.known and tuner.best() is None


def test_export_leaves_out_a_problem_whose_best_record_is_hostile(tmp_path):
    other = gemm_problem(256, 256, 256)
    good = SPEC.default_config(other, TARGET)
    db = MemoryStore([_record(HOSTILE["macro"], 1e-3), _record(good.as_dict(), 0.5, good.name, other)])
    summary = export_package("gemm", tmp_path, name="shared_kernels", db=db)
    assert summary.skipped == (P.key,) and summary.problems == 1
    sources = "".join(f.read_text() for f in (summary.path / "kernels").glob("*.cu"))
    assert "evil_macro" not in sources and good.name in sources


# ---- limits on what a shared file may hold ------------------------------------------------

def _shipped_line() -> dict:
    import json
    from pathlib import Path

    path = Path(__file__).parent.parent / "tuning_db" / "nvidia-h200_gemm.jsonl"
    return json.loads(path.read_text().splitlines()[0])


def _mutated(field: str, value) -> bytes:
    import json

    line = _shipped_line()
    target = line
    *parents, last = field.split(".")
    for name in parents:
        target = target[name]
    target[last] = value
    return json.dumps(line).encode() + b"\n"


LIMITS = {
    "a huge integer time": (_mutated("time_ms", 10 ** 400), "too large"),
    "huge integer times": (_mutated("times_ms", [10 ** 400] * 3), "too large"),
    "a huge integer config value": (_mutated("config.BM", 10 ** 30), "within 64 bits"),
    "an infinite config value": (_mutated("config.BM", float("inf")), "finite"),
    "a long string config value": (_mutated("config.GM", "x" * 300), "at most 256"),
    "deep nesting": (b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    "a huge line": (b'{"family": "' + b"x" * (2 << 20) + b'"}\n', "over the limit"),
}


@pytest.mark.parametrize("what", sorted(LIMITS))
def test_an_import_over_a_limit_names_the_line_and_stores_nothing(what, tmp_path):
    from kgen.db.exchange import import_file
    from kgen.errors import DatabaseError

    line, words = LIMITS[what]
    path = tmp_path / "shared.jsonl"
    path.write_bytes(_mutated("time_ms", 0.5) + line)
    db = MemoryStore()
    with pytest.raises(DatabaseError, match=f"shared.jsonl:2: .*{words}"):
        import_file(path, db)
    assert db.count() == 0


def test_dispatch_passes_over_a_time_faster_than_any_gpu(monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    fast, real = SPEC.space(P, TARGET).sample(2, seed=3)
    db = MemoryStore([_record(fast.as_dict(), 1e-6, fast.name), _record(real.as_dict(), 0.5, real.name)])
    choice = Dispatcher(db=db, launcher=FakeLauncher(), targets={0: TARGET}).choose(SPEC, P, TARGET)
    assert choice.how == "tuned" and choice.config.name == real.name
