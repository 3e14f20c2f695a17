"""``k8sjobs image build|commands``: build or mirror the handoff image."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_image_commands"]


def add_image_commands(commands: Any, common: Any) -> None:
    """Add ``image build`` and ``image commands``; ``common`` adds -v/-q to a parser."""
    from ..artifacts.image import DEFAULT_BASE, DEFAULT_PLATFORMS

    image = commands.add_parser(
        "image",
        help="build or mirror the handoff image",
        description="Build the handoff image (the pods' artifact pull and push) without "
        "Docker, or print the commands that build it with docker, buildah or kaniko.",
    )
    verbs = image.add_subparsers(dest="verb", required=True, metavar="VERB")
    build = verbs.add_parser(
        "build", help="build the handoff image without Docker and push it to a registry"
    )
    build.add_argument(
        "--push",
        required=True,
        metavar="REGISTRY/REPO:TAG",
        help="the registry, repository and tag to push the built image to",
    )
    build.add_argument("--base", default=DEFAULT_BASE, help=f"base image (default {DEFAULT_BASE})")
    build.add_argument(
        "--platform",
        action="append",
        metavar="OS/ARCH",
        help=f"platform to build, repeatable (default {' and '.join(DEFAULT_PLATFORMS)})",
    )
    build.add_argument(
        "--requirement",
        action="append",
        metavar="REQ",
        help="what pip installs, repeatable: a requirement or a wheel file "
        "(default k8sjobs of this version)",
    )
    build.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra argument for pip install, repeatable (write --pip-arg=--flag)",
    )
    build.add_argument(
        "--python-version", metavar="X.Y", help="the base's Python, when it does not say"
    )
    build.add_argument(
        "--plain-http", action="store_true", help="talk HTTP, not HTTPS, to the destination"
    )
    build.add_argument(
        "--base-plain-http",
        action="store_true",
        help="talk HTTP, not HTTPS, to the base's registry",
    )
    build.set_defaults(func=_cmd_build)
    printer = verbs.add_parser(
        "commands", help="print the docker, buildah and kaniko commands that build it"
    )
    printer.add_argument(
        "destination", metavar="REGISTRY/REPO:TAG", help="the image the commands build"
    )
    printer.add_argument(
        "--platform", action="append", metavar="OS/ARCH", help="platform, repeatable"
    )
    printer.set_defaults(func=_cmd_commands)
    for parser in (build, printer):
        common(parser, ())


async def _cmd_build(args: argparse.Namespace) -> int:
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


def _cmd_commands(args: argparse.Namespace) -> int:
    from ..artifacts.image import DEFAULT_PLATFORMS, Platform, build_commands

    for platform in args.platform or ():
        Platform.parse(platform)  # refuse what the commands could not build
    print(build_commands(args.destination, args.platform or DEFAULT_PLATFORMS))
    return 0
