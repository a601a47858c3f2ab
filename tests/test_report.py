"""`kgen report`: one self-contained HTML page of a database, checked by parsing it (no GPU):
each problem's best against its baseline, a convergence figure per tune whose best so far
never rises, a roofline dot per best the family can count, hostile strings kept as text, and
nothing fetched or run."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from typer.testing import CliRunner

from kgen import gemm_problem
from kgen.cli import app
from kgen.db import MemoryStore, SqlStore
from kgen.kernels.gemm.problem import tc_problem
from kgen.measurement import Failure, Measurement, Provenance, Record, Timing
from kgen.report import collect, render, write_report
from kgen.report.convergence import best_so_far
from kgen.vendor import VENDOR_CONFIG, VENDOR_DIGEST

H200, A100 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB"
EVIL_CONFIG = '<script>alert("x")</script><img src="http://evil.example/x.png">'
EVIL_DEVICE = '"><script>alert(1)</script>'
P1, P2, P3 = (gemm_problem(s, s, s).key for s in (1024, 512, 256))
BAD_KEY = 'gemm|m=<b onmouseover="x">'                 # gemm cannot count its work
WG = tc_problem("gemm_wgmma", 4096, 4096, 4096, "bfloat16").key
GONE = "retired|n=10"                                 # a family not registered any more
T0 = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


def rec(family, key, config, ms, *, device=H200, digest="d1", at=0.0, failure=None, replay=False,
        vendor=False) -> Record:
    m = Measurement(config_name=VENDOR_CONFIG if vendor else config, config={}, problem_key=key,
                    times_ms=None if failure else (ms,) * 5, failure=Failure(failure) if failure else None,
                    timing=Timing(method="replay") if replay else Timing())
    created = (T0 + datetime.timedelta(seconds=at)).isoformat(timespec="seconds")
    return Record(family, m, Provenance(device=device, cc="9.0", template_digest=VENDOR_DIGEST if vendor else digest,
                                        created=created))


def records() -> list[Record]:
    return [
        # gemm on the H200: a tune of P1 with a failure, the vendor's time beside it
        rec("gemm", P1, "c_a", 2.0, at=0), rec("gemm", P1, "c_b", 1.5, at=2),
        rec("gemm", P1, "c_c", None, at=5, failure="compile"), rec("gemm", P1, "c_d", 1.8, at=9),
        rec("gemm", P1, "c_e", 1.2, at=14), rec("gemm", P1, None, 1.0, at=15, vendor=True),
        # P2: a replayed trial faster than any measured one (drawn, never the best)
        rec("gemm", P2, "c_a", 0.5, at=20), rec("gemm", P2, "c_b", 0.4, at=21),
        rec("gemm", P2, "c_r", 0.1, at=22, replay=True), rec("gemm", P2, None, 0.6, at=23, vendor=True),
        # P3: the best config's name is hostile; the bad key's work cannot be counted
        rec("gemm", P3, EVIL_CONFIG, 0.05, at=30), rec("gemm", BAD_KEY, "c_x", 0.07, at=31),
        # gemm on a device with no peaks listed, and on a hostile device name
        rec("gemm", P1, "c_a", 3.0, device=A100, at=40),
        rec("gemm", P1, "c_a", 2.5, device=EVIL_DEVICE, at=41),
        # another family, and one no longer registered
        rec("gemm_wgmma", WG, "w_a", 0.2, digest="w1", at=50), rec("gemm_wgmma", WG, "w_b", 0.18, digest="w1", at=53),
        rec("gemm_wgmma", WG, None, 0.17, at=54, vendor=True),
        rec("retired", GONE, "r_a", 0.01, digest="r1", at=60),
    ]


# --- a small tree of the page, from the standard library's parser ---------------------------

VOID = {"meta", "br", "img", "hr", "link", "input", "source", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict
    children: list = field(default_factory=list)
    text: str = ""

    def all(self, tag=None, cls=None):
        for child in self.children:
            if (tag is None or child.tag == tag) and (cls is None or cls in child.attrs.get("class", "").split()):
                yield child
            yield from child.all(tag, cls)

    def find(self, tag=None, cls=None):
        return next(self.all(tag, cls), None)

    def content(self) -> str:
        return self.text + "".join(c.content() for c in self.children)


class TreeBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return
        raise AssertionError(f"</{tag}> closes nothing open")

    def handle_data(self, data):
        node = self.stack[-1]
        if node.children:
            node.children.append(Node("#text", {}, text=data))
        else:
            node.text += data


def parse(page: str) -> Node:
    builder = TreeBuilder()
    builder.feed(page)
    builder.close()
    assert [n.tag for n in builder.stack] == ["#root"], "unclosed elements"
    return builder.root


@pytest.fixture(scope="module")
def page() -> str:
    return render(collect(MemoryStore(records())))


@pytest.fixture(scope="module")
def tree(page) -> Node:
    return parse(page)


def section(tree: Node, family: str, device: str) -> Node:
    found = [s for s in tree.all("section") if s.attrs["data-family"] == family and s.attrs["data-device"] == device]
    assert len(found) == 1, (family, device)
    return found[0]


def rows(sec: Node) -> dict[str, list[str]]:
    return {tr.attrs["data-key"]: [td.content() for td in tr.all("td")] for tr in sec.all("tr", "problem")}


# --- the tests --------------------------------------------------------------------------------

def test_one_section_per_family_and_device(tree):
    got = {(s.attrs["data-family"], s.attrs["data-device"]) for s in tree.all("section")}
    assert got == {("gemm", H200), ("gemm", A100), ("gemm", EVIL_DEVICE), ("gemm_wgmma", H200), ("retired", H200)}
    summary = list(tree.find("table", "summary").all("tr", "section-row"))
    assert len(summary) == 5
    assert all(a.attrs["href"] == "#" + r.attrs["data-section"] for r in summary for a in r.all("a"))


def test_each_problem_best_against_its_baseline(tree):
    # columns: problem, records, replayed, failed, best ms, config, TFLOP/s, GB/s, baseline ms, speed
    table = rows(section(tree, "gemm", H200))
    assert set(table) == {P1, P2, P3, BAD_KEY}
    assert table[P1][1:6] == ["6", "0", "1", "1.2000", "c_e"]
    assert table[P1][8:] == ["1.0000", "0.833"]
    assert table[P2][1:6] == ["3", "1", "0", "0.4000", "c_b"]        # the replayed 0.1 is not the best
    assert table[P2][8:] == ["0.6000", "1.500"]
    assert table[P3][5] == EVIL_CONFIG and table[P3][8:] == ["-", "-"]  # no baseline: no ratio
    assert float(table[P1][6]) == pytest.approx(2 * 1024 ** 3 / 1.2e-3 / 1e12, abs=0.05)
    wg = rows(section(tree, "gemm_wgmma", H200))[WG]
    assert wg[4] == "0.1800" and wg[8] == "0.1700" and wg[9] == f"{0.17 / 0.18:.3f}"
    speed_cell = section(tree, "gemm", H200).find("tr", "problem").find("td", "speed")
    assert "slower" in speed_cell.attrs["class"]                      # P1 comes first: 0.833


def test_one_convergence_figure_per_tune_with_a_best_that_never_rises(tree):
    tunes = {("gemm", H200): {P1, P2, P3, BAD_KEY}, ("gemm", A100): {P1}, ("gemm", EVIL_DEVICE): {P1},
             ("gemm_wgmma", H200): {WG}, ("retired", H200): {GONE}}
    by_key = {}
    for (family, device), keys in tunes.items():
        figures = list(section(tree, family, device).all("figure", "convergence"))
        assert sorted(f.attrs["data-problem"] for f in figures) == sorted(keys)
        by_key.update({(family, device, f.attrs["data-problem"]): f for f in figures})
    for fig in by_key.values():
        panels = list(fig.all("svg", "progress"))
        assert len(panels) == 2                                       # against trials, against seconds
        for svg in panels:
            line = svg.find("polyline", "best")
            xy = [tuple(map(float, p.split(","))) for p in line.attrs["points"].split()]
            assert all(a[0] <= b[0] for a, b in zip(xy, xy[1:]))      # left to right
            assert all(a[1] <= b[1] for a, b in zip(xy, xy[1:]))      # never up (SVG y grows down)
            best = [float(v) for v in line.attrs["data-best-ms"].split()]
            assert all(a >= b for a, b in zip(best, best[1:]))
    p1 = by_key[("gemm", H200, P1)]
    assert [float(v) for v in p1.find("polyline", "best").attrs["data-best-ms"].split()] == \
        [2.0, 2.0, 1.5, 1.5, 1.2, 1.2]
    assert p1.attrs["data-trials"] == "5" and "1 failed" in p1.find("figcaption").content()
    assert len(list(p1.find("svg", "progress").all("circle", "trial"))) == 4      # the failure has no dot
    p2 = by_key[("gemm", H200, P2)]
    assert p2.find("polyline", "best").attrs["data-best-ms"].split()[-1] == "0.1"   # replayed trials drawn,
    assert len(list(p2.find("svg", "progress").all("circle", "replayed"))) == 1    # hollow
    assert p2.find("line", "baseline") is not None


def test_best_so_far():
    times = [2.0, 1.5, None, 1.8, 1.2]
    assert best_so_far(times) == [2.0, 1.5, 1.5, 1.5, 1.2]
    assert best_so_far([None, None]) == [None, None]


def test_roofline_places_every_best_of_a_known_family(tree):
    placed = {("gemm", H200): 3, ("gemm", A100): 1, ("gemm", EVIL_DEVICE): 1, ("gemm_wgmma", H200): 1}
    for (family, device), n in placed.items():
        sec = section(tree, family, device)
        svg = sec.find("svg", "roofline")
        dots = list(svg.all("circle", "point"))
        assert len(dots) == n == int(svg.attrs["data-points"]), (family, device)
        assert {d.attrs["data-problem"] for d in dots} <= set(rows(sec))
    h200 = section(tree, "gemm", H200)
    assert len(list(h200.find("svg", "roofline").all("line", "roof"))) == 5    # the copy rate, 4 ceilings
    assert "1 best(s) not placed" in h200.find("figure", "roofline").content()   # the unreadable key
    a100 = section(tree, "gemm", A100)
    assert a100.find("line", "roof") is None and "No peaks are listed" in a100.find("figure", "roofline").content()
    retired = section(tree, "retired", H200)
    assert retired.find("svg", "roofline") is None and "not registered" in retired.content()
    assert rows(retired)[GONE][4] == "0.0100"                            # listed all the same


def test_hostile_strings_stay_text_and_nothing_is_fetched_or_run(page, tree):
    assert "<script" not in page.lower() and "&lt;script&gt;" in page
    assert not list(tree.all("script")) and not list(tree.all("img")) and not list(tree.all("b"))
    for node in tree.all():
        assert "src" not in node.attrs
        assert not any(k.startswith("on") for k in node.attrs), node.attrs
        if "href" in node.attrs:
            assert node.attrs["href"].startswith("#") and "http" not in node.attrs["href"]
    assert "url(http" not in page and "@import" not in page and "<link" not in page
    ids = [n.attrs["id"] for n in tree.all() if "id" in n.attrs]
    assert len(ids) == len(set(ids))
    tips = [c.find("title").content() for c in section(tree, "gemm", H200).all("circle", "point")]
    assert any(EVIL_CONFIG in t for t in tips)                          # escaped, then read back whole


def test_caps_thin_the_drawing_and_say_so():
    db = MemoryStore([rec("gemm", P1, f"c{i:02d}", 2.0 - i * 0.01, at=i) for i in range(30)]
                     + [rec("gemm", k, "c", 1.0, at=0) for k in (P2, P3)])
    tree = parse(render(collect(db), points=2, tunes=1))
    fig = tree.find("figure", "convergence")
    assert len(list(fig.find("svg", "progress").all("circle", "trial"))) == 2
    assert "2 of 30 trial dots" in fig.content()
    assert len(list(tree.all("figure", "convergence"))) == 1 and "2 more tunes not drawn" in tree.content()
    assert len(list(tree.all("circle", "point"))) == 2 and "2 of 3 bests placed" in tree.content()


def test_a_resumed_tune_has_its_pause_cut_from_the_time_axis():
    db = MemoryStore([rec("gemm", P1, "a", 2.0, at=0), rec("gemm", P1, "b", 1.0, at=10),
                      rec("gemm", P1, "c", 0.5, at=86400), rec("gemm", P1, "d", 0.4, at=86405)])
    tune = collect(db).sections[0].tunes[0]
    assert [t.seconds for t in tune.trials] == [0, 10, 10, 15] and tune.pauses == (10,)
    assert "1 pauses over 600 s cut" in parse(render(collect(db))).find("figure", "convergence").content()


def test_filters_and_an_empty_database():
    report = collect(MemoryStore(records()), family="gemm", device=A100)
    assert [(s.family, s.device) for s in report.sections] == [("gemm", A100)]
    empty = parse(render(collect(MemoryStore(), family="nothing")))
    assert not list(empty.all("section")) and "No records to report for family = nothing" in empty.content()


# --- the command ----------------------------------------------------------------------------

@pytest.fixture()
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_kgen_report_writes_the_page(cli, tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with SqlStore(url) as db:
        db.commit(records())
    out = tmp_path / "report.html"
    result = cli("report", "-o", str(out), "--db", url)
    assert result.exit_code == 0, result.output
    assert "5 family and device sections" in re.sub(r"\s+", " ", result.output)
    tree = parse(out.read_text())
    assert len(list(tree.all("section"))) == 5 and len(list(tree.all("figure", "convergence"))) == 8

    only = cli("report", "-o", str(out), "--db", url, "--family", "gemm", "--device", H200)
    assert only.exit_code == 0, only.output
    assert [s.attrs["data-device"] for s in parse(out.read_text()).all("section")] == [H200]


def test_kgen_report_of_nothing_and_of_an_unwritable_path(cli, tmp_path):
    out = tmp_path / "empty.html"
    result = cli("report", "-o", str(out))                            # the default database: empty here
    assert result.exit_code == 0 and "nothing to report" in result.output
    assert "No records to report" in out.read_text()
    bad = cli("report", "-o", str(tmp_path / "no" / "such" / "folder" / "r.html"))
    assert bad.exit_code == 2 and "cannot write the report" in bad.output and "remedy" in bad.output


def test_write_report_replaces_the_file_whole(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("old")
    report = write_report(MemoryStore(records()), out)
    assert len(report.sections) == 5 and out.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
