"""A study's run as one self-contained HTML page a person reads without hovering.

The page holds, for the latest run (and, when that run's driver died or still runs, the last
complete run below it): a headline (when, how long, steps per outcome), a note when the
driver died, a timeline on a real time axis (sub-second ticks when the run was short), a
legend, and a table with each step's state, reason, start, wait, duration, and what it
requested and used. Each outcome has its own mark, not only its own colour, so the page
reads the same printed in grey: a solid bar ran and succeeded, a bar ending in a cross
failed, a cross alone failed before it started, a ring did not run, a diamond was adopted
from an earlier run, a double ring was reused from the cache, a hatched bar was cancelled,
a dashed bar was lost, a bar with an arrow was still running, a thin line waited.

No scripts, no fetches, no fonts to load: the file opens anywhere, offline, and prints.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._printable import printable
from ..durations import format_duration
from ..study import count_origins
from ..usage import Usage, format_bytes, summarize_usage

__all__ = ["report_html"]

Run = Mapping[str, Any]


@dataclass(frozen=True)
class _Kind:
    """How one outcome is drawn and named."""

    word: str  # the state column's word and the legend's
    colour: str
    meaning: str  # the legend's explanation


_KINDS = {
    "succeeded": _Kind("succeeded", "#2e7d32", "ran and succeeded"),
    "failed": _Kind("failed", "#c62828", "ran and failed (the cross marks the end)"),
    "failed-early": _Kind("failed before start", "#c62828", "failed before it ran"),
    "not-run": _Kind("not run", "#757575", "not run: a step it depends on did not succeed"),
    "adopted": _Kind("adopted", "#00838f", "adopted: succeeded in an earlier run, not run again"),
    "reused": _Kind("reused", "#00838f", "reused: a cached result of the same step"),
    "cancelled": _Kind("cancelled", "#ef6c00", "cancelled"),
    "lost": _Kind("lost", "#6a1b9a", "lost: its Job vanished"),
    "running": _Kind("running", "#1565c0", "still running when recorded"),
    "queued": _Kind("queued", "#9e9e9e", "submitted, waiting to start"),
    "waiting": _Kind("waiting", "#9e9e9e", "not yet submitted"),
}
_ORDER = list(_KINDS)

# Geometry of the timeline, in CSS pixels.
_ROW, _PLOT, _AXIS, _CHAR = 22, 720, 34, 6.6

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #212121;
  margin: 24px auto; max-width: 1180px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.headline { margin: 0 0 12px; color: #424242; }
.usage { margin: 0 0 8px; color: #424242; } ul.usage { padding-left: 20px; }
.note { border-left: 5px solid #c62828; background: #fdecea; padding: 8px 12px; margin: 12px 0; }
.note.going { border-color: #1565c0; background: #e8f0fb; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 6px 0 10px; font-size: 13px; }
.legend span { display: inline-flex; align-items: center; gap: 6px; }
td svg { vertical-align: middle; margin-right: 4px; }
.timeline { overflow-x: auto; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e0e0e0;
  vertical-align: top; }
th { background: #f5f5f5; border-bottom: 2px solid #bdbdbd; }
td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
td.state { white-space: nowrap; font-weight: 600; }
td.reason { min-width: 14em; max-width: 30em; } td.used { min-width: 16em; }
.dim { color: #757575; }
footer { margin-top: 24px; font-size: 12px; color: #757575; }
@media print {
  body { margin: 0; max-width: none; font-size: 11px; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  .timeline svg { max-width: 100%; height: auto; }
  tr, .note { break-inside: avoid; }
  table { font-size: 10px; } th, td { padding: 2px 4px; }
  td.reason, td.used { min-width: 0; } td.num, td.state { white-space: normal; }
  section.previous { break-before: page; }
}
"""


def report_html(runs: Sequence[Run], *, source: str = "", now: float | None = None) -> str:
    """Return the HTML page of ``runs`` (``read_runs``: the newest first).

    ``source`` names the record read (shown at the foot); ``now`` is the time a still running
    run is drawn up to when its journal says no later change (default: the clock's).
    """
    if not runs:
        raise ValueError("report_html needs at least one run")
    latest = runs[0]
    title = _escape(str(latest.get("study")))
    parts = [_section(latest, now, heading=None)]
    if "driver" in latest:  # a journal: the last complete run, if any, follows
        for previous in runs[1:]:
            parts.append(
                "<section class='previous'>"
                + _section(previous, now, heading="The last complete run")
                + "</section>"
            )
    # No clock of its own: the same record gives the same page (diffable, cacheable).
    foot = "written by k8sjobs report" + (f" from {_escape(source)}" if source else "")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>k8sjobs study {title}</title><style>{_CSS}</style></head><body>"
        f"<h1>Study {title}</h1>{''.join(parts)}<footer>{foot}</footer></body></html>\n"
    )


# --- one run --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Row:
    """One step as the page shows it (times in epoch seconds, None: did not happen)."""

    name: str
    kind: str
    state: str
    queued: float | None
    started: float | None
    ended: float | None
    record: Mapping[str, Any]


def _section(run: Run, now: float | None, heading: str | None) -> str:
    driver = run.get("driver")
    rows = [_row(step) for step in run.get("steps") or []]
    times = [t for r in rows for t in (r.queued, r.started, r.ended) if t is not None]
    origin = min([*times, run.get("started") or math.inf])
    if origin == math.inf:
        origin = 0.0
    # A run without an end is drawn up to its last record (or now, while its driver runs).
    as_of = max(times, default=origin)
    if driver is not None:
        as_of = max(as_of, driver.get("last_change") or as_of)
        if driver.get("alive"):
            as_of = max(as_of, now if now is not None else datetime.now().timestamp())
    out = [f"<h2>{_escape(heading)}</h2>" if heading else ""]
    out.append(f"<p class='headline'>{_headline(run, rows, origin, as_of)}</p>")
    out.append(_usage_line(rows))
    out.append(_driver_note(run, rows, as_of))
    if run.get("damaged"):
        out.append(
            f"<div class='note'><strong>Damaged record.</strong> {_escape(run['damaged'])}</div>"
        )
    out.append("<h2>Timeline</h2>" + _legend(rows))
    out.append(f"<div class='timeline'>{_timeline(rows, origin, as_of)}</div>")
    out.append("<h2>Steps</h2>" + _table(rows, origin, as_of, driver))
    return "".join(out)


def _row(step: Mapping[str, Any]) -> _Row:
    state = str(step.get("state") or "PENDING")
    reason = step.get("reason") or ""
    started = step.get("started")  # None: this run never saw it run
    ended = step.get("ended", step.get("finished"))  # records before "ended" had only this
    ran = step.get("ran") or {}
    if started is not None and _fine(ran.get("started")):
        # The backend's own stamps, where finer than a second: the figures `status` shows.
        started = ran["started"]
        if _fine(ran.get("finished")):
            ended = ran["finished"]
    origin = step.get("origin")  # "ran", "reused", "adopted", "not run" (newer records)
    adopted = bool(step.get("adopted")) or origin == "adopted"
    if reason == "Cached" or state == "CACHED" or origin == "reused":
        kind = "reused"
    elif adopted and state == "SUCCEEDED":
        kind = "adopted"
    elif reason == "DependencyFailed":
        kind = "not-run"
    elif state == "FAILED":
        kind = "failed" if started is not None else "failed-early"
    else:
        kind = {
            "SUCCEEDED": "succeeded",
            "CANCELLED": "cancelled",
            "LOST": "lost",
            "RUNNING": "running",
        }.get(state, "queued" if step.get("queued") is not None else "waiting")
    if adopted and kind not in ("adopted", "reused") and started is None:
        # Adopted while it ran (its driver had died): it runs on in this run from its start.
        begun = _epoch(ran.get("started"))
        queued = step.get("queued")
        started = None if begun is None else max(begun, queued if queued is not None else begun)
    return _Row(str(step.get("name")), kind, state, step.get("queued"), started, ended, step)


def _headline(run: Run, rows: Sequence[_Row], origin: float, as_of: float) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.kind] = counts.get(r.kind, 0) + 1
    summary = ", ".join(f"{counts[k]} {_KINDS[k].word}" for k in _ORDER if k in counts)
    took = format_duration(as_of - origin)
    began = _clock(run.get("started") or origin, date=True)
    took = f"{took} recorded so far" if "driver" in run else f"took {took}"
    # How they came about, counted as `run` and `status` count them (records that say).
    origins = count_origins(str(r.record["origin"]) for r in rows if "origin" in r.record)
    summary += f" ({origins})" if origins else ""
    return _escape(f"Started {began}, {took}; {len(rows)} steps: {summary}.")


def _driver_note(run: Run, rows: Sequence[_Row], as_of: float) -> str:
    driver = run.get("driver")
    if driver is None:
        return ""
    who = f"pid {driver.get('pid')} on {driver.get('host')}"
    unended = [r.name for r in rows if r.state in ("PENDING", "PREEMPTED", "RUNNING")]
    last = _clock(driver.get("last_change") or as_of, date=True)
    if driver.get("alive"):
        text = (
            f"This run is still going (its driver, {who}, is alive); the page shows it as of "
            f"its last record, {last}. Run k8sjobs report again for a later view."
        )
        return f"<div class='note going'>{_escape(text)}</div>"
    unseen = ""
    if unended:
        unseen = (
            f" {_count(len(unended), 'step was', 'steps were')} not seen to end "
            f"({_names(unended)}); k8sjobs status tells what they did since"
        )
    if driver.get("alive") is None:  # its lock is another machine's, or locks do not work
        text = (
            f"This run has no end in its record, and its driver ({who}) cannot be checked from "
            f"here: it may still run, or have died. Its last record is from {last}.{unseen}."
        )
        return f"<div class='note going'>{_escape(text)}</div>"
    text = f"The driver of this run ({who}) died before the run ended: its last record is "
    text += f"from {last}.{unseen}" + ("; k8sjobs run resumes the study." if unseen else "")
    return f"<div class='note'><strong>Driver died.</strong> {_escape(text)}</div>"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _names(names: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


# --- the timeline ---------------------------------------------------------------------------


def _timeline(rows: Sequence[_Row], origin: float, as_of: float) -> str:
    label = min(max((len(r.name) for r in rows), default=4) * _CHAR + 16, 260)
    span = max(as_of - origin, 1e-3)
    scale = _PLOT / span
    width = label + _PLOT + 190  # room right of the plot for the last annotation
    height = _AXIS + _ROW * len(rows) + 8

    def x(t: float) -> float:  # a time's place on the plot
        return label + (t - origin) * scale

    body = [_axis(label, span, scale, height)]
    for i, row in enumerate(rows):
        y = _AXIS + i * _ROW
        if i % 2:
            body.append(f"<rect x='0' y='{y}' width='{width}' height='{_ROW}' fill='#fafafa'/>")
        name = row.name if len(row.name) * _CHAR <= label - 12 else _clip(row.name, label)
        body.append(
            f"<text x='4' y='{y + 15}' font-size='12'>{_escape(name)}"
            f"<title>{_escape(row.name)}</title></text>"
        )
        body.append(_marks(row, y, x, as_of, width))
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img' aria-label='timeline of the run'>"
        f"{_DEFS}{''.join(body)}</svg>"
    )


_DEFS = (
    "<defs><pattern id='hatch' width='6' height='6' patternUnits='userSpaceOnUse' "
    "patternTransform='rotate(45)'><rect width='6' height='6' fill='#ef6c00'/>"
    "<line x1='0' y1='0' x2='0' y2='6' stroke='#fff' stroke-width='2.5'/></pattern></defs>"
)


def _clip(name: str, label: float) -> str:
    keep = max(int((label - 12) / _CHAR) - 1, 3)
    return name[:keep] + "…"


def _marks(row: _Row, y: int, x: Callable[[float], float], as_of: float, width: float) -> str:
    kind = _KINDS[row.kind]
    mid = y + _ROW / 2
    out = []
    end_of_wait = row.started if row.started is not None else (row.ended or as_of)
    if row.queued is not None and row.kind not in ("adopted", "reused"):
        x0, x1 = x(row.queued), x(end_of_wait)
        out.append(
            f"<line x1='{x0:.1f}' y1='{mid}' x2='{max(x1, x0 + 1):.1f}' y2='{mid}' "
            "stroke='#9e9e9e' stroke-width='3'/>"
        )
    tip = x(end_of_wait)
    if row.started is not None:
        stop = row.ended if row.ended is not None else as_of
        x0 = x(row.started)
        w = max(x(stop) - x0, 2.0)
        tip = x0 + w
        fill, extra = kind.colour, ""
        if row.kind == "cancelled":
            fill = "url(#hatch)"
        if row.kind == "lost":
            fill, extra = "#e1bee7", f" stroke='{kind.colour}' stroke-dasharray='4 2'"
        out.append(
            f"<rect x='{x0:.1f}' y='{y + 4}' width='{w:.1f}' height='{_ROW - 8}' rx='2' "
            f"fill='{fill}'{extra}/>"
        )
    glyph = _glyph(row.kind, tip, mid, started=row.started is not None)
    out.append(glyph)
    text = _annotation(row, as_of)
    if text:
        room = len(text) * _CHAR
        gap = 18 if row.kind == "failed" else 13 if glyph else 6  # clear of the end's mark
        tx = tip + gap if tip + gap + room < width else tip - gap
        anchor = "start" if tx > tip else "end"
        out.append(
            f"<text x='{tx:.1f}' y='{y + 15}' font-size='11' fill='#424242' "
            f"text-anchor='{anchor}'>{_escape(text)}</text>"
        )
    return "".join(out)


def _glyph(kind: str, cx: float, cy: float, *, started: bool) -> str:
    """Return the mark drawn at the end of a step's row (each outcome its own shape)."""
    colour = _KINDS[kind].colour
    if kind in ("failed", "failed-early"):
        cx += 6 if started else 0
        d = 5
        return (
            f"<path d='M{cx - d:.1f},{cy - d} L{cx + d:.1f},{cy + d} M{cx - d:.1f},{cy + d} "
            f"L{cx + d:.1f},{cy - d}' stroke='{colour}' stroke-width='3' stroke-linecap='round'/>"
        )
    if kind == "not-run":
        return (
            f"<circle cx='{cx:.1f}' cy='{cy}' r='5' fill='#fff' stroke='{colour}' "
            "stroke-width='2'/>"
        )
    if kind == "adopted":
        return (
            f"<path d='M{cx:.1f},{cy - 7} L{cx + 7:.1f},{cy} L{cx:.1f},{cy + 7} "
            f"L{cx - 7:.1f},{cy} Z' fill='{colour}'/>"
        )
    if kind == "reused":
        return (
            f"<circle cx='{cx:.1f}' cy='{cy}' r='7' fill='none' stroke='{colour}' "
            "stroke-width='2'/>"
            f"<circle cx='{cx:.1f}' cy='{cy}' r='3' fill='{colour}'/>"
        )
    if kind == "cancelled" and not started:
        return f"<rect x='{cx - 5:.1f}' y='{cy - 5}' width='10' height='10' fill='url(#hatch)'/>"
    if kind == "running":
        return (
            f"<path d='M{cx:.1f},{cy - 7} L{cx + 9:.1f},{cy} L{cx:.1f},{cy + 7} Z' "
            f"fill='{colour}'/>"
        )
    if kind == "lost" and not started:
        return (
            f"<circle cx='{cx:.1f}' cy='{cy}' r='6' fill='#e1bee7' stroke='{colour}' "
            "stroke-dasharray='3 2'/>"
        )
    if kind == "queued" and not started:
        return f"<circle cx='{cx:.1f}' cy='{cy}' r='3' fill='{colour}'/>"
    return ""


def _annotation(row: _Row, as_of: float) -> str:
    """Return the words beside a row's mark: how long, and what came of it in brief."""
    took = _took(row, as_of)
    brief = {
        "failed": _exit(row.record) or str(row.record.get("reason") or "failed"),
        "failed-early": str(row.record.get("reason") or "failed"),
        "not-run": "not run",
        "adopted": "adopted",
        "reused": "reused",
        "cancelled": "cancelled",
        "lost": "lost",
        "running": "running",
        "queued": "queued",
        "waiting": "",
        "succeeded": "",
    }[row.kind]
    return ", ".join(p for p in (took, brief) if p)


def _exit(step: Mapping[str, Any]) -> str:
    code = step.get("exit_code")
    return "" if code is None else f"exit {code}"


def _axis(label: float, span: float, scale: float, height: int) -> str:
    step = _tick_step(span)
    out = []
    count = int(span / step + 1e-9)
    for i in range(count + 1):
        t = i * step
        x = label + t * scale
        out.append(
            f"<line x1='{x:.1f}' y1='{_AXIS - 6}' x2='{x:.1f}' y2='{height - 4}' "
            f"stroke='#e0e0e0'/><text x='{x:.1f}' y='{_AXIS - 12}' font-size='11' "
            f"text-anchor='middle' fill='#616161'>{_tick_label(t)}</text>"
        )
    out.append(
        f"<line x1='{label}' y1='{_AXIS - 6}' x2='{label + span * scale:.1f}' y2='{_AXIS - 6}' "
        "stroke='#9e9e9e'/>"
    )
    return "".join(out)


def _tick_step(span: float) -> float:
    """Return a round tick spacing that gives at most 8 ticks over ``span`` seconds.

    1-2-5 steps under 10 s (down to microseconds), then clock-round ones: 10 s, 15 s, 30 s,
    minutes, hours, days.
    """
    if span < 10:
        power = 10.0 ** math.floor(math.log10(span / 8))
        return next(m * power for m in (1, 2, 5, 10) if span / (m * power) <= 8)
    for step in (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200):
        if span / step <= 8:
            return float(step)
    return 86400.0 * math.ceil(span / 86400 / 8)


def _tick_label(t: float) -> str:
    """Return a tick's position as an axis reads it: round values, "0" at the start.

    Positions, not durations: a tick at 2 s reads "2s" where a duration of 2 s reads "2.00s".
    """
    if t == 0:
        return "0"
    if t < 1:
        return f"{t * 1000:.4g}ms"
    if t < 60:
        return f"{t:.4g}s"
    minutes, seconds = divmod(round(t), 60)
    hours, minutes = divmod(minutes, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{seconds}s" if seconds else "",
    ]
    return " ".join(p for p in parts if p)


def _legend(rows: Sequence[_Row]) -> str:
    present = {r.kind for r in rows}
    items = []
    if any(r.queued is not None and r.kind not in ("adopted", "reused") for r in rows):
        items.append(
            "<span><svg width='26' height='14'><line x1='1' y1='7' x2='25' y2='7' "
            "stroke='#9e9e9e' stroke-width='3'/></svg>waiting to start</span>"
        )
    for key in _ORDER:
        if key not in present or key == "waiting":
            continue
        sample = _sample(key)
        items.append(f"<span>{sample}{_escape(_KINDS[key].meaning)}</span>")
    return f"<div class='legend'>{''.join(items)}</div>"


def _sample(kind: str) -> str:
    """Return the legend's small drawing of ``kind``'s mark."""
    colour = _KINDS[kind].colour
    bar = ""
    started = kind in ("succeeded", "failed", "cancelled", "lost", "running")
    if started:
        fill = {"cancelled": "url(#hatch)", "lost": "#e1bee7"}.get(kind, colour)
        dash = f" stroke='{colour}' stroke-dasharray='4 2'" if kind == "lost" else ""
        bar = f"<rect x='1' y='2' width='18' height='12' rx='2' fill='{fill}'{dash}/>"
    glyph = _glyph(kind, 20 if started else 12, 8, started=started)
    return f"<svg width='34' height='16'>{_DEFS}{bar}{glyph}</svg>"


# --- the table ------------------------------------------------------------------------------


def _table(
    rows: Sequence[_Row], origin: float, as_of: float, driver: Mapping[str, Any] | None
) -> str:
    head = ("step", "state", "reason", "start", "waited", "duration", "requested", "used")
    lines = ["<table class='steps'><thead><tr>"]
    lines += [f"<th>{h}</th>" for h in head]
    lines.append("</tr></thead><tbody>")
    for row in rows:
        kind = _KINDS[row.kind]
        mark = _sample(row.kind) if row.kind != "waiting" else ""
        cells = [
            f"<td>{_escape(row.name)}</td>",
            f"<td class='state' style='color:{kind.colour}'>{mark}{_escape(kind.word)}</td>",
            f"<td class='reason'>{_escape(_reason(row, driver))}</td>",
            f"<td class='num'>{_start(row, origin)}</td>",
            f"<td class='num'>{_escape(_waited(row, as_of))}</td>",
            f"<td class='num'>{_escape(_took(row, as_of) or '-')}</td>",
            f"<td>{_escape(_requested(row.record.get('requested')))}</td>",
            f"<td class='used'>{_escape(_used(row.record))}</td>",
        ]
        lines.append(f"<tr data-step='{_escape(row.name)}'>{''.join(cells)}</tr>")
    lines.append("</tbody></table>")
    return "".join(lines)


def _reason(row: _Row, driver: Mapping[str, Any] | None) -> str:
    step = row.record
    text = str(step.get("message") or step.get("reason") or "")
    if row.kind == "adopted":
        text = "succeeded in an earlier run; adopted, not run again"
    elif row.kind != "reused" and (step.get("origin") == "adopted" or step.get("adopted")):
        text = (
            f"adopted from an earlier driver; {text}" if text else "adopted from an earlier driver"
        )
    if row.state in ("PENDING", "PREEMPTED", "RUNNING") and driver and not driver.get("alive"):
        why = "the driver died" if driver.get("alive") is False else "its driver is elsewhere"
        text = (text + "; " if text else "") + f"not seen to end: {why}"
    return text or "-"


def _start(row: _Row, origin: float) -> str:
    if row.kind in ("adopted", "reused"):
        ran = row.record.get("ran") or {}
        when = _epoch(ran.get("started"))
        if when is None:
            return "-"
        same_day = _clock(when, date=True)[:10] == _clock(origin, date=True)[:10]
        return f"<span class='dim'>earlier, {_escape(_clock(when, date=not same_day))}</span>"
    if row.started is None:
        return "-"
    offset = format_duration(row.started - origin)
    return f"{_escape(_clock(row.started))} <span class='dim'>(+{offset})</span>"


def _waited(row: _Row, as_of: float) -> str:
    if row.queued is None or row.kind in ("adopted", "reused", "not-run"):
        return "-"
    end = row.started if row.started is not None else (row.ended or as_of)
    return format_duration(end - row.queued)


def _took(row: _Row, as_of: float) -> str:
    if row.kind in ("adopted", "reused"):
        ran = row.record.get("ran") or {}
        start, end = _epoch(ran.get("started")), _epoch(ran.get("finished"))
        if start is None or end is None:
            return ""
        return format_duration(end - start)
    if row.started is None:
        return ""
    end = row.ended if row.ended is not None else as_of
    return format_duration(end - row.started)


def _requested(requested: Mapping[str, Any] | None) -> str:
    if not requested:
        return "-"
    cpu = requested.get("cpu")
    parts = [f"{cpu:g} cpu" if isinstance(cpu, int | float) else f"{cpu} cpu"]  # 1, 0.25
    if requested.get("memory"):
        parts.append(format_bytes(requested["memory"]))
    if requested.get("gpus"):
        parts.append(f"{requested['gpus']} gpu")
    nodes = requested.get("nodes") or 1
    return ", ".join(parts) + (f" each, {nodes} pods" if nodes > 1 else "")


def _used(step: Mapping[str, Any]) -> str:
    """Return what the step used, against its request; why a figure is missing, if it is."""
    if not step.get("usage"):
        return "-"
    usage = Usage.from_json(step["usage"])
    asked = step.get("requested") or {}
    parts = []
    if usage.cpu_seconds is not None:
        wall = usage.wall_seconds
        cores = f" ({usage.cpu_seconds / wall:.2g} cores)" if wall else ""
        parts.append(f"cpu {format_duration(usage.cpu_seconds)}{cores}")
    if usage.memory_peak is not None:
        memory = asked.get("memory")
        share = f" ({100 * usage.memory_peak / memory:.0f}% of request)" if memory else ""
        parts.append(f"mem {format_bytes(usage.memory_peak)} peak{share}")
    if usage.wall_seconds is not None:
        parts.append(f"wall {format_duration(usage.wall_seconds)}")
    if usage.devices:
        parts.append("gpus " + ",".join(usage.devices))
    if parts:
        return ", ".join(parts)
    why = usage.missing.get("memory_peak") or usage.missing.get("cpu_seconds")
    return f"unknown: {why}" if why else "-"


def _usage_line(rows: Sequence[_Row]) -> str:
    """Return the study's usage summary (CPU hours, steps that asked for far more), or ""."""
    summary = summarize_usage(
        (
            r.name,
            r.record.get("requested"),
            Usage.from_json(r.record["usage"]) if r.record.get("usage") else None,
        )
        for r in rows
        if r.kind not in ("adopted", "reused")  # an earlier run's figures: counted there
    )
    if not summary.measured:
        return ""
    cpu = format_duration(summary.cpu_hours * 3600)
    hours = f" ({summary.cpu_hours:.3g} CPU hours)" if summary.cpu_hours >= 0.01 else ""
    line = f"CPU used: {cpu} in all{hours} over "
    line += _count(summary.measured, "step", "steps")
    if summary.unmeasured:
        line += f"; {summary.unmeasured} without figures"
    items = "".join(
        f"<li>asked for far more than it used: {_escape(o)}</li>" for o in summary.oversized
    )
    return f"<p class='usage'>{_escape(line)}.</p>" + (
        f"<ul class='usage'>{items}</ul>" if items else ""
    )


# --- times ----------------------------------------------------------------------------------


def _clock(epoch: float | None, *, date: bool = False) -> str:
    """Return a wall-clock time to the millisecond in this machine's zone."""
    if epoch is None:
        return "-"
    when = datetime.fromtimestamp(epoch).astimezone()
    text = when.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")
    text += f".{when.microsecond // 1000:03d}"
    return text + (when.strftime(" %Z") if date else "")


def _fine(value: object) -> bool:
    """Return whether a record's stamp is finer than the Kubernetes API's whole seconds."""
    return isinstance(value, float) and not value.is_integer()


def _epoch(value: object) -> float | None:
    """Return epoch seconds from a record's number or ISO stamp."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value).timestamp()
    return None


def _escape(text: str) -> str:
    """Return ``text`` for the page: HTML-escaped, its control characters shown as escapes
    (names and reasons come from the cluster and the run record, not from us)."""
    return html.escape(printable(text))
