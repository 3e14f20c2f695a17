"""OOM retries that grow (``retry_oom``): the same on the local backend and the fake cluster.

The step holds 200 MiB until it is killed on its first attempt (a marker file says which
attempt it is, so the first never ends on its own: no race with the memory limit's check),
and exits at once on the next; 128Mi is too little, 256Mi enough.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pydantic
import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs import Session, Step, StepState
from k8sjobs.local import LocalBackend
from k8sjobs.steps.spec import MAX_OOM_ATTEMPTS
from k8sjobs.testing import ControllerConfig, FakeCluster

MIB = 1024 * 1024
HOG = """
import os, pathlib, time
marker = pathlib.Path(os.environ["MARKER"])
first = not marker.exists()
marker.touch()
block = b"x" * (200 * 1024 * 1024)
while first:
    time.sleep(1)
"""
FAST = ControllerConfig(batch_period=0.02, backoff_base=0.05, backoff_max=0.5, time_scale=0.2)


def _hog(tmp_path: Path, **grow: object) -> Step:
    return Step(
        name="hog",
        shell="python",
        script=HOG,
        env={"MARKER": str(tmp_path / "marker")},
        resources={"memory": "128Mi"},
        retry_oom={"factor": 2, "max": "1Gi", **grow},
    )


@pytest_asyncio.fixture(params=["local", "fake-cluster"])
async def session(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Session]:
    if request.param == "local":
        backend = LocalBackend(state_dir=tmp_path / "state", kill_grace=0.5)
        async with Session(study="oom", backend=backend) as s:
            yield s
        return
    async with (
        FakeCluster("execute", directory=tmp_path / "fake", controller=FAST) as fake,
        Session(study="oom", kubeconfig=fake.kubeconfig_path) as s,
    ):
        yield s


async def test_an_oomkilled_step_succeeds_on_its_second_attempt_with_more_memory(
    session: Session, tmp_path: Path
) -> None:
    handle = await session.submit(_hog(tmp_path))
    result = await handle.wait(120)
    assert result.ok, result.describe()
    assert result.memory_attempts == (128 * MIB, 256 * MIB)
    # Beside the backend's own event of the OOMKilled pod: the attempt and its size.
    (event,) = [e for e in handle.events if e.action == "RetryOOM"]
    assert event.reason == "OOMRetry"
    assert event.message == "attempt 1 ran out of memory with 128Mi; attempt 2 asks for 256Mi"
    assert result.usage is not None and (result.usage.memory_peak or 0) >= 200 * MIB


async def test_the_last_attempt_at_max_fails_saying_what_was_tried(
    session: Session, tmp_path: Path
) -> None:
    handle = await session.submit(_hog(tmp_path, max="128Mi"))
    result = await handle.wait(120)
    assert (result.state, result.reason) == (StepState.FAILED, "OOMKilled")
    assert result.message == "ran out of memory at every size tried: 128Mi (retry_oom max 128Mi)"


def test_retry_oom_needs_memory_and_a_max_above_it() -> None:
    with pytest.raises(pydantic.ValidationError, match=r"retry_oom needs resources\.memory"):
        Step(name="a", script="true", retry_oom={"max": "4Gi"})
    with pytest.raises(pydantic.ValidationError, match=r"retry_oom\.max 1Gi is below"):
        Step(name="a", script="true", resources={"memory": "2Gi"}, retry_oom={"max": "1Gi"})
    with pytest.raises(pydantic.ValidationError, match="factor"):
        Step(
            name="a",
            script="true",
            resources={"memory": "1Gi"},
            retry_oom={"factor": 1, "max": "2Gi"},
        )


def test_a_grown_attempt_asks_for_more_and_keeps_the_step_s_spec_hash(tmp_path: Path) -> None:
    from k8sjobs.render.manifests import ANNOTATION_MEMORY_ATTEMPT, LABEL_HASH, render

    step = _hog(tmp_path)
    plain, grown = render(step), render(step, memory=256 * MIB)
    container = grown.job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["memory"] == str(256 * MIB)
    assert grown.spec_hash == plain.spec_hash == grown.job["metadata"]["labels"][LABEL_HASH]
    assert grown.job["metadata"]["annotations"][ANNOTATION_MEMORY_ATTEMPT] == str(256 * MIB)
    assert ANNOTATION_MEMORY_ATTEMPT not in plain.job["metadata"]["annotations"]
    assert ANNOTATION_MEMORY_ATTEMPT not in grown.configmap["metadata"]["annotations"]


@settings(max_examples=300, deadline=None)
@given(
    factor=st.floats(min_value=1.0, max_value=1024.0, exclude_min=True, allow_nan=False),
    memory=st.integers(min_value=MIB, max_value=2**44),
    headroom=st.integers(min_value=0, max_value=2**44),
)
def test_every_factor_and_memory_either_grows_each_attempt_within_the_bound_or_is_refused(
    factor: float, memory: int, headroom: int
) -> None:
    grow = {"factor": factor, "max": memory + headroom}
    try:
        step = Step(name="a", script="true", resources={"memory": str(memory)}, retry_oom=grow)
    except pydantic.ValidationError as exc:
        assert "retry_oom" in str(exc) and "attempts" in str(exc), exc
        assert "raise factor or lower max" in str(exc)
        return
    assert step.retry_oom is not None
    sizes = step.retry_oom.attempts_from(memory)
    assert len(sizes) <= MAX_OOM_ATTEMPTS
    assert all(later > earlier for earlier, later in itertools.pairwise(sizes)), sizes
    assert sizes[-1] == memory + headroom  # the last attempt ran at max
    assert step.retry_oom.next_memory(sizes[-1]) is None


def test_a_factor_that_cannot_grow_the_memory_is_refused_at_load() -> None:
    with pytest.raises(pydantic.ValidationError, match=r"more than 20 attempts from .* 1Mi"):
        Step(
            name="a",
            script="true",
            resources={"memory": "1Mi"},
            retry_oom={"factor": 1.0000001, "max": "64Gi"},
        )
