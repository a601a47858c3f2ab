"""Small SVG charts written as text: linear or log axes with ticks and a grid, lines, dots
and labels. Every string that reaches the SVG is escaped here.

>>> axis = log_axis([0.02, 3.0])
>>> (axis.lo, axis.hi), axis.ticks()
((0.01, 10.0), [0.01, 0.1, 1.0, 10.0])
>>> linear_axis([0, 37]).ticks()
[0.0, 10.0, 20.0, 30.0, 40.0]
>>> chart = Chart(axis, linear_axis([0, 1]))
>>> chart.dot(1.0, 0.5, "point", tip="<b>")
>>> "&lt;b&gt;" in chart.svg() and "<b>" not in chart.svg()
True
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from html import escape
from typing import Iterable, Mapping


@dataclass(frozen=True)
class Axis:
    lo: float
    hi: float
    log: bool = False
    label: str = ""

    def fraction(self, v: float) -> float:
        """Where ``v`` falls between lo (0) and hi (1)."""
        if self.log:
            return (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return (v - self.lo) / (self.hi - self.lo)

    def ticks(self) -> list[float]:
        if self.log:
            lo, hi = math.floor(math.log10(self.lo) + 1e-9), math.ceil(math.log10(self.hi) - 1e-9)
            decades = [10.0 ** k for k in range(lo, hi + 1)]
            if hi - lo > 2:
                return [d for d in decades if self.lo * (1 - 1e-9) <= d <= self.hi * (1 + 1e-9)]
            lo_edge, hi_edge = self.lo * (1 - 1e-9), self.hi * (1 + 1e-9)
            return sorted({d * m for d in decades for m in (1, 2, 5) if lo_edge <= d * m <= hi_edge})
        step = _nice_step(self.hi - self.lo)
        first = math.ceil(self.lo / step)
        return [round(k * step, 12) for k in range(first, int(math.floor(self.hi / step + 1e-9)) + 1)]


def _nice_step(span: float) -> float:
    base = 10.0 ** math.floor(math.log10(span / 5))
    for m in (1, 2, 5, 10):
        if span / (base * m) <= 6:
            return base * m
    return base * 10


def log_axis(values: Iterable[float], label: str = "", tight: bool = False) -> Axis:
    """A log axis covering the positive ``values`` (1 to 10 if none): over whole decades, or
    ``tight``, from the 1-2-5 step below the least to the one above the most."""
    vs = [v for v in values if v > 0 and math.isfinite(v)]
    if not vs:
        return Axis(1.0, 10.0, True, label)
    lo, hi = math.floor(math.log10(min(vs))), math.ceil(math.log10(max(vs)))
    if not tight:
        return Axis(10.0 ** lo, 10.0 ** max(hi, lo + 1), True, label)
    steps = [10.0 ** k * m for k in range(lo - 1, hi + 2) for m in (1, 2, 5)]
    low = max(s for s in steps if s < min(vs) / 1.05)                # a margin: no value on the frame
    high = min(s for s in steps if s > max(vs) * 1.05)
    return Axis(low, high, True, label)


def linear_axis(values: Iterable[float], label: str = "", pad: float = 0.0) -> Axis:
    """A linear axis from 0 (or the least value, if negative) to a round number above the most
    (``pad``: and above the most by that fraction of the span)."""
    vs = [v for v in values if math.isfinite(v)]
    lo = min([0.0, *vs])
    if vs and pad:
        vs.append(max(vs) + pad * max(max(vs) - lo, 1.0))
    hi = max([lo + 1e-9, *vs])
    step = _nice_step(hi - lo)
    return Axis(lo, math.ceil(hi / step - 1e-9) * step if hi > lo + 1e-9 else lo + 1.0, False, label)


def number(v: float) -> str:
    """A tick label: few digits, no trailing zeros, powers of ten past 10^4 as 1e5.

    >>> [number(v) for v in (0.001, 0.25, 1000.0, 1e5, 20000.0)]
    ['0.001', '0.25', '1000', '1e5', '2e4']
    """
    if v and (abs(v) >= 1e4 or abs(v) < 1e-3):
        mantissa, exponent = f"{v:.3e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}"
    return f"{v:.4g}"


def attrs(values: Mapping[str, object]) -> str:
    """HTML attributes, each value escaped (None: left out)."""
    return "".join(f' {k}="{escape(str(v), quote=True)}"' for k, v in values.items() if v is not None)


_CLIP_IDS = itertools.count()


class Chart:
    """One plot: axes, then whatever is added, in order, clipped to the plotting area."""

    left, right, top, bottom = 58, 22, 12, 40

    def __init__(self, x: Axis, y: Axis, width: int = 360, height: int = 220, css_class: str = "chart",
                 label: str = "", data: Mapping[str, object] | None = None):
        self.x, self.y, self.width, self.height = x, y, width, height
        self.css_class, self.label, self.data = css_class, label, dict(data or {})
        self._parts: list[str] = []

    def px(self, x: float, y: float) -> tuple[float, float]:
        """Pixel position of a data point (y grows downwards)."""
        w = self.width - self.left - self.right
        h = self.height - self.top - self.bottom
        return self.left + self.x.fraction(x) * w, self.top + (1 - self.y.fraction(y)) * h

    def polyline(self, points: Iterable[tuple[float, float]], cls: str, data: Mapping[str, object] | None = None):
        pts = " ".join("%.1f,%.1f" % self.px(x, y) for x, y in points)
        self._parts.append(f'<polyline{attrs({"class": cls, "points": pts, **(data or {})})}/>')

    def line(self, x0: float, y0: float, x1: float, y1: float, cls: str):
        (a, b), (c, d) = self.px(x0, y0), self.px(x1, y1)
        ends = {"x1": f"{a:.1f}", "y1": f"{b:.1f}", "x2": f"{c:.1f}", "y2": f"{d:.1f}"}
        self._parts.append(f'<line{attrs({"class": cls, **ends})}/>')

    def dot(self, x: float, y: float, cls: str, tip: str = "", data: Mapping[str, object] | None = None,
            r: float = 2.5):
        cx, cy = self.px(x, y)
        title = f"<title>{escape(tip)}</title>" if tip else ""
        where = {"cx": f"{cx:.1f}", "cy": f"{cy:.1f}", "r": r}
        self._parts.append(f'<circle{attrs({"class": cls, **where, **(data or {})})}>{title}</circle>')

    def text(self, x: float, y: float, words: str, cls: str = "note", anchor: str = "end", dy: float = -3):
        px, py = self.px(x, y)
        where = {"x": f"{px:.1f}", "y": f"{py + dy:.1f}", "text-anchor": anchor}
        self._parts.append(f'<text{attrs({"class": cls, **where})}>{escape(words)}</text>')

    def _axes(self) -> list[str]:
        out = []
        x0, y0 = self.left, self.height - self.bottom
        x1, y1 = self.width - self.right, self.top
        for t in self.x.ticks():
            px = self.px(t, self.y.lo)[0]
            out.append(f'<line class="grid" x1="{px:.1f}" y1="{y0}" x2="{px:.1f}" y2="{y1}"/>'
                       f'<text class="tick" x="{px:.1f}" y="{y0 + 13}" text-anchor="middle">{escape(number(t))}</text>')
        for t in self.y.ticks():
            py = self.px(self.x.lo, t)[1]
            out.append(f'<line class="grid" x1="{x0}" y1="{py:.1f}" x2="{x1}" y2="{py:.1f}"/>'
                       f'<text class="tick" x="{x0 - 4}" y="{py + 3:.1f}" text-anchor="end">{escape(number(t))}</text>')
        out.append(f'<rect class="frame" x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}"/>')
        out.append(f'<text class="axis" x="{(x0 + x1) / 2:.1f}" y="{self.height - 6}" text-anchor="middle">'
                   f'{escape(self.x.label)}</text>')
        out.append(f'<text class="axis" x="12" y="{(y0 + y1) / 2:.1f}" text-anchor="middle" '
                   f'transform="rotate(-90 12 {(y0 + y1) / 2:.1f})">{escape(self.y.label)}</text>')
        return out

    def svg(self) -> str:
        clip = f"clip{next(_CLIP_IDS)}"
        x0, y1 = self.left, self.top
        w, h = self.width - self.left - self.right, self.height - self.top - self.bottom
        head = attrs({"class": self.css_class, "viewBox": f"0 0 {self.width} {self.height}", "width": self.width,
                      "height": self.height, "role": "img", "aria-label": self.label, **self.data})
        return (f"<svg{head}><defs><clipPath id=\"{clip}\"><rect x=\"{x0 - 4}\" y=\"{y1 - 4}\" width=\"{w + 8}\" "
                f"height=\"{h + 8}\"/></clipPath></defs>" + "".join(self._axes())
                + f'<g clip-path="url(#{clip})">' + "".join(self._parts) + "</g></svg>")
