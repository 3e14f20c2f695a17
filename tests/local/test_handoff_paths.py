"""The artifact handoff on the LocalBackend, in-process and as processes: same artifacts, same
outputs, same failure reasons (each test runs on both paths through ``handoff_path``)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from k8sjobs import Resources, Session, Step, StepHandle, StepState
from k8sjobs.local import LocalBackend
from k8sjobs.local._handoff import HANDOFF_ENV, recognise
from k8sjobs.render.manifests import PULL_CONTAINER, PUSH_CONTAINER


def _session(tmp_path: Path, **options: object) -> Session:
    backend = LocalBackend(state_dir=tmp_path / "state", kill_grace=0.5, **options)  # type: ignore[arg-type]
    return Session(study="hand", backend=backend)


def _container_ids(tmp_path: Path, handle: StepHandle) -> dict[str, str]:
    """Return container name -> containerID of the step's last pod, from its record."""
    (path,) = (tmp_path / "state" / "steps").glob(f"*/{handle.object_name}.json")
    record = json.loads(path.read_text())
    status = record["pod_status"][record["pods"][-1]]
    found = status.get("initContainerStatuses", []) + status.get("containerStatuses", [])
    return {c["name"]: c.get("containerID", "") for c in found}


def _ran(path: str, ids: dict[str, str], name: str) -> None:
    assert (ids[name] == "local://in-process") == (path == "in-process"), ids


async def test_a_chain_hands_each_file_on_with_the_same_result(
    handoff_path: str, tmp_path: Path
) -> None:
    first = Step(name="s0", script="echo 1 > n.txt", outputs={"n": "n.txt"})
    steps = [first]
    for i in range(1, 3):
        read = 'echo $(( $(cat "$K8SJOBS_INPUTS/n/n.txt") + 1 )) > n.txt; cat n.txt'
        steps.append(
            Step(
                name=f"s{i}",
                script=read,
                inputs={"n": steps[-1].output("n")},
                outputs={"n": "n.txt"},
            )
        )
    async with _session(tmp_path) as s:
        handles = await s.submit_many(steps)
        results = await s.gather(*handles, timeout=60)
        assert [r.state for r in results] == [StepState.SUCCEEDED] * 3, results
        assert await handles[-1].logs() == "3\n"
        assert all("@sha256:" in r.outputs["n"] for r in results)
        ids = _container_ids(tmp_path, handles[1])
        _ran(handoff_path, ids, PULL_CONTAINER)
        _ran(handoff_path, ids, PUSH_CONTAINER)
        pull_log = await handles[1].logs(container=PULL_CONTAINER)
        push_log = await handles[1].logs(container=PUSH_CONTAINER)
    # What the containers print: the pulled digests, then the pushed reference and digest.
    assert json.loads(pull_log)["n"].startswith("sha256:")
    assert json.loads(push_log)["n"]["digest"] in results[1].outputs["n"]


async def test_a_missing_output_fails_output_push_failed(handoff_path: str, tmp_path: Path) -> None:
    async with _session(tmp_path) as s:
        handle = await s.submit(Step(name="lazy", script="true", outputs={"m": "model.bin"}))
        result = await handle.wait(timeout=60)
        log = await handle.logs(container=PUSH_CONTAINER)
    assert (result.state, result.reason, result.exit_code) == (
        StepState.FAILED,
        "OutputPushFailed",
        0,
    )
    assert 'Output "m"' in log and "model.bin" in log
    assert result.log_file is not None and result.log_file.endswith(f"{PUSH_CONTAINER}.log")


async def test_a_missing_input_fails_input_pull_failed_and_the_script_never_runs(
    handoff_path: str, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    step = Step(name="reader", script=f"touch {ran}", inputs={"x": "nothing/here:v1"})
    async with _session(tmp_path) as s:
        handle = await s.submit(step)
        result = await handle.wait(timeout=60)
        log = await handle.logs(container=PULL_CONTAINER)
    assert (result.state, result.reason) == (StepState.FAILED, "InputPullFailed")
    assert "nothing/here:v1" in log
    assert not ran.exists()  # the pull ends before the main container starts, as an init does


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_registry_that_is_down_fails_output_push_failed(
    handoff_path: str, tmp_path: Path
) -> None:
    backend = LocalBackend(
        state_dir=tmp_path / "state", kill_grace=0.5, store=f"127.0.0.1:{_closed_port()}/k"
    )
    async with Session(study="hand", backend=backend, plain_http=True) as s:
        handle = await s.submit(Step(name="w", script="echo x > o", outputs={"o": "o"}))
        result = await handle.wait(timeout=120)
        log = await handle.logs(container=PUSH_CONTAINER)
    assert (result.state, result.reason) == (StepState.FAILED, "OutputPushFailed")
    assert "k8sjobs handoff push:" in log


async def test_only_index_0_of_a_two_node_step_pushes(handoff_path: str, tmp_path: Path) -> None:
    script = 'echo "$JOB_COMPLETION_INDEX" > who'
    step = Step(
        name="mpi",
        script=script,
        outputs={"who": "who"},
        resources=Resources(nodes=2, tasks=2),
        launch="none",  # every index runs the script; still only index 0 pushes
    )
    async with _session(tmp_path) as s:
        handle = await s.submit(step)
        result = await handle.wait(timeout=60)
        reader = await s.submit(
            Step(
                name="r",
                script='cat "$K8SJOBS_INPUTS/who/who"',
                inputs={"who": handle.output("who")},
            )
        )
        assert (await reader.wait(timeout=60)).ok
        assert await reader.logs() == "0\n"
    assert result.ok and "@sha256:" in result.outputs["who"]


async def test_the_option_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HANDOFF_ENV, "in-process")
    async with _session(tmp_path, handoff="subprocess") as s:
        handle = await s.submit(Step(name="w", script="echo x > o", outputs={"o": "o"}))
        assert (await handle.wait(timeout=60)).ok
    _ran("subprocess", _container_ids(tmp_path, handle), PUSH_CONTAINER)


def test_an_unknown_path_is_refused_naming_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match='handoff= must be "in-process" or "subprocess"'):
        LocalBackend(handoff="thread")
    monkeypatch.setenv(HANDOFF_ENV, "fast")
    with pytest.raises(ValueError, match=f"{HANDOFF_ENV}"):
        LocalBackend()


ARGV = ["python", "-m", "k8sjobs.handoff", "push", "--config", "/c/handoff.json"]


@pytest.mark.parametrize(
    ("name", "argv", "env", "expected"),
    [
        (PUSH_CONTAINER, ARGV, {}, ("push", "/c/handoff.json", None)),
        (
            PUSH_CONTAINER,
            ["/usr/bin/python3", *ARGV[1:], "--timeout", "9"],
            {},
            ("push", "/c/handoff.json", 9.0),
        ),
        (PULL_CONTAINER, [*ARGV[:3], "pull", *ARGV[4:]], {}, ("pull", "/c/handoff.json", None)),
        (PULL_CONTAINER, ARGV, {}, None),  # the verb of the other container
        ("step", ARGV, {}, None),  # the user's own container, whatever it runs
        (PUSH_CONTAINER, ARGV[:-1], {}, None),
        (PUSH_CONTAINER, [*ARGV, "--extra"], {}, None),
        (PUSH_CONTAINER, [*ARGV, "--timeout", "soon"], {}, None),
        (PUSH_CONTAINER, ["bash", *ARGV[1:]], {}, None),
        (PUSH_CONTAINER, ARGV, {"DOCKER_CONFIG": "/auth"}, None),  # the pod's own credentials
    ],
)
def test_only_the_rendered_handoff_is_recognised(
    name: str, argv: list[str], env: dict[str, str], expected: tuple[str, str, float | None] | None
) -> None:
    call = recognise(name, argv, env)
    assert (call and (call.command, call.config, call.timeout)) == expected
