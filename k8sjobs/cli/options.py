"""The options several ``k8sjobs`` commands share, added in one place so they read the same.

Global options (``--state-dir``, ``--backend``, ``--kubeconfig``, ``--context``,
``-n/--namespace``, ``-v``, ``-q``) are added twice: to the top-level parser with their real
defaults, and to each command that uses them with ``default=SUPPRESS``, so that
``k8sjobs -n hpc status`` and ``k8sjobs status -n hpc`` both work and a command's own value,
when given, wins. ``-v`` counts add up wherever they are written.

A study is named the same way everywhere: its file (``k8sjobs status study.yaml``) or
``--study NAME``; with both, ``--study`` names it (as ``run`` renames a study).
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .._handoffimage import HANDOFF_IMAGE
from .._printable import printable

__all__ = [
    "GLOBALS",
    "UsageError",
    "add_globals",
    "add_study",
    "add_target",
    "positive_int",
    "quote",
    "split_study_args",
    "study_name",
    "whole_number",
]


class UsageError(Exception):
    """A mistake on the command line: printed as one ``error:`` line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit code 2, with a
    "did you mean" for a mistyped command or option, pointing to the help of the command
    that was given (``k8sjobs run --help``, not ``k8sjobs --help``)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Parse, refusing what is left over here: argparse hands a subcommand's leftovers
        up to the top parser, whose error then names the wrong command and its help."""
        self._given = list(args) if args is not None else []
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._suggest(extras)}")
        return parsed, extras

    def _suggest(self, extras: Sequence[str]) -> str:
        options = list(self._option_string_actions)
        for extra in extras:
            if extra.startswith("--"):
                close = difflib.get_close_matches(extra.split("=")[0], options, n=1, cutoff=0.7)
                if close:
                    return f"; did you mean {close[0]}?"
        return ""

    def _unknown_options(self) -> list[str]:
        known = self._option_string_actions
        return [
            arg
            for arg in getattr(self, "_given", [])
            if arg.startswith("--")
            and arg != "--"
            and not any(option.startswith(arg.split("=")[0]) for option in known)
        ]

    def error(self, message: str) -> NoReturn:
        unknown = self._unknown_options()
        if unknown and message.startswith("the following arguments are required"):
            # A mistyped option is the likelier cause, and the line a user needs.
            message = f"unrecognized arguments: {' '.join(unknown)}{self._suggest(unknown)}"
        choice = re.match(r"argument (\S+): invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        if choice:
            where, given = choice.group(1), choice.group(2)
            offered = re.findall(r"'([^']*)'", choice.group(3))
            close = difflib.get_close_matches(given, offered, n=1, cutoff=0.5)
            hint = f'; did you mean "{close[0]}"?' if close else ""
            if where.startswith("-"):  # an option's value (-o/--output), not a subcommand
                option = where.split("/")[-1]
                message = f'{option}: "{given}" is not one of {", ".join(offered)}{hint}'
            else:
                message = f'"{given}" is not a command{hint} (commands: {", ".join(offered)})'
        # what was typed is quoted back: its control characters escaped, as print_error does
        self.exit(2, printable(f"error: {self.prog}: {message} (see: {self.prog} --help)") + "\n")


def _namespace(value: str) -> str:
    """Return ``value`` once it passed as a namespace's name (an argparse ``type``)."""
    from ..steps.spec import check_dns_label  # pydantic: when the option is given, not for --help

    try:
        check_dns_label(value, "namespace")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


#: Each global option: its flags and the keyword arguments of ``add_argument``.
GLOBALS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "state_dir": (
        ("--state-dir",),
        {
            "type": Path,
            "default": Path(".k8sjobs"),
            "metavar": "DIR",
            "help": "where runs, logs and local artifacts are kept (default .k8sjobs)",
        },
    ),
    "backend": (
        ("--backend",),
        {
            "choices": ("local", "kubernetes"),
            "default": "local",
            "help": "where steps run: local (the default: processes on this machine) or kubernetes",
        },
    ),
    "kubeconfig": (
        ("--kubeconfig",),
        {
            "default": None,
            "metavar": "FILE",
            "help": "the kubeconfig file of the cluster (default $KUBECONFIG or ~/.kube/config)",
        },
    ),
    "context": (
        ("--context",),
        {
            "default": None,
            "metavar": "NAME",
            "help": "the kubeconfig context to use (default its current context)",
        },
    ),
    "namespace": (
        ("-n", "--namespace"),
        {
            "default": None,
            "type": _namespace,
            "metavar": "NAMESPACE",
            "help": "the Kubernetes namespace (default the context's namespace, else default)",
        },
    ),
    "connect_timeout": (
        ("--connect-timeout",),
        {
            "type": lambda v: _seconds(v, "--connect-timeout"),
            "default": 10.0,
            "metavar": "SECONDS",
            "help": "kubernetes: give up starting after SECONDS without an answer from the API "
            "server, with one line saying why (default 10)",
        },
    ),
    "outage_timeout": (
        ("--outage-timeout",),
        {
            "type": lambda v: _seconds(v, "--outage-timeout"),
            "default": 900.0,
            "metavar": "SECONDS",
            "help": "kubernetes: stop waiting after the API server was unreachable for SECONDS "
            "(the steps keep running; default 900)",
        },
    ),
}
#: The global options of a command that talks to a backend.
BACKEND = (
    "state_dir",
    "backend",
    "kubeconfig",
    "context",
    "namespace",
    "connect_timeout",
    "outage_timeout",
)


def _seconds(value: str, flag: str) -> float:
    """Return ``value`` as a number of seconds above 0, or refuse it naming ``flag``."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"{flag} must be a number of seconds above 0")
    return number


def add_globals(parser: argparse.ArgumentParser, names: Sequence[str], *, top: bool) -> None:
    """Add the global options ``names`` and ``-v``/``-q`` to ``parser``.

    ``top`` is the top-level parser (real defaults); a command's copy suppresses its
    defaults so that a value given before the command survives.
    """
    for name in names:
        flags, kwargs = GLOBALS[name]
        parser.add_argument(
            *flags, dest=name, **{**kwargs, **({} if top else {"default": argparse.SUPPRESS})}
        )
    parser.add_argument(
        "-v",
        "--verbose",
        dest="verbose_top" if top else "verbose",
        action="count",
        default=0,
        help="say what k8sjobs is doing on stderr; -vv for debugging detail",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        dest="quiet_top" if top else "quiet",
        action="store_true",
        default=False,
        help="only errors on stderr",
    )


def add_target(parser: argparse.ArgumentParser, *, volumes: bool) -> None:
    """Add where artifacts go and how pods reach them (``run``, ``render``)."""
    parser.add_argument(
        "--registry",
        default=None,
        metavar="STORE",
        help="artifact store: host:port/prefix of a registry, or oci:/path (the local backend "
        "defaults to an OCI layout in the state dir)",
    )
    parser.add_argument(
        "--plain-http", action="store_true", help="talk HTTP, not HTTPS, to the registry"
    )
    parser.add_argument(
        "--handoff-image",
        default=HANDOFF_IMAGE,
        metavar="IMAGE",
        help="the image that pulls inputs and pushes outputs in the pods (default "
        f"{HANDOFF_IMAGE}; to mirror it: k8sjobs image build)",
    )
    if volumes:
        parser.add_argument(
            "--volume",
            action="append",
            default=[],
            metavar="NAME=DIR",
            help="local backend: the directory for a claim, NFS share (server:/path) or "
            "volume name; repeatable (default: $K8SJOBS_LOCAL_VOLUMES, claims under the "
            "state dir)",
        )


def add_study(parser: argparse.ArgumentParser) -> None:
    """Add ``--study NAME``: the study's name, over its file's."""
    parser.add_argument(
        "--study",
        metavar="NAME",
        default=None,
        help="the study's name (default: the name: field of its file)",
    )


def split_study_args(
    values: Sequence[str], study: str | None = None
) -> tuple[Path | None, list[str]]:
    """Return (the study file, the rest) of a command's positionals.

    The first positional is the study file when it ends in .yaml/.yml or is a file. A slash
    alone makes it one only without ``--study``: step names may hold one (``a/b``, or a
    parameter value ``s[F=data/a.csv]``), and with the study named they must stay reachable.
    """
    if not values:
        return None, []
    first = values[0]
    is_file = first.endswith((".yaml", ".yml")) or Path(first).is_file()
    if is_file or (study is None and "/" in first):
        return Path(first), list(values[1:])
    return None, list(values)


def study_name(args: argparse.Namespace, command: str) -> str:
    """Return the study a command is about: ``--study``, else its file's ``name:``."""
    if args.study:
        return str(args.study)
    if args.study_file is not None:
        from ..study import load_study

        return load_study(args.study_file).name
    raise UsageError(
        f"k8sjobs {command}: name the study: its file (k8sjobs {command} study.yaml) "
        "or --study NAME"
    )


def whole_number(value: str) -> int:
    """Return ``value`` as an int; argparse's error naming it when it is none."""
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None


def positive_int(value: str) -> int:
    """Return ``value`` as an int of at least 1 (an argparse ``type``)."""
    number = whole_number(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return number


def quote(*words: str) -> str:
    """Return a command line a person can paste into a shell (each word shell-quoted)."""
    return " ".join(shlex.quote(w) for w in words)
