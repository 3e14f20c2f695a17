"""`python -m k8sjobs.testing serve --kubeconfig PATH [--kubelet execute|simulate] [...]`.

Runs a fake cluster in the foreground for hands-on use (kubectl, a driver under
development) until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path

from ._cluster import FakeCluster
from ._kubelet import NodeConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m k8sjobs.testing", description="Run a fake Kubernetes cluster."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve until interrupted")
    serve.add_argument(
        "--kubeconfig",
        type=Path,
        required=True,
        help="where to write the kubeconfig for this cluster",
    )
    serve.add_argument("--kubelet", choices=("simulate", "execute"), default="simulate")
    serve.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    serve.add_argument("--tls", action="store_true", help="serve HTTPS with a test CA and token")
    serve.add_argument("--cpu", default="64", help="node cpu capacity")
    serve.add_argument("--memory", default="256Gi", help="node memory capacity")
    serve.add_argument("--gpu", type=int, default=0, help="node nvidia.com/gpu capacity")
    serve.add_argument(
        "--jobset",
        action="store_true",
        help="install the JobSet CRD: serve jobset.x-k8s.io and emulate its controller",
    )
    serve.add_argument(
        "--kueue",
        action="store_true",
        help="emulate Kueue: its API group, webhook, queues, admission and preemption",
    )
    serve.add_argument(
        "--namespace-linger",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="keep a deleted namespace Terminating this long at least, as a real cluster "
        "does (creating it again meanwhile: 409 'object is being deleted'); default 0",
    )
    return parser


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return value


async def _serve(args: argparse.Namespace) -> None:
    node = NodeConfig(cpu=args.cpu, memory=args.memory, gpu=args.gpu)
    async with FakeCluster(
        args.kubelet,
        node=node,
        tls=args.tls,
        port=args.port,
        namespace_linger=args.namespace_linger,
        kueue=args.kueue,
    ) as cluster:
        if args.jobset:
            await cluster.install_jobset()
        cluster.write_kubeconfig(args.kubeconfig)
        print(f"fake cluster at {cluster.url}; kubeconfig written to {args.kubeconfig}", flush=True)
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run the cluster until Ctrl-C."""
    args = _parser().parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
