"""Control characters in what k8sjobs prints: one escaping (``k8sjobs._printable``), used
by every human view.

Step names, reasons, messages, events and annotations come from clusters and other teams'
stores; printed raw, ``ESC]0;...BEL`` retitles the terminal and ``ESC[2J`` clears it. Each
view is fed arbitrary text and must print none of it raw.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from k8sjobs._display import result_table
from k8sjobs._printable import printable, unsafe
from k8sjobs.cli.report import report_html
from k8sjobs.cli.statustable import Progress, status_table
from k8sjobs.state import StepResult, StepState

HOSTILE = st.text(
    st.characters(codec=None) | st.sampled_from("\x1b]0;x\x07\x1b[2J\r\x9b\u202e\u2028\x00"),
    max_size=30,
)
WHEN = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def raw(text: str, allowed: str = "\n") -> list[str]:
    return [c for c in text if unsafe(c) and c not in allowed]


@given(st.text())
def test_printable_escapes_every_control_character_and_keeps_plain_text(text: str) -> None:
    shown = printable(text)
    assert not raw(shown, allowed="")
    if text.isprintable():
        assert shown == text
    assert len(shown) >= len(text)


def hostile_result(text: str, state: StepState) -> StepResult:
    return StepResult(
        name=f"s{text}", state=state, reason=f"R{text}", message=f"m{text}",
        started_at=WHEN, finished_at=WHEN if state.terminal else None,
        pods=(f"p{text}",), log_file=f"/l/{text}",
    )  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(HOSTILE, st.sampled_from(list(StepState)))
def test_every_human_view_of_a_step_prints_no_control_character_raw(
    text: str, state: StepState
) -> None:
    result = hostile_result(text, state)
    assert not raw(result.describe(WHEN))
    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(status_table([result], WHEN, wide=True))
    assert not raw(out.getvalue())
    assert not raw(result_table([result]))
    step = {"name": f"s{text}", "state": str(state), "reason": f"R{text}", "message": f"m{text}",
            "queued": 100.0, "started": 100.1, "finished": 101.0, "ended": 101.0}  # fmt: skip
    page = report_html([{"study": f"st{text}", "started": 100.0, "steps": [step]}], now=102.0)
    assert not raw(page)


@settings(max_examples=30, deadline=None)
@given(HOSTILE)
def test_the_plain_progress_lines_print_no_control_character_raw(text: str) -> None:
    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        progress = Progress([f"s{text}"], Console(file=io.StringIO()), live=False)
        progress.notice(f"n{text}")
        progress.update(hostile_result(text, StepState.PENDING))
        progress.update(hostile_result(text, StepState.FAILED))
    assert not raw(out.getvalue())


@settings(max_examples=40, deadline=None)
@given(HOSTILE)
def test_an_error_line_prints_no_control_character_raw(text: str) -> None:
    """Every command's error goes through print_error; it can quote a registry's answer, a
    store's annotation or a path, and printed ESC, C1 controls and bidi overrides raw."""
    import contextlib

    from k8sjobs.cli.console import print_error

    out = io.StringIO()
    with contextlib.redirect_stderr(out):
        print_error(f"k8sjobs artifact push: w/{text}: no such file or directory")
    assert out.getvalue().startswith("error: ") and not raw(out.getvalue())


@settings(max_examples=40, deadline=None)
@given(HOSTILE, st.sampled_from([("run",), ("cache", "ls"), ()]))
def test_a_usage_error_quoting_what_was_typed_prints_no_control_character_raw(
    text: str, command: tuple[str, ...]
) -> None:
    """The parser's own error line (an unknown option, command or choice) quotes the words
    typed; 'unrecognized arguments: --x<U+009B>y' printed the C1 control raw."""
    import contextlib

    from k8sjobs.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stderr(out), contextlib.suppress(SystemExit):
        main([*command, f"--x{text}", f"y{text}"])
    assert out.getvalue().startswith("error: ") and not raw(out.getvalue())
