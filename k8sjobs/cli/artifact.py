"""``k8sjobs artifact push|pull|tags|rm``: the artifact commands of the k8sjobs CLI.

Each command's ``func`` returns an exit code; errors print one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._handoffimage import ENV_MAX_BYTES, ENV_MAX_RATIO
from .._printable import printable
from ..errors import ArtifactNotFound, RegistryError
from .options import UsageError

# Only what the parser needs is imported here: ``--help`` builds every command's parser, and
# must not load rich and the artifact stack (aiohttp) that the commands import as they run.
if TYPE_CHECKING:
    from rich.progress import TaskID

    from ..artifacts._limits import PullLimits
    from ..artifacts._store import ArtifactStore
    from ..artifacts._tarball import Compression
    from ..artifacts._transfer import ProgressEvent


class ProgressBars:
    """A rich progress display with one bar per blob, fed by ProgressEvents."""

    def __init__(self, enabled: bool) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            disable=not enabled,
            transient=True,
        )
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> ProgressBars:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def __call__(self, event: ProgressEvent) -> None:
        task = self._tasks.get(event.name)
        if task is None:
            task = self._tasks[event.name] = self._progress.add_task(event.name, total=event.total)
        self._progress.update(task, completed=event.completed, total=event.total)


def _store(args: argparse.Namespace) -> ArtifactStore:
    from ..artifacts._store import open_store

    store = args.store or f"oci:{args.state_dir / 'artifacts'}"
    return open_store(store, plain_http=args.plain_http, ca_file=args.ca_file)


def _parse_annotations(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f'--annotation "{item}": write it key=value.')
        out[key] = value
    return out


async def _push(args: argparse.Namespace) -> None:
    compression: Compression
    compression, _, level = args.compression.partition(":")
    annotations = _parse_annotations(args.annotation)
    with ProgressBars(args.progress) as bars:
        async with _store(args) as store:
            result = await store.push(
                args.reference,
                args.paths,
                artifact_type=args.artifact_type,
                annotations=annotations,
                compression=compression,
                level=int(level) if level else None,
                progress=bars,
            )
    print(
        json.dumps(
            {"reference": result.reference, "digest": result.digest, "pinned": result.pinned}
        )
    )


def _limits(args: argparse.Namespace) -> PullLimits:
    """The environment's limits (as in the pod), with the command line's flags over them."""
    from ..artifacts._limits import PullLimits

    env = PullLimits.from_env()
    return PullLimits(
        args.max_bytes if args.max_bytes is not None else env.max_bytes,
        args.max_ratio if args.max_ratio is not None else env.max_ratio,
    )


async def _pull(args: argparse.Namespace) -> None:
    limits = _limits(args)
    with ProgressBars(args.progress) as bars:
        async with _store(args) as store:
            result = await store.pull(args.reference, args.target, progress=bars, limits=limits)
    for path in result.paths:
        print(_shown(str(path)))


def _require_layout(store: ArtifactStore) -> None:
    """Refuse an OCI layout store that is not there: a mistyped --store would list nothing
    and exit 0, as if it held no tags (a registry answers for itself: NAME_UNKNOWN)."""
    root = getattr(store, "root", None)
    if isinstance(root, Path) and not (root / "oci-layout").is_file():
        raise ArtifactNotFound(
            f"no OCI layout at {root} (no oci-layout file there): name the store a run wrote "
            "its outputs to, --store oci:DIR or --store HOST/PREFIX"
        )


async def _tags(args: argparse.Namespace) -> None:
    async with _store(args) as store:
        _require_layout(store)
        for tag in await store.tags(args.repository):
            print(_shown(tag))


def _shown(name: str) -> str:
    """Return a name from the store as printed: escaped for a terminal (as ``ls`` does: a
    file name or an OCI layout's tag can hold ``ESC]0;...``), the very bytes for a pipe, so
    ``artifact pull ... | xargs`` gets the real names."""
    return printable(name) if sys.stdout.isatty() else name


async def _rm(args: argparse.Namespace) -> None:
    async with _store(args) as store:
        await store.delete(args.reference)


def _check_paths(args: argparse.Namespace) -> None:
    """Refuse a path to push that is not there: the user's mistake, before any transfer."""
    missing = [p for p in args.paths if not os.path.lexists(p)]
    if missing:
        raise UsageError(f"k8sjobs artifact push: {missing[0]}: no such file or directory")


def _runner(
    command: Callable[[argparse.Namespace], Coroutine[Any, Any, None]],
    check: Callable[[argparse.Namespace], None] | None = None,
) -> Callable[[argparse.Namespace], Coroutine[Any, Any, int]]:
    async def run(args: argparse.Namespace) -> int:
        if check is not None:
            check(args)
        try:
            await command(args)
        except RegistryError as exc:
            if isinstance(exc, ValueError):  # a reference or store that cannot be parsed
                raise  # bad input: main prints it, exit code 2
            from .console import print_error

            print_error(str(exc))  # not found, refused, unreachable: exit code 1
            return 1
        return 0

    return run


async def _lineage(args: argparse.Namespace) -> None:
    from ..artifacts.lineage import ro_crate, walk

    async with _store(args) as store:
        tree = await walk(store, args.reference)  # type: ignore[arg-type]
    if args.ro_crate is not None:
        args.ro_crate.mkdir(parents=True, exist_ok=True)
        data = json.dumps(tree.to_json(), indent=2, sort_keys=True)
        (args.ro_crate / "lineage.json").write_text(data + "\n")
        crate = json.dumps(ro_crate(tree), indent=2)
        (args.ro_crate / "ro-crate-metadata.json").write_text(crate + "\n")
    if args.format == "json":
        print(json.dumps(tree.to_json(), indent=2, sort_keys=True))
    else:
        print("\n".join(tree.lines()))


async def _cache_keys(store: ArtifactStore) -> list[str]:
    """Return the step keys recorded in ``store``; say on stderr how many tags of the cache's
    repository are not step keys (skipped, never deleted). A store that is not there is an
    error (exit 1), not an empty cache."""
    from ..artifacts.stepcache import CACHE_REPOSITORY, keys_of_tags

    _require_layout(store)
    try:
        tags = await store.tags(CACHE_REPOSITORY)
    except ArtifactNotFound:
        tags = []
    keys, foreign = keys_of_tags(tags)
    if foreign:
        shown = ", ".join(printable(tag) for tag in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        print(
            f"skipped {len(foreign)} tag{'s' if len(foreign) != 1 else ''} of "
            f"{CACHE_REPOSITORY} that {'are' if len(foreign) != 1 else 'is'} not a step key: "
            f"{shown}{more}",
            file=sys.stderr,
        )
    return keys


async def _cache_ls(args: argparse.Namespace) -> None:
    from ..artifacts.stepcache import Cleared, StepCache, UnreadableRecord

    async with _store(args) as store:
        cache = StepCache(store)  # type: ignore[arg-type]
        for key in await _cache_keys(store):
            try:
                record = await cache.read(key)
            except (ArtifactNotFound, Cleared):
                continue  # deleted since it was listed, or cleared: no record
            except (UnreadableRecord, RegistryError) as exc:
                print(f"{key[:19]}  unreadable (a run ignores it): {printable(str(exc))[:200]}")
                continue
            when = record.finished_at.isoformat() if record.finished_at else "?"
            where = printable(f"{record.study}/{record.step}")
            print(f"{key[:19]}  {where}  {when}  {printable(record.backend)}")


async def _cache_clear(args: argparse.Namespace) -> None:
    from ..artifacts.stepcache import StepCache

    now = datetime.now(UTC)
    async with _store(args) as store:
        cache = StepCache(store)  # type: ignore[arg-type]
        forgot = await cache.clear_all(await _cache_keys(store), now)
    print(f"forgot {len(forgot)} recorded result{'s' if len(forgot) != 1 else ''}")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=None,
        metavar="STORE",
        help='"host[:port][/prefix]" of a registry, or "oci:<dir>" (default the OCI layout '
        "the local backend writes: oci:<state dir>/artifacts)",
    )
    parser.add_argument(
        "--plain-http", action="store_true", help="talk HTTP, not HTTPS, to the registry"
    )
    parser.add_argument(
        "--ca-file", default=None, help="CA bundle to verify the registry's TLS certificate"
    )


def _size(value: str) -> int:
    from ..artifacts._limits import parse_size

    try:
        return parse_size(value, "--max-bytes")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _compression(value: str) -> str:
    kind, _, level = value.partition(":")
    if kind not in ("none", "gzip", "zstd") or (level and not level.isdigit()):
        raise argparse.ArgumentTypeError(
            'use "none", "gzip", "gzip:<level>", "zstd" or "zstd:<level>"'
        )
    return value


def add_artifact_commands(subparsers: Any, common: Any) -> argparse.ArgumentParser:
    """Add ``artifact push|pull|tags|rm`` to an argparse subparsers object; return the group.

    ``common(parser, names)`` adds the global options ``names`` and -v/-q.
    """
    artifact: argparse.ArgumentParser = subparsers.add_parser(
        "artifact",
        help="push, pull, list and remove artifacts",
        description="Push, pull, list and remove artifacts in a registry or an OCI layout.",
    )
    commands = artifact.add_subparsers(dest="artifact_command", required=True, metavar="VERB")

    push = commands.add_parser("push", help="push files and directories as one artifact")
    push.add_argument("reference", help="repository:tag, e.g. study/train:v1")
    push.add_argument("paths", nargs="+", metavar="PATH", help="files and directories to push")
    push.add_argument(
        "--annotation",
        "-a",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an annotation of the manifest, repeatable",
    )
    push.add_argument(
        "--artifact-type",
        default="application/vnd.k8sjobs.artifact.v1",
        metavar="MEDIA_TYPE",
        help="the manifest's artifactType (default %(default)s)",
    )
    push.add_argument(
        "--compression",
        type=_compression,
        default="gzip",
        help='directories: "none", "gzip[:level]" or "zstd[:level]" '
        "(default gzip, its level fitted to the data)",
    )
    push.set_defaults(func=_runner(_push, _check_paths))

    pull = commands.add_parser("pull", help="pull an artifact's files into a directory")
    pull.add_argument("reference", help="repository:tag or repository@digest, e.g. study/train:v1")
    pull.add_argument("target", nargs="?", default=".", help="directory to write into (default .)")
    pull.add_argument(
        "--max-bytes",
        type=_size,
        default=None,
        metavar="SIZE",
        help=f"most the pull may write, e.g. 500G (default ${ENV_MAX_BYTES} or 100G)",
    )
    pull.add_argument(
        "--max-ratio",
        type=float,
        default=None,
        metavar="N",
        help=f"most a compressed directory may expand, times its size "
        f"(default ${ENV_MAX_RATIO} or 200)",
    )
    pull.set_defaults(func=_runner(_pull))

    tags = commands.add_parser("tags", help="list the tags of a repository")
    tags.add_argument("repository", help="the repository, e.g. study/train")
    tags.set_defaults(func=_runner(_tags))

    rm = commands.add_parser("rm", help="delete the manifest a reference names (and its tags)")
    rm.add_argument("reference", help="repository:tag or repository@digest")
    rm.set_defaults(func=_runner(_rm))

    lineage = subparsers.add_parser(
        "lineage",
        help="show where an artifact came from: the steps and inputs that made it",
        description="Walk an output's lineage annotations back to its sources and print "
        "the tree (docs/artifacts.md).",
    )
    lineage.add_argument("reference", help="repository:tag or repository@digest")
    lineage.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text (an indented tree, the default) or json (every fact, for scripts)",
    )
    lineage.add_argument(
        "--ro-crate",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write a Workflow Run RO-Crate of the tree into DIR (for publishing)",
    )
    lineage.set_defaults(func=_runner(_lineage))

    cache = subparsers.add_parser(
        "cache",
        help="list or clear the step cache (recorded results, docs/reruns.md)",
        description="List or clear the step cache: one recorded result per step key, kept "
        "in the store as k8sjobs/cache:<key>.",
    )
    cache_commands = cache.add_subparsers(dest="cache_command", required=True, metavar="VERB")
    cache_ls = cache_commands.add_parser("ls", help="list the recorded results")
    cache_ls.set_defaults(func=_runner(_cache_ls))
    cache_clear = cache_commands.add_parser(
        "clear", help="forget every recorded result (the next run runs every step)"
    )
    cache_clear.set_defaults(func=_runner(_cache_clear))

    for parser in (push, pull, tags, rm, lineage, cache_ls, cache_clear):
        _common(parser)
        common(parser, ("state_dir",))
        parser.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=sys.stderr.isatty(),
            help="show progress bars (default: when stderr is a terminal)",
        )
    return artifact
