"""format_duration and span: one way to write how long, sub-second under a minute."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.durations import format_duration, span

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "<1ms"),
        (0.0004, "<1ms"),
        (0.0006, "1ms"),
        (0.25, "250ms"),
        (0.9996, "1.00s"),
        (1.234, "1.23s"),
        (9.996, "10.0s"),
        (12.34, "12.3s"),
        (59.94, "59.9s"),
        (59.96, "1m 00s"),
        (75, "1m 15s"),
        (3599.6, "1h 00m"),
        (7380, "2h 03m"),
        (93600, "1d 02h"),
        (-2, "<1ms"),
    ],
)
def test_durations_read_as_a_person_writes_them(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0, "<1s"), (0.4, "<1s"), (3, "3s"), (59.6, "1m 00s"), (75, "1m 15s")]
)
def test_whole_second_figures_never_invent_a_fraction(seconds: float, shown: str) -> None:
    assert format_duration(seconds, whole=True) == shown


def parse(text: str) -> tuple[float, float]:
    """Return the seconds ``text`` says and the half-unit of its last figure."""
    if text.startswith("<"):
        return 0.0, UNITS[text.lstrip("<1")]
    total, half = 0.0, 0.0
    for number, unit in re.findall(r"([\d.]+)(ms|[smhd])", text):
        total += float(number) * UNITS[unit]
        decimals = len(number.partition(".")[2])
        half = 0.5 * 10**-decimals * UNITS[unit]
    return total, half


@given(st.floats(min_value=0, max_value=10**7, allow_nan=False))
def test_a_shown_duration_is_the_figure_to_its_last_digit(seconds: float) -> None:
    text = format_duration(seconds)
    value, half = parse(text)
    assert abs(value - seconds) <= half + 1e-9, text
    if seconds < 59.95:  # under a minute: sub-second precision
        assert half < 0.5, text


def test_span_of_whole_second_stamps_says_whole_seconds() -> None:
    assert span(T0, T0) == "<1s"
    assert span(T0, T0 + timedelta(seconds=3)) == "3s"
    assert span(T0, T0 + timedelta(seconds=0.25)) == "250ms"
    assert span(T0 + timedelta(seconds=0.5), T0 + timedelta(seconds=2)) == "1.50s"


def test_span_without_an_end_runs_to_now_and_without_a_start_is_empty() -> None:
    assert span(T0 + timedelta(microseconds=1), None, T0 + timedelta(seconds=4.2)) == "4.20s"
    assert span(T0, None, T0 + timedelta(seconds=4.2)) == "4s"
    assert span(None, T0, T0) == span(T0, None) == ""
