"""The study commands' arguments: what ``run``, ``status``, ``logs``, ``cancel``, ``render``
and ``report`` accept, and their help.

Light, as every module that builds the parser: ``k8sjobs --help`` builds all of it, and must
not load what the commands use (rich, pydantic, yaml: studies.py, imported when one runs).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .options import BACKEND, add_study, add_target, positive_int, whole_number

__all__ = ["add_study_commands"]

Common = Callable[[argparse.ArgumentParser, Sequence[str]], None]


def add_study_commands(commands: Any, common: Common) -> None:
    """Add the study commands to ``commands``; ``common(parser, globals)`` adds the globals."""
    run = commands.add_parser(
        "run", help="run a study file", description="Run a study file's steps, in order."
    )
    run.add_argument("study_file", type=Path, metavar="STUDY.yaml", help="the study YAML file")
    run.add_argument(
        "--study",
        "--name",
        dest="study",
        metavar="NAME",
        help="the study's name (default: the name: field of its file)",
    )
    common(run, BACKEND)
    add_target(run, volumes=True)
    run.add_argument(
        "--max-parallel",
        type=positive_int,
        default=None,
        metavar="N",
        help="at most N steps running at once (default: as many as the backend takes)",
    )
    run.add_argument(
        "--cpu",
        type=_positive_float,
        default=None,
        metavar="N",
        help="cores the local backend hands out (default: this machine's); more than it has "
        "oversubscribes it, e.g. to try a multi-node MPI step on a laptop",
    )
    run.add_argument("--keep-failed", action="store_true", help="keep failed Jobs for debugging")
    run.add_argument("--plain", action="store_true", help="plain line output, even on a terminal")
    run.add_argument(
        "--replace",
        action="store_true",
        help="stop a step still running from another spec and run the new one (default: "
        "refuse it); an ended step of another spec is always replaced",
    )
    run.add_argument(
        "--rerun",
        action="append",
        default=[],
        metavar="STEP[,STEP]",
        help="run these steps and their dependents anew, even if their result is recorded",
    )
    run.add_argument(
        "--rerun-all", action="store_true", help="run every step anew (the records are replaced)"
    )
    run.add_argument(
        "--no-cache",
        action="store_true",
        help="neither reuse nor record results: every step runs (docs/reruns.md)",
    )
    run.add_argument(
        "--trace",
        type=Path,
        default=None,
        metavar="FILE",
        help="write one tab-separated row per step to FILE as it ends (docs/observability.md)",
    )
    run.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        metavar="N",
        help="serve Prometheus metrics on 127.0.0.1:N/metrics while the run goes (0: any free "
        "port, said at the start; needs k8sjobs[otel])",
    )
    run.set_defaults(func=_later("_cmd_run"))

    status = commands.add_parser(
        "status",
        usage="k8sjobs status [STUDY.yaml | --study NAME] [STEP ...] [options]",
        help="show the steps of a study",
        description="Show the steps of a study, while it runs or after.",
    )
    _add_selection(status, "only these steps (default all)")
    common(status, BACKEND)
    status.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json", "yaml", "tsv"),
        default="table",
        help="table (the default), wide (more columns), json or yaml (every field, for scripts), "
        "tsv (the trace file's rows, docs/observability.md)",
    )
    status.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="after the steps, print each change as it happens, until every step has ended",
    )
    status.set_defaults(func=_later("_cmd_status"))

    cancel = commands.add_parser(
        "cancel",
        usage="k8sjobs cancel [STUDY.yaml | --study NAME] [STEP ...] [options]",
        help="cancel a study's running steps",
        description="Cancel a study's running steps (from any shell; the run ends them CANCELLED).",
    )
    _add_selection(cancel, "only these steps (default all)")
    common(cancel, BACKEND)
    cancel.set_defaults(func=_later("_cmd_cancel"))

    logs = commands.add_parser(
        "logs",
        help="print a step's log",
        description="Print a step's log.",
        usage="k8sjobs logs [STUDY.yaml | --study NAME] STEP [options]",
    )
    logs.add_argument(
        "words",
        nargs="+",
        metavar="STEP",
        help="the step; the study file may come first (or give --study NAME)",
    )
    add_study(logs)
    common(logs, BACKEND)
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing while the step runs"
    )
    logs.add_argument(
        "-c",
        "--container",
        default=None,
        metavar="NAME",
        help="the container whose log to print (default the step's; k8sjobs-pull or "
        "k8sjobs-push for the artifact transfers)",
    )
    logs.add_argument(
        "--tail", type=_count, default=None, metavar="N", help="only the last N lines"
    )
    logs.add_argument(
        "--index",
        type=_count,
        default=None,
        metavar="N",
        help="a multi-node step's index N (default 0, the launcher: the program's output)",
    )
    logs.set_defaults(func=_later("_cmd_logs"))

    rend = commands.add_parser(
        "render",
        help="print the Kubernetes YAML of a step or study",
        description="Print the Kubernetes objects of a study's steps (or one step's file).",
    )
    rend.add_argument(
        "file", type=Path, metavar="FILE", help="a study file, or a file holding one step"
    )
    add_study(rend)
    common(rend, ("namespace",))
    add_target(rend, volumes=False)
    rend.add_argument(
        "--wait-inputs",
        type=_wait_seconds,
        default=WAIT_INPUTS_DEFAULT,
        metavar="DURATION",
        help="how long each step's pull waits for an input its producer has not pushed yet "
        "(seconds, 1h30m or HH:MM:SS; default 1h; 0: no wait): kubectl apply starts every "
        "Job at once, and this makes a consumer wait for its producer",
    )
    rend.add_argument(
        "--unordered",
        action="store_true",
        help="render anyway a study whose steps wait for others they take no input from "
        "(depends: only), or any with --wait-inputs 0: kubectl apply starts every Job at once",
    )
    rend.set_defaults(func=_later("_cmd_render"))

    report = commands.add_parser(
        "report",
        help="write a study's timeline as HTML",
        description="Write the timeline of a study's last run as one HTML file.",
    )
    report.add_argument(
        "name",
        nargs="?",
        default=None,
        metavar="STUDY",
        help="the study's file, or its name (or give --study NAME)",
    )
    add_study(report)
    common(report, ("state_dir",))
    report.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="the HTML file, - for stdout (default: beside the run record, "
        "STATE_DIR/runs/<study>-<hash>.html)",
    )
    report.set_defaults(func=_later("_cmd_report"))


def _add_selection(parser: argparse.ArgumentParser, steps_help: str) -> None:
    parser.add_argument(
        "words",
        nargs="*",
        metavar="STEP",
        help=f"{steps_help}; the study file may come first (or give --study NAME)",
    )
    add_study(parser)


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} is not a number of cores above 0")
    return number


def _port(value: str) -> int:
    number = _count(value)
    if number > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0..65535; 0: any free port)")
    return number


def _count(value: str) -> int:
    number = whole_number(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is below 0")
    return number


def _later(name: str) -> Callable[[argparse.Namespace], Any]:
    """Return the command ``name`` of studies.py, imported only when it runs."""

    def command(args: argparse.Namespace) -> Any:
        from . import studies

        return getattr(studies, name)(args)

    return command


#: ``render --wait-inputs``'s default: an hour for a producer to run and push, the bound of
#: a consumer's pull (its pod holds its requests meanwhile, and its walltime runs).
WAIT_INPUTS_DEFAULT = 3600.0


def _wait_seconds(value: str) -> float:
    """Return ``--wait-inputs``' DURATION in seconds (0 allowed: no wait)."""
    from ..steps.spec import parse_duration  # pydantic: when the option is given, not for --help

    try:
        duration = parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--wait-inputs: {exc}") from None
    assert duration is not None
    return duration.total_seconds()
