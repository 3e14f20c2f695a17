"""``k8sjobs image build|commands``: build or mirror the handoff image.

The commands import what they use as they run: ``--help`` builds every command's parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._handoffimage import DEFAULT_BASE, DEFAULT_PLATFORMS

__all__ = ["add_image_commands", "handoff_requirements"]


def add_image_commands(commands: Any, common: Any) -> None:
    """Add ``image build`` and ``image commands``; ``common`` adds -v/-q to a parser."""
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
        "--wheel",
        type=_wheel_file,
        metavar="PATH",
        help="the k8sjobs wheel to install (default: a wheel built from the source this "
        "k8sjobs runs from, else k8sjobs of this version from the index)",
    )
    build.add_argument(
        "--requirement",
        action="append",
        metavar="REQ",
        help="what pip installs instead, repeatable: a requirement or a wheel file",
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


def _wheel_file(value: str) -> Path:
    """Return ``value`` as the absolute path of an existing .whl file (an argparse type)."""
    path = Path(value)
    if path.suffix != ".whl" or not path.is_file():
        raise argparse.ArgumentTypeError(f"{value}: no such wheel file (a .whl)")
    return path.resolve()


async def handoff_requirements(
    wheel: Path | None, requirements: Sequence[str] | None, scratch: Path
) -> tuple[str, ...]:
    """Return what pip installs into the image: ``requirements``, else ``wheel``, else a
    wheel built (into ``scratch``) from the source k8sjobs runs from, else the release of
    this version (only an installed wheel is that release)."""
    import asyncio

    from ..artifacts.image import ImageSpec, build_wheel, source_checkout

    if requirements:
        return tuple(requirements)
    if wheel is not None:
        return (str(wheel),)
    source = await asyncio.to_thread(source_checkout)
    if source is not None:
        return (str(await build_wheel(source, scratch)),)
    return ImageSpec().requirements


async def _cmd_build(args: argparse.Namespace) -> int:
    import tempfile

    from ..artifacts.image import ImageSpec, Platform, build_image

    defaults = ImageSpec()
    platforms = (
        tuple(Platform.parse(p) for p in args.platform) if args.platform else defaults.platforms
    )
    with tempfile.TemporaryDirectory(prefix="k8sjobs-wheel-") as scratch:
        spec = ImageSpec(
            base=args.base,
            platforms=platforms,
            requirements=await handoff_requirements(args.wheel, args.requirement, Path(scratch)),
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
    from ..artifacts.image import Platform, build_commands

    for platform in args.platform or ():
        Platform.parse(platform)  # refuse what the commands could not build
    print(build_commands(args.destination, args.platform or DEFAULT_PLATFORMS))
    return 0
