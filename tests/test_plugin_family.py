"""A family installed by a package through the ``kgen.families`` entry point is reached by every
front door with no edit to kgen: `kgen families`, `kgen tune` (replayed), `kgen db import`,
`kgen bench` (replayed), `kgen db ls --family` and `kgen export`, whose package runs without
kgen."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from kgen import registry
from kgen.cli import app
from kgen.errors import FamilyLoadError, UnknownFamilyError
from kgen.measurement import Measurement, Provenance, Record, record_to_dict

TOY = textwrap.dedent('''
    import numpy as np

    from kgen import KernelSpec, Launch, Param, Space
    from kgen.fields import Field

    DOUBLE = """
    extern "C" __global__ void __launch_bounds__({{ BLOCK }}) {{ entry }}(
            const float* __restrict__ x, float* __restrict__ out, long long n) {
        long long i = (long long)blockIdx.x * {{ BLOCK }} + threadIdx.x;
        if (i < n) out[i] = 2.0f * x[i];
    }
    """


    class Double(KernelSpec):
        family = "toydouble"
        template_source = DOUBLE
        shape_params = ("n",)
        problem_fields = (Field("n", int, "elements"), Field("dtype", str, "element type", "float32", ("float32",)))

        def space(self, problem, target):
            return Space([Param("BLOCK", (64, 128, 256))], namer=lambda v: f"toydouble_b{v['BLOCK']}")

        def launch(self, problem, config):
            return Launch(((problem["n"] + config["BLOCK"] - 1) // config["BLOCK"], 1, 1), (config["BLOCK"], 1, 1))

        def args(self, problem, config, ops):
            return [ops["x"], ops["out"], np.int64(problem["n"])]

        def bytes(self, problem):
            return 8.0 * problem["n"]


    class NotASpec:
        family = "toybroken"
''')
KEY = "toydouble|dtype=float32|n=1000000"
TIMES = {"toydouble_b64": 0.0031, "toydouble_b128": 0.0024, "toydouble_b256": 0.0027}


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A package ``toyfam`` with two entry points (one broken), on sys.path as installed."""
    site = tmp_path / "site"
    (site / "toyfam").mkdir(parents=True)
    (site / "toyfam" / "__init__.py").write_text(TOY)
    info = site / "toyfam-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyfam\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[kgen.families]\ntoydouble = toyfam:Double\n"
                                           "toybroken = toyfam:NotASpec\n")
    monkeypatch.syspath_prepend(str(site))
    registry.rescan()
    yield site
    for name in ("toydouble", "toybroken"):
        registry._REGISTRY.pop(name, None)
    sys.modules.pop("toyfam", None)
    registry.rescan()


def _recording(path):
    prov = Provenance(device="NVIDIA H200", cc="9.0", template_digest="", created="2026-12-05T00:00:00Z")
    with open(path, "w") as f:
        for name, ms in TIMES.items():
            block = int(name.rsplit("_b", 1)[1])
            m = Measurement(name, {"BLOCK": block}, KEY, times_ms=(ms, ms * 1.01, ms * 0.99))
            f.write(json.dumps(record_to_dict(Record("toydouble", m, prov))) + "\n")


def test_a_family_installed_by_entry_point_goes_through_every_front_door(installed, tmp_path, monkeypatch):
    from kgen.registry import get_spec

    monkeypatch.setenv("COLUMNS", "200")          # tables unabridged
    spec = get_spec("toydouble")
    rec = tmp_path / "toy.jsonl"
    _recording(rec)
    digest = spec.template_digest()
    rows = [json.loads(line) for line in rec.read_text().splitlines()]
    for row in rows:
        row["provenance"]["template_digest"] = digest
    rec.write_text("".join(json.dumps(r) + "\n" for r in rows))
    db = f"sqlite:///{tmp_path / 'kgen.db'}"
    cli = CliRunner()

    out = cli.invoke(app, ["families", "toydouble"])
    assert out.exit_code == 0 and "--n integer" in out.output and "--dtype text" in out.output, out.output

    out = cli.invoke(app, ["tune", "toydouble", "--n", "1000000", "--replay", str(rec), "--trials", "3",
                           "--db", db])
    assert out.exit_code == 0, out.output
    assert "toydouble_b128" in out.output                    # the recorded best is found

    out = cli.invoke(app, ["tune", "toydouble", "--n", "1000000", "--block", "64", "--replay", str(rec)])
    assert out.exit_code == 2 and "no problem field --block" in out.output and "--n integer" in out.output

    out = cli.invoke(app, ["db", "import", str(rec), "--db", db])   # not trusted: not used yet
    assert out.exit_code == 0 and "imported 3 records" in out.output, out.output
    out = cli.invoke(app, ["bench", "toydouble", "--n", "1000000", "--replay", str(rec), "--db", db])
    assert out.exit_code == 0 and "tuned" not in out.output, out.output

    out = cli.invoke(app, ["db", "import", str(rec), "--trust", "--db", db])   # the same records: stored once
    assert out.exit_code == 0 and "imported 0 records" in out.output, out.output
    out = cli.invoke(app, ["db", "import", str(rec), "--trust", "--db", f"sqlite:///{tmp_path / 'trusted.db'}"])
    assert out.exit_code == 0 and "trusted: dispatch uses them now" in out.output, out.output
    db = f"sqlite:///{tmp_path / 'trusted.db'}"

    out = cli.invoke(app, ["bench", "toydouble", "--n", "1000000", "--replay", str(rec), "--db", db])
    assert out.exit_code == 0, out.output
    assert "toydouble_b128" in out.output and "tuned" in out.output and "0.0024" in out.output

    out = cli.invoke(app, ["db", "ls", "--family", "toydouble", "--db", db])
    assert out.exit_code == 0 and KEY in out.output, out.output

    out = cli.invoke(app, ["export", "toydouble", "-o", str(tmp_path / "pkg"), "--name", "toykernels", "--db", db])
    assert out.exit_code == 0, out.output
    table = json.loads((tmp_path / "pkg" / "toykernels" / "table.json").read_text())
    entry = table["problems"][KEY]
    assert entry["config"] == "toydouble_b128"
    assert entry["args"] == [{"pointer": "x"}, {"pointer": "out"}, {"type": "int64", "value": 1000000}]
    assert entry["launch"] == {"grid": [7813, 1, 1], "block": [128, 1, 1], "shared_mem": 0}
    assert (tmp_path / "pkg" / "toykernels" / "kernels" / "toydouble_b128.cubin").stat().st_size > 0
    probe = (f"import sys\nsys.path.insert(0, {str(tmp_path / 'pkg')!r})\nimport toykernels as t\n"
             "assert 'kgen' not in sys.modules\n"
             "print(t.problems())\n"
             "print(t.problem_key({'n': 1000000, 'dtype': 'float32'}))\n"
             "try:\n    t.run({'n': 5, 'dtype': 'float32'})\nexcept t.ExportedError as e:\n    print('refused', e)\n")
    done = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True)   # no kgen on the path
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"['{KEY}']" and lines[1] == KEY and lines[2].startswith("refused") and "n=5" in lines[2]


def test_a_broken_or_unknown_family_is_a_typed_error(installed):
    from kgen.registry import families, get_spec

    assert {"toydouble", "toybroken", "gemm"} <= set(families())      # listed without loading
    with pytest.raises(FamilyLoadError, match="not a KernelSpec"):
        get_spec("toybroken")
    with pytest.raises(UnknownFamilyError, match="toydouble"):      # the known ones are listed
        get_spec("toytriple")
    out = CliRunner().invoke(app, ["tune", "toybroken", "--n", "3"])
    assert out.exit_code == 2 and "not a KernelSpec" in out.output and "remedy" in out.output


def test_a_family_without_an_export_runtime_says_it_cannot_be_exported_yet(tmp_path):
    from kgen import KernelSpec

    class Unexported(KernelSpec):
        family = "toyunexported"
        export_runtime = ""

    registry.register(Unexported())
    try:
        out = CliRunner().invoke(app, ["export", "toyunexported", "-o", str(tmp_path)])
    finally:
        registry._REGISTRY.pop("toyunexported", None)
    assert out.exit_code == 2 and "cannot be exported yet" in out.output


def test_kgen_run_by_family_name_reads_the_problem_from_the_operands():
    import kgen
    from kgen.errors import InputError
    from kgen.problem import Problem, Target

    from fakes import BASE, FakeArray, fake_dispatch

    with fake_dispatch(Target.h200()) as f:
        a, b = FakeArray((100, 64)), FakeArray((64, 48), ptr=BASE + (1 << 24))
        c = FakeArray((100, 48), ptr=BASE + (2 << 24))
        kgen.run("gemm", a=a, b=b, c=c)
        (kernel, launch), = f.launcher.launches
        assert kernel.binary.entry.startswith("gemm_simt_f32_nn")
        assert [int(x) for x in launch.args[3:6]] == [100, 48, 64]      # after the three pointers: m, n, k
        with pytest.raises(InputError, match="given twice"):
            kgen.run("gemm", Problem.of("gemm", m=1), {"a": a}, b=b)
        with pytest.raises(InputError, match="of family 'gemm_mma', the kernel of 'gemm'"):
            kgen.run("gemm", Problem.of("gemm_mma", m=1), {"a": a})

    class NoReader(kgen.KernelSpec):
        family = "noreader"

    with pytest.raises(InputError, match="does not read its problem") as err:
        kgen.run(NoReader(), x=a)
    assert "Problem.of('noreader'" in err.value.remedy
