"""Readiness probes in the local pod runner (and so the fake cluster's executing kubelet):
a container with a probe is not Ready until the probe passes, with real sockets and files."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from k8sjobs.local.podrunner import PodRunner

from ..waiting import wait_until
from .test_podrunner import Cluster, make_pod

# Listens on the port once GO exists, then runs until STOP exists.
_SERVER = """
import os, socket, sys, time
go, stop, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
while not os.path.exists(go):
    time.sleep(0.02)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen()
while not os.path.exists(stop):
    time.sleep(0.02)
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ready(status: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
    )


def _running(status: dict[str, Any]) -> bool:
    return any("running" in c["state"] for c in status.get("containerStatuses") or [])


async def test_a_pod_is_not_ready_until_its_tcp_port_listens(tmp_path: Path) -> None:
    cluster = Cluster(PodRunner(tmp_path / "pods", kill_grace=1.0))
    go, stop, port = tmp_path / "go", tmp_path / "stop", _free_port()
    container = {
        "name": "server",
        "image": "python",
        "command": [sys.executable, "-c", _SERVER, str(go), str(stop), str(port)],
        "ports": [{"name": "sshd", "containerPort": port}],
        "readinessProbe": {"tcpSocket": {"port": "sshd"}, "periodSeconds": 1},
    }
    run = asyncio.ensure_future(cluster.run(make_pod([container])))
    await wait_until(lambda: any(_running(s) for s in cluster.statuses), "the server runs")
    running = next(s for s in cluster.statuses if _running(s))
    assert not _ready(running)
    assert running["containerStatuses"][0]["ready"] is False
    before = len(cluster.statuses)
    go.touch()
    await wait_until(lambda: _ready(cluster.statuses[-1]), "Ready once the port listens")
    assert not any(_ready(s) for s in cluster.statuses[:before])
    assert cluster.statuses[-1]["containerStatuses"][0]["ready"] is True
    stop.touch()
    final = await asyncio.wait_for(run, 60)
    assert final["phase"] == "Succeeded" and not _ready(final)


async def test_an_exec_probe_decides_readiness_both_ways(tmp_path: Path) -> None:
    cluster = Cluster(PodRunner(tmp_path / "pods", kill_grace=1.0))
    marker, stop = tmp_path / "ready", tmp_path / "stop"
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["/bin/sh", "-c", f'while [ ! -e "{stop}" ]; do sleep 0.05; done'],
        "readinessProbe": {
            "exec": {"command": ["/bin/sh", "-c", f'[ -e "{marker}" ]']},
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
    }
    run = asyncio.ensure_future(cluster.run(make_pod([container])))
    await wait_until(lambda: any(_running(s) for s in cluster.statuses), "the container runs")
    before = len(cluster.statuses)
    marker.touch()
    await wait_until(lambda: _ready(cluster.statuses[-1]), "Ready once the command passes")
    assert not any(_ready(s) for s in cluster.statuses[:before])
    marker.unlink()
    await wait_until(lambda: not _ready(cluster.statuses[-1]), "unready once it fails")
    assert cluster.statuses[-1]["conditions"][2]["reason"] == "ContainersNotReady"
    stop.touch()
    assert (await asyncio.wait_for(run, 60))["phase"] == "Succeeded"


_LONG_HOST = "mpi-workers-0-1" + "-x" * 24  # 63 characters, a hostname's most


@pytest.mark.parametrize(
    ("subdir", "hostname"),
    [("pods", "mpi-workers-0-1"), ("d" * 100 + "/pods", _LONG_HOST)],
    ids=["short", "socket-path-past-108-bytes"],
)
async def test_a_workers_sshd_port_is_its_agent(tmp_path: Path, subdir: str, hostname: str) -> None:
    """Port 2222 of a multi-node pod is its agent (the local sshd): Ready once it serves,
    however long its socket's path (a unix address holds 108 bytes)."""
    cluster = Cluster(PodRunner(tmp_path / subdir, kill_grace=1.0))
    go = tmp_path / "go"
    serve = f'while [ ! -e "{go}" ]; do sleep 0.05; done; exec $K8SJOBS_WORKER_SERVE'
    container = {
        "name": "workers",
        "image": "busybox",
        "command": ["/bin/sh", "-c", serve],
        "readinessProbe": {"tcpSocket": {"port": 2222}, "periodSeconds": 1},
    }
    pod = make_pod([container], name=f"{hostname}-abcde")
    pod["spec"].update(hostname=hostname, subdomain="mpi")
    run = asyncio.ensure_future(cluster.run(pod))
    try:
        await wait_until(lambda: any(_running(s) for s in cluster.statuses), "the worker runs")
        before = len(cluster.statuses)
        go.touch()
        await wait_until(lambda: _ready(cluster.statuses[-1]), "Ready once the agent listens")
        assert not any(_ready(s) for s in cluster.statuses[:before])
        (agent,) = await asyncio.to_thread(lambda: list(tmp_path.rglob(f"{hostname}.sock")))
        assert (len(str(agent).encode()) > 108) == (hostname == _LONG_HOST)
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
