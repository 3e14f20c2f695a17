"""Helpers shared by the tests/kube modules: steps the simulated kubelet runs, sessions."""

from __future__ import annotations

from pathlib import Path

from k8sjobs.handle import StepHandle
from k8sjobs.session import Session
from k8sjobs.steps.spec import Step
from k8sjobs.testing import FakeCluster

FAKE = "fake.k8sjobs.io/"


def step(name: str, *, duration: float = 0.05, **fields: object) -> Step:
    """Return a Step the simulated kubelet runs for ``duration`` seconds."""
    notes = {f"{FAKE}duration": str(duration), **fields.pop("annotations", {})}  # type: ignore[dict-item]
    return Step(name=name, script="echo hi", annotations=notes, **fields)


def session(cluster: FakeCluster, tmp_path: Path, study: str = "s", **options: object) -> Session:
    return Session(
        study=study,
        kubeconfig=cluster.kubeconfig_path,
        log_dir=tmp_path / "logs",
        options={"pending_grace": 0.5, **options},
    )


def orphans(cluster: FakeCluster) -> list[str]:
    return [
        c["metadata"]["name"]
        for c in cluster.objects("configmaps", "default")
        if not c["metadata"].get("ownerReferences") and c["metadata"]["name"] != "kube-root-ca.crt"
    ]


def count_terminal(handles: list[StepHandle]) -> dict[str, int]:
    """Count, per handle, how many terminal notifications its listeners received."""
    seen = {h.name: 0 for h in handles}

    def note(handle: StepHandle) -> None:
        if handle.done:
            seen[handle.name] += 1

    for handle in handles:
        handle.add_listener(note)
    return seen
