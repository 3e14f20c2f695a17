"""The ``k8sjobs`` command: run, watch and inspect studies from a shell.

How to add a command or a flag, the same way as the others:

- A command lives in the module of its group (``studyargs.py``: run, status, logs, cancel,
  render, report, whose functions are in ``studies.py``; ``artifact.py``; ``rbac.py``;
  ``image.py``). Its ``add_*`` function makes the subparser, with a ``help=`` on the parser
  and on every argument, and calls ``common(parser, names)`` with the global options it uses
  (``options.GLOBALS``: state_dir, backend, kubeconfig, context, namespace;
  ``options.BACKEND`` for all of them); ``common`` also adds ``-v``/``-q``.
  ``set_defaults(func=...)`` names a function that takes the arguments and returns the exit
  code (async is fine).
- The modules that build the parser import only light things at their top (the standard
  library, options.py, errors): ``k8sjobs --help`` builds every command's parser, and loads
  nothing of what the commands use (rich, pydantic, yaml, the artifact stack) until one
  runs; a default its help shows lives in a light module (``_handoffimage.py``).
  tests/cli/test_cli_process_edges.py checks every command's ``--help``.
- A study command names its study with ``options.add_study`` (``--study NAME``) and/or the
  study file as its first positional (``options.split_study_args``, ``options.study_name``).
- A mistake raises ``options.UsageError`` (or a K8sJobsError): one ``error:`` line, exit 2.
- A new fact about a step in ``status``: one ``Field`` in ``statustable.FIELDS``.
- Then document the option in docs/cli.md: tests/cli/test_cli_reference.py checks that
  every option of the parser is there.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Coroutine, Sequence

from .._version import __version__
from ..errors import ClusterUnreachable, K8sJobsError
from .artifact import add_artifact_commands
from .exits import closed_pipe, interrupted
from .image import add_image_commands
from .options import BACKEND, Parser, UsageError, add_globals
from .rbac import add_rbac_command
from .studyargs import add_study_commands

__all__ = ["EXIT_CODES", "build_parser", "main"]

EXIT_CODES = """\
exit codes:
  0    every step succeeded (status: every step shown succeeded)
  1    a step did not succeed, nothing was found, or the cluster cannot be used
  2    bad input: the study file, an option, a file that is not there
  130  interrupted (Ctrl-C); running steps were cancelled
  141  stdout was closed by its reader (| head): the output stopped there, quietly
"""

EXAMPLES = """\
examples:
  k8sjobs run examples/pipeline/study.yaml
  k8sjobs status examples/pipeline/study.yaml -o wide
  k8sjobs logs --study pipeline aggregate
  k8sjobs cancel --study pipeline
  k8sjobs render examples/pipeline/study.yaml --registry registry.example:5000/k8sjobs
  k8sjobs report pipeline -o timeline.html
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the k8sjobs command line; return its exit code."""
    args = build_parser().parse_args(argv)
    _configure_logging(
        args.verbose_top + getattr(args, "verbose", 0), args.quiet_top or getattr(args, "quiet", 0)
    )
    try:
        outcome = args.func(args)
        if isinstance(outcome, Coroutine):
            import asyncio  # most of what the parser would load: --help never gets here

            outcome = asyncio.run(outcome)
        return int(outcome)
    except KeyboardInterrupt:
        return interrupted()
    except BrokenPipeError:  # before OSError: a reader that left is no error of the user
        return closed_pipe()
    except ClusterUnreachable as exc:  # not the user's input: the cluster is not there
        return _failed(exc, 1)
    except (UsageError, K8sJobsError, ValueError, OSError) as exc:  # pydantic's too: ValueErrors
        return _failed(exc, 2)


def _failed(exc: Exception, code: int) -> int:
    """Print ``exc`` as the command's one ``error:`` line; return ``code``."""
    from .console import print_error  # rich: once a command ran, never for --help

    print_error(str(exc))
    return code


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of every command (docs/cli.md is checked against it)."""
    parser = Parser(
        prog="k8sjobs",
        description="Run, watch and inspect studies of Kubernetes Jobs (or local processes).",
        epilog=EXAMPLES + "\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"k8sjobs {__version__}")
    add_globals(parser, BACKEND, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sub: argparse.ArgumentParser, names: Sequence[str] = ()) -> None:
        sub.epilog = EXIT_CODES
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
        add_globals(sub, names, top=False)

    add_study_commands(commands, common)
    add_artifact_commands(commands, common)
    add_rbac_command(commands, common)
    add_image_commands(commands, common)
    return parser


def _configure_logging(verbose: int, quiet: bool) -> None:
    """Send the ``k8sjobs.*`` loggers to stderr: warnings by default, -v info, -vv debug."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO)[min(verbose, 1)]
    if verbose >= 2:
        level = logging.DEBUG
    global _handler
    logger = logging.getLogger("k8sjobs")
    logger.setLevel(level)
    if _handler is not None:  # main() called again in one process (tests, notebooks)
        logger.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
    logger.addHandler(_handler)


_handler: logging.Handler | None = None
