"""One self-contained HTML page of a Report: inline CSS and SVG, no script, nothing fetched.

Every string from the database is escaped (records are shared data). The page: a header,
a summary table (one row per family and device, linking to its section), then per family
and device a section with its problems table (each problem's best against its baseline), a
roofline placing each best, and a convergence figure per tune (best so far against trials
and against seconds); notes on reading it close the page.

>>> from kgen.report.data import Report
>>> page = render(Report((), (), "2026-01-01T00:00:00+00:00", 600.0))
>>> page.startswith("<!DOCTYPE html>") and "No records" in page and "<script" not in page
True
"""

from __future__ import annotations

import math
from html import escape

from kgen.knobs import knobs
from kgen.report.convergence import improvements, thin
from kgen.report.data import ProblemRow, Report, Section, Tune
from kgen.report.peaks import PEAKS
from kgen.report.svg import Chart, attrs, linear_axis, log_axis

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;
 padding:0 16px;color:#1d2430}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 6px;border-bottom:1px solid #ccd}
h3{font-size:15px;margin:18px 0 6px}.meta,.note,figcaption{color:#555}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}th,td{padding:3px 8px;border-bottom:1px solid #e3e6ea;
 text-align:left;vertical-align:top}th{background:#f3f5f7;position:sticky;top:0}td.num{text-align:right;
 font-variant-numeric:tabular-nums}td.key,td.cfg{font-family:ui-monospace,Menlo,Consolas,monospace;
 word-break:break-all;max-width:420px}.faster{color:#17803d}.slower{color:#b42318}
.scroll{max-height:520px;overflow:auto}figure{margin:8px 0 18px}.tunes{display:flex;flex-wrap:wrap;gap:10px}
.convergence{border:1px solid #e3e6ea;padding:6px;margin:0}.convergence figcaption{font-size:12px;max-width:730px;
 word-break:break-all}.panels{display:flex;gap:6px;flex-wrap:wrap}
svg{background:#fff}.grid{stroke:#eceff3}.frame{fill:none;stroke:#9aa3ad}.tick{font-size:10px;fill:#555}
.axis{font-size:11px;fill:#333}.roof{stroke:#555;stroke-width:1.5;fill:none}.roof-label{font-size:10px;fill:#333}
.point{fill:#2f6fdf;fill-opacity:.75}.point.faster{fill:#17803d}.point.slower{fill:#b42318}
.trial{fill:#4b5563;fill-opacity:.7}.trial.replayed{fill:none;stroke:#4b5563}
.pause{stroke:#8a94a3;stroke-dasharray:1 3}.best{fill:none;stroke:#2f6fdf;stroke-width:1.8}
.baseline{stroke:#b42318;stroke-dasharray:5 3}
.empty{font-size:16px;padding:16px;background:#fff7e6;border:1px solid #f0d9a8}
"""


def render(report: Report, points: int | None = None, tunes: int | None = None) -> str:
    """The page. ``points``: most points per chart, ``tunes``: most convergence figures per
    section (defaults: KGEN_REPORT_POINTS, KGEN_REPORT_TUNES)."""
    points = knobs.report_points if points is None else points
    tunes = knobs.report_tunes if tunes is None else tunes
    filters = ", ".join(f"{k} = {v}" for k, v in report.filters)
    head = (f'<header><h1>kgen tuning report</h1><p class="meta">generated {_e(report.created)} &middot; '
            f'{report.records} records in {len(report.sections)} family and device sections'
            + (f" &middot; only {_e(filters)}" if filters else "") + "</p></header>")
    if not report.sections:
        body = ('<p class="empty" id="empty">No records to report'
                + (f" for {_e(filters)}" if filters else "")
                + ": the database holds no successful measurement"
                + (" that matches." if filters else ".")
                + " Tune a problem (<code>kgen tune</code>) or import records (<code>kgen db import</code>)"
                  " and write the report again.</p>")
    else:
        body = _summary(report) + "".join(_section(i, s, points, tunes, report.pause_s)
                                         for i, s in enumerate(report.sections))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>kgen tuning report</title><style>{CSS}</style></head><body>"
            f"{head}<main>{body}</main>{_notes(points, tunes)}</body></html>\n")


def _e(value) -> str:
    return escape(str(value), quote=True)


def _ms(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.4f}"


def _speed_class(speed: float | None) -> str | None:
    if speed is None:
        return None
    return "faster" if speed > 1 else "slower" if speed < 1 else None


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


# --- summary --------------------------------------------------------------------------------

def _summary(report: Report) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("family", "device", "problems", "records", "replayed", "failed",
                                             "with a baseline", "speed vs baseline (geomean)", "tunes"))
    rows = []
    for i, s in enumerate(report.sections):
        speeds = [r.speed for r in s.rows if r.speed]
        g = _geomean(speeds)
        cells = [f'<a href="#s{i}">{_e(s.family)}</a>', _e(s.device), len(s.rows),
                 sum(r.measured for r in s.rows), sum(r.replayed for r in s.rows), sum(r.failed for r in s.rows),
                 len(speeds), f"{g:.3f}" if g else "-", len(s.tunes)]
        rows.append(f'<tr{attrs({"class": "section-row", "data-section": f"s{i}"})}>'
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f'<nav><h2>Families and devices</h2><table class="summary"><thead><tr>{head}</tr></thead>' \
           f'<tbody>{"".join(rows)}</tbody></table></nav>'


# --- one family on one device ---------------------------------------------------------------

def _section(i: int, s: Section, points: int, tunes: int, pause_s: float) -> str:
    data = {"class": "family-device", "id": f"s{i}", "data-family": s.family, "data-device": s.device}
    return (f"<section{attrs(data)}><h2>{_e(s.family)} on {_e(s.device)}</h2>"
            + (f'<p class="note">Family {_e(s.family)} is not registered here ({_e(s.family_note)}): its problems '
               f'are listed, not placed on the roofline.</p>' if s.family_note else "")
            + "<h3>Problems</h3>" + _problems(s)
            + "<h3>Roofline</h3>" + _roofline(s, points)
            + _convergence(s, points, tunes, pause_s) + "</section>")


def _problems(s: Section) -> str:
    cols = ("problem", "records", "replayed", "failed", "best ms", "best config", "TFLOP/s", "GB/s",
            f"{s.baseline_name} ms", f"speed vs {s.baseline_name}")
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    return (f'<div class="scroll"><table class="problems"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(_problem_row(r) for r in s.rows) + "</tbody></table></div>")


def _problem_row(r: ProblemRow) -> str:
    rate = r.rate
    gbs = r.bytes / (r.best_ms * 1e-3) / 1e9 if r.best_ms and r.bytes else None
    data = {"class": "problem", "data-key": r.key, "data-best-ms": r.best_ms, "data-baseline-ms": r.baseline_ms,
            "data-speed": r.speed}
    speed = "-" if r.speed is None else f"{r.speed:.3f}"
    cells = [f'<td class="key">{_e(r.key)}</td>', f'<td class="num">{r.measured}</td>',
             f'<td class="num">{r.replayed}</td>', f'<td class="num">{r.failed}</td>',
             f'<td class="num best">{_ms(r.best_ms)}</td>', f'<td class="cfg">{_e(r.best_config or "-")}</td>',
             f'<td class="num">{"-" if rate is None else f"{rate / 1e12:.1f}"}</td>',
             f'<td class="num">{"-" if gbs is None else f"{gbs:.0f}"}</td>',
             f'<td class="num baseline">{_ms(r.baseline_ms)}</td>',
             f'<td{attrs({"class": " ".join(filter(None, ("num speed", _speed_class(r.speed))))})}>{speed}</td>']
    return f"<tr{attrs(data)}>{''.join(cells)}</tr>"


# --- roofline -------------------------------------------------------------------------------

def _roofline(s: Section, most: int) -> str:
    if s.family_note:
        return '<p class="note">No roofline: the family\'s flop and byte counts are unknown here.</p>'
    placed = [r for r in s.rows if r.placed]
    unplaced = sum(1 for r in s.rows if r.best_ms and not r.placed)
    notes = []
    if unplaced:
        notes.append(f"{unplaced} best(s) not placed: the family counts no flops or bytes for their problem keys.")
    if len(placed) > most:
        notes.append(f"{most} of {len(placed)} bests placed, evenly spaced in problem order (KGEN_REPORT_POINTS).")
        placed = thin(placed, most)
    if s.peaks is None:
        notes.append(f"No peaks are listed for {s.device} (kgen/report/peaks.py lists "
                     f"{', '.join(sorted(PEAKS))}): the points are placed with no roofs.")
    if not placed:
        return f'<p class="note">Nothing to place. {" ".join(_e(n) for n in notes)}</p>'
    chart = _roofline_chart(s, placed)
    return f'<figure class="roofline">{chart}<figcaption>Each dot is a problem\'s best (green: faster than ' \
           f'{_e(s.baseline_name)}, red: slower, blue: no baseline). {" ".join(_e(n) for n in notes)}' \
           f'</figcaption></figure>'


def _roofline_chart(s: Section, placed: list[ProblemRow]) -> str:
    peaks = s.peaks
    ceilings = peaks.compute if peaks else ()
    xs = [r.intensity for r in placed] + [c / peaks.bandwidth for _, c in ceilings]
    ys = [r.rate / 1e12 for r in placed] + [c / 1e12 for _, c in ceilings]
    chart = Chart(log_axis(xs, "arithmetic intensity (flop per byte)"), log_axis(ys, "TFLOP/s"), 640, 380,
                  "roofline", f"roofline of {s.family} on {s.device}", {"data-points": len(placed)})
    if peaks:
        bw = peaks.bandwidth / 1e12
        top = max(c for _, c in ceilings) / 1e12
        x_start = max(chart.x.lo, chart.y.lo / bw)
        chart.line(x_start, x_start * bw, top / bw, top, "roof")
        x_mid = math.sqrt(x_start * top / bw)
        chart.text(x_mid, x_mid * bw, f"{bw:g} TB/s", "roof-label", "end", dy=-6)
        above = math.inf
        for name, c in sorted(ceilings, key=lambda nc: -nc[1]):
            chart.line(c / 1e12 / bw, c / 1e12, chart.x.hi, c / 1e12, "roof")
            crowded = above / c < 1.5            # the label above sits close: write this one below
            chart.text(chart.x.hi, c / 1e12, f"{name} {c / 1e12:g} TFLOP/s", "roof-label", dy=11 if crowded else -3)
            above = math.inf if crowded else c
    for r in placed:
        cls = " ".join(filter(None, ("point", _speed_class(r.speed))))
        tip = f"{r.key}\n{r.best_config}\n{r.rate / 1e12:.1f} TFLOP/s at {r.intensity:.3g} flop/byte" \
              + (f"\n{r.speed:.3f}x {s.baseline_name}" if r.speed else "")
        chart.dot(r.intensity, r.rate / 1e12, cls, tip, {"data-problem": r.key}, r=3.5)
    return chart.svg()


# --- convergence ----------------------------------------------------------------------------

def _convergence(s: Section, points: int, most: int, pause_s: float) -> str:
    shown = s.tunes[:most]
    more = len(s.tunes) - len(shown)
    figures = "".join(_tune(t, s.baseline_name, points, pause_s) for t in shown)
    note = f'<p class="note">{more} more tunes not drawn (KGEN_REPORT_TUNES = {most}).</p>' if more else ""
    return (f'<details class="tunes-block" open><summary><h3 style="display:inline">Convergence: '
            f'{len(s.tunes)} tunes</h3></summary><div class="tunes">{figures}</div>{note}</details>')


def _tune(t: Tune, baseline_name: str, points: int, pause_s: float) -> str:
    best = t.best
    failed = sum(1 for x in t.trials if x.failure)
    replayed = sum(1 for x in t.trials if x.replayed)
    caption = (f"{_e(t.problem_key)} &middot; template {_e(t.template_digest or '-')} &middot; {len(t.trials)} "
               f"trials ({failed} failed, {replayed} replayed, drawn hollow) &middot; best "
               + (f"{best.ms:.4f} ms ({_e(best.config)})" if best else "none")
               + (f" &middot; {_e(baseline_name)} {t.baseline_ms:.4f} ms (dashed)" if t.baseline_ms else ""))
    data = {"class": "convergence", "data-problem": t.problem_key, "data-digest": t.template_digest,
            "data-trials": len(t.trials)}
    if best is None:
        return f"<figure{attrs(data)}><figcaption>{caption}</figcaption>" \
               f'<p class="note">No trial succeeded: nothing to draw.</p></figure>'
    by_trial = _progress(t, [float(i + 1) for i in range(len(t.trials))], "trial", baseline_name, points)
    seconds = [x.seconds for x in t.trials]
    by_time = (_progress(t, seconds, "seconds since the first record", baseline_name, points, t.pauses)
               if any(v is not None for v in seconds) else '<p class="note">No readable time stamps.</p>')
    unread = sum(1 for v in seconds if v is None)
    if unread and any(v is not None for v in seconds):
        caption += f" &middot; {unread} trials with unreadable time stamps left out of the time panel"
    if t.pauses:
        caption += (f" &middot; {len(t.pauses)} pauses over {pause_s:g} s cut from the time axis "
                    f"(dotted; KGEN_REPORT_PAUSE_S)")
    if len(t.trials) > points:
        caption += f" &middot; {points} of {len(t.trials)} trial dots drawn (KGEN_REPORT_POINTS)"
    return (f'<figure{attrs(data)}><figcaption>{caption}</figcaption>'
            f'<div class="panels">{by_trial}{by_time}</div></figure>')


def _progress(t: Tune, xs: list[float | None], x_label: str, baseline_name: str, points: int,
              cuts: tuple[float, ...] = ()) -> str:
    """One panel: each successful trial's time at ``xs`` (None: left out), the best so far as
    steps, the baseline, and the pauses cut from the axis at ``cuts``."""
    times = t.times
    ys = [v for v in times if v is not None] + ([t.baseline_ms] if t.baseline_ms else [])
    known = [x for x in xs if x is not None]
    chart = Chart(linear_axis(known, x_label, pad=0.04), log_axis(ys, "ms", tight=True), 360, 220, "progress",
                  f"best so far against {x_label}")
    if t.baseline_ms:
        chart.line(chart.x.lo, t.baseline_ms, chart.x.hi, t.baseline_ms, "baseline")
    for cut in cuts:
        chart.line(cut, chart.y.lo, cut, chart.y.hi, "pause")
    steps = [(i, b) for i, b in improvements(times) if xs[i] is not None]
    steps = thin(steps, max(2, points))
    line: list[tuple[float, float]] = []
    for i, b in steps:
        if line:
            line.append((xs[i], line[-1][1]))
        line.append((xs[i], b))
    if line:                          # none where no successful trial's stamp reads
        line.append((max(known), line[-1][1]))
        chart.polyline(line, "best", {"data-best-ms": " ".join(repr(y) for _, y in line)})
    drawn = thin([i for i, (x, v) in enumerate(zip(xs, times)) if x is not None and v is not None], points)
    for i in drawn:
        trial = t.trials[i]
        chart.dot(xs[i], trial.ms, "trial replayed" if trial.replayed else "trial",
                  f"{trial.config}: {trial.ms:.4f} ms" + (" (replayed)" if trial.replayed else ""), r=2.5)
    return chart.svg()


# --- reading notes --------------------------------------------------------------------------

def _notes(points: int, tunes: int) -> str:
    items = (
        "Best: the fastest successful record of a generated kernel measured on the device (median of its "
        "timed runs). Replayed records (answered from a recording, never used by dispatch) and the vendor "
        "library's record are not candidates; the replayed column counts them.",
        "Columns: records counts those measured on the device (the baseline's included), replayed those "
        "a replay answered, failed the failures among both.",
        "Baseline: the vendor library's record (config <code>cublas</code>), measured beside the tune on the "
        "same inputs. Speed = baseline ms / best ms: above 1 the generated kernel is the faster.",
        "Roofline: each best at its problem's flop per byte (the family's counts) and its achieved TFLOP/s, "
        "under the device's copy rate and the compute ceilings cuBLAS reaches per precision "
        "(kgen/report/peaks.py); a device not listed there gets no roofs.",
        "Convergence: a tune is one problem's records on one device from one template digest, ordered by "
        "their time stamps (second resolution: records of one second keep config-name order); the line is "
        "the best so far, the dots the trials. A resumed tune's pauses show on the time axis.",
        f"At most {points} points per chart and {tunes} convergence figures per section are drawn "
        "(KGEN_REPORT_POINTS, KGEN_REPORT_TUNES); the page says where more exist.",
    )
    return "<footer><h2>Reading this page</h2><ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul></footer>"
