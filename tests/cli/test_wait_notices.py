"""A wait is said when it is real, and a cleared one is history, not a warning.

On Kubernetes a first pod's FailedMount of the step's own ConfigMap (created just after its
Job, by design) is no news once the step went on; any other wait that cleared is shown as
history. Locally a step waits a moment for a slot (WaitingForResources): only a wait that
lasts ``WAIT_NOTICE`` is said.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from k8sjobs.cli.statustable import Progress
from k8sjobs.cli.studies import _events
from k8sjobs.events import StepEvent
from k8sjobs.handle import StepHandle
from k8sjobs.local import LocalBackend
from k8sjobs.state import StepResult, StepState

from ..waiting import wait_until

OWN = "st-a-1234abcd"
MOUNT = StepEvent(
    None, "st-a-1234abcd-x", "FailedMount",
    f'MountVolume.SetUp failed for volume "script" : configmap "{OWN}" not found', "Wait",
)  # fmt: skip
NODE = StepEvent(None, "st-a-1234abcd-x", "FailedScheduling", "0/1 nodes are available", "Wait")
WAITING = (StepState.PENDING, StepState.PREEMPTED)


@pytest.mark.parametrize("state", list(StepState))
def test_a_wait_that_cleared_is_history_and_the_own_configmap_mount_is_no_news(
    state: StepState, tmp_path: Path
) -> None:
    backend = LocalBackend(state_dir=tmp_path)
    handle = StepHandle(name="a", study="st", object_name=OWN, namespace="", backend=backend)
    handle.report(StepResult(name="a", state=state))
    for event in (MOUNT, NODE):
        handle.add_event(event)
    said = _events(handle)
    if state in WAITING:  # still waiting: both are why, and it waits until they clear
        assert len(said) == 2 and all("the step waits until it clears" in s for s in said)
    else:
        assert said == ["0/1 nodes are available (it cleared; the step went on)"]


async def test_a_local_step_that_starts_at_once_prints_no_wait_and_a_real_wait_is_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress = Progress(["a", "b"], Console(file=io.StringIO()), live=False)
    with progress:
        waiting = StepResult(name="a", reason="WaitingForResources", message="2 of 2 slots busy")
        progress.update(waiting)
        progress.update(StepResult(name="a", state=StepState.RUNNING))
        assert "WaitingForResources" not in capsys.readouterr().out
        assert not progress._waits  # the notice was dropped, not merely not yet printed
        progress.update(waiting.evolve(name="b"))
        out: list[str] = []

        def said() -> bool:
            out.append(capsys.readouterr().out)
            return "b: PENDING (WaitingForResources: 2 of 2 slots busy)" in "".join(out)

        await wait_until(said, "the real wait is said")


def test_a_preempted_step_says_kueues_words_then_its_quota_wait_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`k8sjobs run` lines: PREEMPTED with Kueue's message; waiting again is one line, and a
    new message under the same reason is not another."""
    progress = Progress(["low"], Console(file=io.StringIO()), live=False)
    evicted = StepResult(
        name="low",
        state=StepState.PREEMPTED,
        reason="Preempted",
        message="Preempted to accommodate a workload (UID: 3a7c)",
        evictions=1,
    )
    quota = StepResult(
        name="low", reason="WaitingForQuota", message="insufficient quota", evictions=1
    )
    with progress:
        progress.update(StepResult(name="low", state=StepState.RUNNING))
        progress.update(evicted)
        assert "low: PREEMPTED (Preempted to accommodate a workload (UID: 3a7c))" in (
            capsys.readouterr().out
        )
        progress.update(quota)
        progress.update(quota.evolve(message="insufficient quota, again"))
    out = capsys.readouterr().out
    assert out.count("low: PENDING (WaitingForQuota: insufficient quota") == 1


def _drawn(progress: Progress) -> str:
    out = Console(file=io.StringIO(), width=160)
    out.print(progress.view)
    assert isinstance(out.file, io.StringIO)
    return out.file.getvalue()


async def test_the_live_table_shows_a_wait_only_once_it_is_real() -> None:
    """The live table's reason cell said a short wait (WaitingForResources for 0.1 s) the
    plain lines no longer print; it says it only after ``WAIT_NOTICE`` of the same wait."""
    console = Console(file=io.StringIO(), force_terminal=True, width=160)
    progress = Progress(["a", "b"], console, live=True)
    with progress:
        waiting = StepResult(name="a", reason="WaitingForResources", message="2 of 2 slots busy")
        progress.update(waiting)
        assert "slots busy" not in _drawn(progress)
        progress.update(StepResult(name="a", state=StepState.RUNNING))
        assert not progress._waits and not progress.view.unsaid
        progress.update(waiting.evolve(name="b"))
        assert "slots busy" not in _drawn(progress)
        await wait_until(lambda: "2 of 2 slots busy" in _drawn(progress), "the real wait")


@pytest.mark.parametrize(("reason", "shown"), [("ContainerCreating", False), ("FailedMount", True)])
def test_a_pending_steps_own_configmap_mount_is_shown_only_once_it_is_a_wait(
    reason: str, shown: bool, tmp_path: Path
) -> None:
    """Within CONFIGMAP_WINDOW the judge reads the mount as the step's start
    (ContainerCreating): status lists no warning; past it (FailedMount), it is the wait."""
    backend = LocalBackend(state_dir=tmp_path)
    handle = StepHandle(name="a", study="st", object_name=OWN, namespace="", backend=backend)
    handle.report(StepResult(name="a", reason=reason, message=MOUNT.message))
    handle.add_event(MOUNT)
    assert _events(handle) == ([MOUNT.describe()] if shown else [])
