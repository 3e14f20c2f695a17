"""A study's timeline as one self-contained HTML file (inline SVG, no scripts, no fetches).

Each step is a row: a thin grey bar while it was queued (submitted, not yet running), a thick
bar while it ran, coloured by outcome; hovering a bar shows the step's state and reason.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

__all__ = ["timeline_html"]

_COLOURS = {
    "SUCCEEDED": "#2ca02c",
    "FAILED": "#d62728",
    "CANCELLED": "#ff7f0e",
    "LOST": "#9467bd",
    "RUNNING": "#1f77b4",
    "PENDING": "#bbbbbb",
}
_ROW, _LABEL, _WIDTH, _TOP = 26, 220, 760, 30


def timeline_html(run: Mapping[str, Any]) -> str:
    """Return an HTML page drawing ``run`` (as written by ``StudyRun.timeline``)."""
    steps: Sequence[Mapping[str, Any]] = run["steps"]
    times = [t for s in steps for t in (s["queued"], s["started"], s["finished"]) if t]
    origin = min(times, default=run["started"])
    end = max(times, default=origin + 1)
    scale = _WIDTH / max(end - origin, 1e-3)
    height = _TOP + _ROW * len(steps) + 30
    rows = [_row(i, s, origin, scale, end) for i, s in enumerate(steps)]
    axis = _axis(end - origin, scale, height)
    title = html.escape(str(run["study"]))
    when = datetime.fromtimestamp(origin).astimezone().isoformat(timespec="seconds")
    counts: dict[str, int] = {}
    for s in steps:
        counts[s["state"]] = counts.get(s["state"], 0) + 1
    summary = ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items()))
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_LABEL + _WIDTH + 20}" '
        f'height="{height}" font-family="sans-serif" font-size="12">'
        + axis
        + "".join(rows)
        + "</svg>"
    )
    legend = " ".join(
        f'<span style="color:{c}">&#9632; {s.lower()}</span>' for s, c in _COLOURS.items()
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>k8sjobs study {title}</title></head><body style='font-family:sans-serif'>"
        f"<h2>Study {title}</h2><p>started {when}; {len(steps)} steps: {summary}</p>"
        f"<p>{legend} (thin grey: queued)</p>{svg}</body></html>"
    )


def _row(i: int, step: Mapping[str, Any], origin: float, scale: float, end: float) -> str:
    y = _TOP + i * _ROW
    name = html.escape(str(step["name"]))
    colour = _COLOURS.get(step["state"], "#777777")
    tip = html.escape(
        f"{step['name']}: {step['state']} {step.get('message') or step.get('reason') or ''}"
    )
    parts = [f'<text x="4" y="{y + 15}">{name}</text>']
    queued, started, finished = step["queued"], step["started"], step["finished"]
    if queued:
        stop = started or finished or end
        x = _LABEL + (queued - origin) * scale
        parts.append(
            f'<rect x="{x:.1f}" y="{y + 9}" width="{max((stop - queued) * scale, 1):.1f}" '
            f'height="4" fill="#bbbbbb"><title>{tip} (queued)</title></rect>'
        )
    if started:
        x = _LABEL + (started - origin) * scale
        width = max(((finished or end) - started) * scale, 2)
        parts.append(
            f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="16" rx="3" '
            f'fill="{colour}"><title>{tip}</title></rect>'
        )
    elif not queued:
        parts.append(
            f'<text x="{_LABEL}" y="{y + 15}" fill="{colour}">{html.escape(step["state"])}'
            f" ({html.escape(str(step.get('reason') or ''))})</text>"
        )
    return "".join(parts)


def _axis(span: float, scale: float, height: int) -> str:
    step = next(
        (s for s in (0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600) if span / s <= 10), 7200
    )
    ticks = []
    t = 0.0
    while t <= span + 1e-9:
        x = _LABEL + t * scale
        ticks.append(
            f'<line x1="{x:.1f}" y1="{_TOP - 6}" x2="{x:.1f}" y2="{height - 24}" '
            f'stroke="#eeeeee"/><text x="{x:.1f}" y="{height - 10}" text-anchor="middle">'
            f"{t:g}s</text>"
        )
        t += step
    return "".join(ticks)
