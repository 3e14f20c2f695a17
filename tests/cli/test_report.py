"""``k8sjobs report``: the page of a real local run, read in headless Chromium as a user would.

The browser tests run Debian's ``chromium`` (installed by scripts/test) on the report of a
real run: a screenshot (its size, and pixels of the marks' colours: the page is not blank and
the failures are red) and the DOM Chromium built (the table's rows and cells). Without
chromium they skip with the reason, except in CI, where they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from k8sjobs.cli.report import report_html

from .test_cli_commands import k8sjobs, study_file

# Sub-second steps, a failure, a step not run, one that fails before it starts (it asks for
# more cores than any machine has), and a two-step chain whose first step has an output (so
# the step cache keeps its result: the second run reuses it).
STUDY = """
name: seen
steps:
  - name: quick
    script: "true"
  - name: prepare
    script: sleep 0.3; echo x > out.txt
    outputs: {out: out.txt}
  - name: simulate
    depends: [prepare]
    resources: {memory: 64Mi}
    script: sleep 0.2
  - name: broken
    script: echo about to fail; exit 3
  - name: after-broken
    depends: [broken]
    script: echo never
  - name: too-big
    resources: {cores_per_task: 100000}
    script: echo never
"""
NAMES = ["quick", "prepare", "simulate", "broken", "after-broken", "too-big"]
SUB_SECOND = r"\d+ms|\d\.\d\ds"
WINDOW = (1280, 1000)


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: scripts/test installs Debian's chromium")
        pytest.skip("chromium is not installed (apt-get install chromium, or bash scripts/test)")
    return found


def browse(page: Path, work: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    """Open ``page`` in headless Chromium with ``mode`` (--screenshot=..., --dump-dom)."""
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={work / 'chromium-profile'}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        *mode,
        page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def pixels(png: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Return a PNG's width, height and RGB pixels (8-bit RGB or RGBA, as Chromium writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, data, header = 8, b"", b""
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        header = body if kind == b"IHDR" else header
        data += body if kind == b"IDAT" else b""
        at += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    size = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(data), width * size
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            left = line[i - size] if i >= size else 0
            up, corner = previous[i], previous[i - size] if i >= size else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (
                    line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)
                ) & 255
        rows.append(line)
        previous = line
    rgb = [(r[i], r[i + 1], r[i + 2]) for r in rows for i in range(0, stride, size)]
    return width, height, rgb


class Table(HTMLParser):
    """The rows of the page's step tables, each a list of its cells' text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.head: list[str] = []
        self._cell: list[str] | None = None
        self._in_steps = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and ("class", "steps") in attrs:
            self._in_steps += 1
        elif self._in_steps and tag == "tr":
            self.rows.append([])
        elif self._in_steps and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._in_steps:
            self._in_steps -= 1
        elif tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def table(dom: str) -> dict[str, dict[str, str]]:
    """Return the first step table of ``dom``: each step's cells by column name."""
    parser = Table()
    parser.feed(dom)
    head, *rows = parser.rows
    steps: dict[str, dict[str, str]] = {}
    for cells in rows:
        if cells == head:  # the next table (the last complete run) begins
            break
        steps[cells[0]] = dict(zip(head, cells, strict=True))
    return steps


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder where the study ran twice (the second run adopts the first's successes)."""
    folder = tmp_path_factory.mktemp("report")
    study_file(folder, STUDY)
    k8sjobs(folder, "run", "study.yaml", check=1)
    k8sjobs(folder, "report", "study.yaml", "-o", "first.html", check=0)
    k8sjobs(folder, "run", "study.yaml", check=1)
    yield folder


def test_the_report_is_written_beside_the_run_record_not_here(runs: Path) -> None:
    done = k8sjobs(runs, "report", "study.yaml", check=0)
    written = Path(done.stdout.removeprefix("wrote ").strip())
    assert written.parent == Path(".k8sjobs/runs") and written.suffix == ".html"
    assert (runs / written).with_suffix(".json").exists()  # the record it was made from
    assert {p.name for p in runs.iterdir()} == {"study.yaml", ".k8sjobs", "first.html"}
    page = (runs / written).read_text()
    assert page.startswith("<!DOCTYPE html>")
    # Self-contained: no script, nothing to fetch (the SVG namespace is a name, not a fetch).
    assert "<script" not in page and not re.search(r"\b(src|href)=", page)
    assert "url(http" not in page and "@import" not in page


def test_a_report_that_cannot_be_written_says_where_and_what_to_do(runs: Path) -> None:
    done = k8sjobs(runs, "report", "study.yaml", "-o", "no/such/dir/r.html", check=2)
    assert done.stderr == (
        "error: report: cannot write no/such/dir/r.html: No such file or directory; "
        "choose another -o FILE\n"
    )


def test_a_screenshot_of_the_report_shows_its_marks(runs: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    browse(runs / "first.html", tmp_path, f"--screenshot={shot}")
    width, height, rgb = pixels(shot.read_bytes())
    assert (width, height) == WINDOW
    colours = Counter(rgb)
    white = colours[(255, 255, 255)]
    assert white < 0.97 * len(rgb), "the page is (nearly) blank"
    red = sum(n for (r, g, b), n in colours.items() if r > 170 and g < 80 and b < 80)
    green = sum(n for (r, g, b), n in colours.items() if g > 100 and r < 80 and b < 80)
    assert red > 100, "no red mark: the failures are not drawn red"
    assert green > 100, "no green bar: the successes are not drawn"


def test_the_table_chromium_builds_says_what_each_step_did(runs: Path, tmp_path: Path) -> None:
    dom = browse(runs / "first.html", tmp_path, "--dump-dom").stdout
    steps = table(dom)
    assert list(steps) == NAMES
    head = ["step", "state", "reason", "start", "waited", "duration", "requested", "used"]
    assert list(steps["quick"]) == head
    states = {name: row["state"] for name, row in steps.items()}
    assert states == {
        "quick": "succeeded",
        "prepare": "succeeded",
        "simulate": "succeeded",
        "broken": "failed",
        "after-broken": "not run",
        "too-big": "failed before start",
    }
    for name in ("quick", "prepare", "simulate", "broken"):
        assert re.fullmatch(SUB_SECOND, steps[name]["duration"]), steps[name]
        assert re.fullmatch(rf"\d\d:\d\d:\d\d\.\d{{3}} \(\+({SUB_SECOND})\)", steps[name]["start"])
    assert steps["broken"]["reason"] == "the script exited with code 3"
    assert steps["after-broken"]["reason"] == "not run: upstream broken FAILED"
    assert "can never run on this machine" in steps["too-big"]["reason"]
    for name in ("after-broken", "too-big"):
        assert (steps[name]["start"], steps[name]["duration"]) == ("-", "-")
    assert steps["simulate"]["requested"] == "1 cpu, 64Mi"
    assert steps["too-big"]["requested"] == "100000 cpu"
    # What each step that ran used, against its request; "-" for those that never ran.
    used = rf"cpu ({SUB_SECOND}) \([\d.e-]+ cores\), mem [\d.]+\w+ peak.*, wall ({SUB_SECOND})"
    for name in ("quick", "prepare", "simulate", "broken"):
        assert re.fullmatch(used, steps[name]["used"]), steps[name]["used"]
    assert "% of request" in steps["simulate"]["used"]
    assert steps["too-big"]["used"] == steps["after-broken"]["used"] == "-"
    assert "Started " in dom and "6 steps: 3 succeeded, 1 failed, 1 failed before start" in dom


def test_a_rerun_shows_adopted_steps_as_adopted(runs: Path, tmp_path: Path) -> None:
    page = runs / "second.html"
    k8sjobs(runs, "report", "study.yaml", "-o", str(page), check=0)
    try:
        steps = table(browse(page, tmp_path, "--dump-dom").stdout)
    finally:
        page.unlink()
    for name in ("quick", "simulate"):
        assert steps[name]["state"] == "adopted"
        assert steps[name]["reason"] == "succeeded in an earlier run; adopted, not run again"
    assert steps["prepare"]["state"] == "reused"  # from the step cache
    assert steps["prepare"]["reason"].startswith("reused: ")
    for name in ("quick", "prepare", "simulate"):
        assert steps[name]["start"].startswith("earlier, ")
        assert re.fullmatch(SUB_SECOND, steps[name]["duration"])  # the earlier run's
        assert steps[name]["waited"] == "-"
    assert steps["broken"]["state"] == "failed"  # a failure runs again, it is not adopted


def test_a_dead_drivers_run_says_so_and_keeps_the_last_complete_run() -> None:
    complete = {
        "study": "s",
        "started": 100.0,
        "steps": [
            {
                "name": "a",
                "state": "SUCCEEDED",
                "queued": 100.0,
                "started": 100.2,
                "finished": 100.45,
                "ended": 100.45,
            }
        ],
    }
    broken = {
        "study": "s",
        "started": 200.0,
        "steps": [
            {
                "name": "a",
                "state": "RUNNING",
                "queued": 200.0,
                "started": 200.1,
                "finished": None,
                "ended": None,
            }
        ],
        "driver": {"pid": 4242, "host": "lab-7", "alive": False, "last_change": 200.3},
    }
    page = report_html([broken, complete])
    assert "Driver died." in page and "(pid 4242 on lab-7) died before the run ended" in page
    assert "1 step was not seen to end (a)" in page
    assert "not seen to end: the driver died" in page
    assert "The last complete run" in page
    rows = Table()
    rows.feed(page)
    durations = [r[5] for r in rows.rows if r[0] == "a"]
    assert durations == ["200ms", "250ms"]  # running up to the last record; the complete run


def test_a_live_drivers_run_says_it_is_still_going() -> None:
    run = {
        "study": "s",
        "started": 200.0,
        "steps": [{"name": "a", "state": "RUNNING", "queued": 200.0, "started": 200.1}],
        "driver": {"pid": 1, "host": "h", "alive": True, "last_change": 200.2},
    }
    page = report_html([run], now=203.1)
    assert "This run is still going" in page and "Driver died" not in page
    assert ">3.00s<" in page  # its time so far, up to now


@pytest.mark.parametrize(
    ("span", "ticks"),
    [
        (0.004, "0 0.5ms 1ms 1.5ms 2ms 2.5ms 3ms 3.5ms 4ms"),
        (0.3, "0 50ms 100ms 150ms 200ms 250ms 300ms"),
        (2.5, "0 500ms 1s 1.5s 2s 2.5s"),
        (75, "0 10s 20s 30s 40s 50s 1m 1m 10s"),
        (4000, "0 10m 20m 30m 40m 50m 1h"),
    ],
)
def test_the_time_axis_has_round_ticks_at_every_scale(span: float, ticks: str) -> None:
    run = {
        "study": "s",
        "started": 0.0,
        "steps": [
            {
                "name": "a",
                "state": "SUCCEEDED",
                "queued": 0.0,
                "started": 0.0,
                "finished": span,
                "ended": span,
            }
        ],
    }
    page = report_html([run])
    shown = re.findall(r"text-anchor='middle' fill='#616161'>([^<]*)<", page)
    assert " ".join(shown) == ticks


def test_a_run_whose_driver_cannot_be_checked_says_so_not_that_it_died() -> None:
    run = {
        "study": "s",
        "started": 200.0,
        "steps": [{"name": "a", "state": "RUNNING", "queued": 200.0, "started": 200.1}],
        "driver": {"pid": 7, "host": "elsewhere", "alive": None, "last_change": 200.2},
    }
    page = report_html([run])
    assert "Driver died" not in page and "cannot be checked from here" in page
    assert "not seen to end: its driver is elsewhere" in page
