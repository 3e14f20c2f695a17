"""The ``k8sjobs`` command: run, watch and inspect studies from a shell.

    k8sjobs run examples/pipeline/study.yaml --backend local
    k8sjobs status --study pipeline
    k8sjobs logs --study pipeline aggregate
    k8sjobs cancel --study pipeline
    k8sjobs render examples/pipeline/study.yaml | kubectl apply -f -
    k8sjobs report pipeline -o timeline.html

Exit codes: 0 every step succeeded, 1 a step did not, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from ..errors import K8sJobsError, StudyError
from ..render.manifests import HANDOFF_IMAGE, Target, render
from ..render.sshkey import key_for
from ..session import Session
from ..steps.spec import Step
from ..study import StudyRun, load_study, parse_study, read_study_text, read_yaml
from .artifact import add_artifact_commands
from .rbac import add_rbac_command
from .statustable import Progress, status_table

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the k8sjobs command line; return its exit code."""
    args = _parser().parse_args(argv)
    try:
        outcome = args.func(args)
        return int(asyncio.run(outcome) if asyncio.iscoroutine(outcome) else outcome)
    except KeyboardInterrupt:
        return 130
    except (K8sJobsError, ValidationError, ValueError, OSError) as exc:
        error = Text("error: ", style="bold red").append(str(exc))
        Console(stderr=True, soft_wrap=True).print(error, highlight=False)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="k8sjobs", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(".k8sjobs"),
        help="where runs, logs and local artifacts are kept (default .k8sjobs)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a study file")
    run.add_argument("study", type=Path, help="the study YAML file")
    _add_target(run)
    run.add_argument("--max-parallel", type=int, default=None, help="steps running at once")
    run.add_argument(
        "--cpu",
        type=float,
        default=None,
        help="cores the local backend hands out (default: this machine's); more than it has "
        "oversubscribes it, e.g. to try a multi-node MPI step on a laptop",
    )
    run.add_argument("--name", help="study name (default: the file's name field)")
    run.add_argument("--keep-failed", action="store_true", help="keep failed Jobs for debugging")
    run.add_argument("--plain", action="store_true", help="plain line output, even on a terminal")
    run.add_argument(
        "--replace",
        action="store_true",
        help="run every step anew (default: adopt steps that succeeded with the same spec)",
    )
    run.set_defaults(func=_cmd_run)

    for name, helptext, func in (
        ("status", "show the steps of a study", _cmd_status),
        ("cancel", "cancel a study's running steps", _cmd_cancel),
    ):
        sub = commands.add_parser(name, help=helptext)
        sub.add_argument("--study", required=True, help="the study name")
        sub.add_argument("steps", nargs="*", help="only these steps")
        _add_target(sub)
        sub.set_defaults(func=func)

    logs = commands.add_parser("logs", help="print a step's log")
    logs.add_argument("--study", required=True)
    logs.add_argument("step")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("--container", default=None)
    logs.add_argument("--tail", type=int, default=None, metavar="N", help="the last N lines")
    _add_target(logs)
    logs.set_defaults(func=_cmd_logs)

    rend = commands.add_parser("render", help="print the Kubernetes YAML of a step or study")
    rend.add_argument("file", type=Path, help="a study file, or a file holding one step")
    rend.add_argument("--namespace", default="default")
    rend.add_argument("--registry", help="artifact store for steps with inputs or outputs")
    rend.add_argument("--study", help="study name (default: the file's)")
    rend.add_argument("--handoff-image", default=HANDOFF_IMAGE, help="the handoff image to use")
    rend.set_defaults(func=_cmd_render)

    report = commands.add_parser("report", help="write a study's timeline as HTML")
    report.add_argument("study", help="the study name or study file")
    report.add_argument("-o", "--output", type=Path, help="HTML file (default <study>.html)")
    report.set_defaults(func=_cmd_report)

    add_artifact_commands(commands)
    add_rbac_command(commands)
    _add_image_commands(commands)
    return parser


def _add_image_commands(commands: Any) -> None:
    from ..artifacts.image import DEFAULT_BASE, DEFAULT_PLATFORMS

    image = commands.add_parser("image", help="build or mirror the handoff image")
    verbs = image.add_subparsers(dest="verb", required=True)
    build = verbs.add_parser(
        "build", help="build the handoff image without Docker and push it to a registry"
    )
    build.add_argument("--push", required=True, metavar="REGISTRY/REPO:TAG", help="where to")
    build.add_argument("--base", default=DEFAULT_BASE, help=f"base image (default {DEFAULT_BASE})")
    build.add_argument(
        "--platform",
        action="append",
        help=f"platform to build, repeatable (default {' and '.join(DEFAULT_PLATFORMS)})",
    )
    build.add_argument(
        "--requirement",
        action="append",
        help="what pip installs, repeatable: a requirement or a wheel file "
        "(default k8sjobs of this version)",
    )
    build.add_argument("--pip-arg", action="append", default=[], help="extra pip argument")
    build.add_argument("--python-version", help="the base's Python, when it does not say")
    build.add_argument("--plain-http", action="store_true", help="HTTP to the destination")
    build.add_argument("--base-plain-http", action="store_true", help="HTTP to the base's")
    build.set_defaults(func=_cmd_image_build)
    commands_ = verbs.add_parser(
        "commands", help="print the docker, buildah and kaniko commands that build it"
    )
    commands_.add_argument("destination", metavar="REGISTRY/REPO:TAG")
    commands_.add_argument("--platform", action="append", help="platform, repeatable")
    commands_.set_defaults(func=_cmd_image_commands)


async def _cmd_image_build(args: argparse.Namespace) -> int:
    from ..artifacts.image import ImageSpec, Platform, build_image

    defaults = ImageSpec()
    spec = ImageSpec(
        base=args.base,
        platforms=tuple(Platform.parse(p) for p in args.platform)
        if args.platform
        else defaults.platforms,
        requirements=tuple(args.requirement or defaults.requirements),
        pip_args=tuple(args.pip_arg),
        python_version=args.python_version,
    )
    digest = await build_image(
        args.push, spec, plain_http=args.plain_http, base_plain_http=args.base_plain_http
    )
    print(f"pushed {args.push}@{digest}")
    print(f'use it: Session(handoff_image="{args.push}@{digest}")')
    return 0


def _cmd_image_commands(args: argparse.Namespace) -> int:
    from ..artifacts.image import DEFAULT_PLATFORMS, build_commands

    print(build_commands(args.destination, args.platform or DEFAULT_PLATFORMS))
    return 0


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=("local", "kubernetes"),
        default="local",
        help="where steps run (default local: processes on this machine)",
    )
    parser.add_argument("--namespace", default=None)
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--context", default=None)
    parser.add_argument(
        "--registry", default=None, help="artifact store: host:port/prefix or oci:/path"
    )
    parser.add_argument("--plain-http", action="store_true", help="talk HTTP to the registry")
    parser.add_argument(
        "--handoff-image",
        default=HANDOFF_IMAGE,
        help="the image that pulls inputs and pushes outputs in the pods (default "
        f"{HANDOFF_IMAGE}; a mirror: see `k8sjobs image build`)",
    )
    parser.add_argument(
        "--volume",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="local backend: the directory for a claim, NFS share (server:/path) or volume "
        "name; repeatable (default: $K8SJOBS_LOCAL_VOLUMES, claims under the state dir)",
    )


def _session(args: argparse.Namespace, study: str) -> Session:
    return Session(
        study=study,
        backend=args.backend,
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        context=args.context,
        store=args.registry,
        plain_http=args.plain_http,
        handoff_image=args.handoff_image,
        log_dir=args.state_dir / "logs",
        keep_failed=getattr(args, "keep_failed", False),
        options=_local_options(args) if args.backend == "local" else None,
    )


def _local_options(args: argparse.Namespace) -> dict[str, object]:
    """Return the LocalBackend's options from the command line."""
    options: dict[str, object] = {"state_dir": args.state_dir}
    if getattr(args, "cpu", None) is not None:
        options["cpu"] = args.cpu
    if args.volume:
        from ..local._volumedirs import parse_volume_map  # the local stack only when it runs

        options["volumes"] = parse_volume_map(",".join(args.volume), "--volume")
    return options


async def _cmd_run(args: argparse.Namespace) -> int:
    study = load_study(args.study, name=args.name)
    console = Console(soft_wrap=True, highlight=False)
    names = [s.name for s in study.steps]
    display = Progress(names, console, live=console.is_terminal and not args.plain)
    async with _session(args, study.name) as session:
        run = StudyRun(
            study,
            session,
            max_parallel=args.max_parallel,
            on_change=lambda record: display.update(record.result),
            replace=args.replace,
        )
        run.record_to(args.state_dir / "runs")
        try:
            with display:
                results = await run.run()
        finally:
            path = run.save(args.state_dir / "runs")
            display.summary([r.result for r in run.records.values()], study.name, path)
    return 0 if all(r.ok for r in results) else 1


async def _attach(args: argparse.Namespace) -> tuple[Session, list[Any]]:
    session = _session(args, args.study)
    try:
        await session.start()
        handles = await session.attach(args.study)
    except BaseException:
        await session.aclose()
        raise
    only = getattr(args, "steps", None)  # `logs` names one step, not a list
    if only:
        handles = [h for h in handles if h.name in only]
    return session, handles


async def _cmd_status(args: argparse.Namespace) -> int:
    session, handles = await _attach(args)
    try:
        if not handles:
            print(f'study "{args.study}": no steps found', file=sys.stderr)
            return 1
        Console().print(status_table([h.result for h in handles]))
        for handle in handles:  # each failed, evicted or deleted pod, and what it cost
            for event in handle.events:
                print(f"  {handle.name}: {event.describe()}")
        return 0 if all(h.result.ok for h in handles) else 1
    finally:
        await session.aclose()


async def _cmd_cancel(args: argparse.Namespace) -> int:
    session, handles = await _attach(args)
    try:
        live = [h for h in handles if not h.done]
        await asyncio.gather(*(h.cancel() for h in live))
        for handle in live:
            print(f"{handle.name}: cancelled")
        if not live:
            print(f'study "{args.study}": nothing running to cancel')
        return 0
    finally:
        await session.aclose()


async def _cmd_logs(args: argparse.Namespace) -> int:
    session, handles = await _attach(args)
    try:
        found = [h for h in handles if h.name == args.step]
        if not found:
            names = ", ".join(h.name for h in handles) or "none"
            print(
                f'study "{args.study}" has no step "{args.step}" (steps: {names})', file=sys.stderr
            )
            return 1
        handle = found[0]
        await _print_log(handle, args)
        return 0
    finally:
        await session.aclose()


async def _print_log(handle: Any, args: argparse.Namespace) -> None:
    """Write the step's log to stdout, in bounded chunks where the backend can stream it."""
    chunks = getattr(handle.backend, "log_chunks", None)  # the local backend's log files
    if chunks is None:
        if args.follow:
            async for line in handle.stream_logs(container=args.container):
                print(line, flush=True)
        else:
            sys.stdout.write(await handle.logs(container=args.container, tail=args.tail))
        return
    sys.stdout.flush()
    out = sys.stdout.buffer
    async for chunk in chunks(handle, container=args.container, tail=args.tail, follow=args.follow):
        out.write(chunk)
        if args.follow:
            out.flush()
    out.flush()


def _cmd_render(args: argparse.Namespace) -> int:
    text = read_study_text(args.file)  # bounded and UTF-8, as for a run
    data, _lines = read_yaml(text, str(args.file))
    if isinstance(data, dict) and "steps" in data:
        study = parse_study(text, base_dir=args.file.parent, source=str(args.file), name=args.study)
        steps, name = list(study.steps), study.name
    elif isinstance(data, dict):
        steps, name = [Step.model_validate(data)], args.study or "default"
    else:
        raise StudyError(f"{args.file}: a step file is a mapping of step fields (name, script)")
    target = Target(
        study=name,
        namespace=args.namespace,
        store=args.registry,
        handoff_image=args.handoff_image,
    )
    # A multi-node step gets a fresh key pair in its Secret, as when a Session submits it.
    rendered = (render(step, target, ssh_key=key_for(step)) for step in steps)
    sys.stdout.write("---\n".join(m.to_yaml() for m in rendered))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from ..runrecord import read_run
    from .report import timeline_html

    name = args.study
    if name.endswith((".yaml", ".yml")) and Path(name).exists():
        name = load_study(name).name
    runs = args.state_dir / "runs"
    run = read_run(runs, name)
    if run is None:
        print(f'no recorded run of study "{name}" in {runs}; run it first', file=sys.stderr)
        return 1
    output = args.output or Path(f"{name}.html")
    output.write_text(timeline_html(run))
    print(f"wrote {output}")
    return 0
