"""Readable tables of step results, for notebooks (HTML) and terminals (text)."""

from __future__ import annotations

import html
from collections.abc import Iterable

from ._printable import printable
from .state import StepResult, StepState

_COLOURS = {
    StepState.PENDING: "#999999",
    StepState.RUNNING: "#1f77b4",
    StepState.PREEMPTED: "#bcbd22",
    StepState.SUCCEEDED: "#2ca02c",
    StepState.FAILED: "#d62728",
    StepState.CANCELLED: "#ff7f0e",
    StepState.LOST: "#9467bd",
}
_COLUMNS = ("step", "state", "reason", "exit code", "duration", "used", "outputs")


def _cells(result: StepResult) -> tuple[str, ...]:
    return (
        result.name,
        str(result.state),
        result.message or result.reason,
        "" if result.exit_code is None else str(result.exit_code),
        result.took(),  # a running step's time so far
        "" if result.usage is None else result.usage.describe(),
        ", ".join(result.outputs),
    )


def result_table(results: Iterable[StepResult]) -> str:
    """Return an HTML table of ``results``, one row a step, the state coloured."""
    head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
    rows = []
    for result in results:
        cells = [html.escape(printable(c)) for c in _cells(result)]
        cells[1] = f'<span style="color:{_COLOURS[result.state]}">{cells[1]}</span>'
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
