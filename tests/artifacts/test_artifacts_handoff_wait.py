"""The rendered pull's wait for an input not pushed yet (``wait_inputs``, set by
``k8sjobs render`` for kubectl apply, issue 28 item 12), on a real docker-registry and the
real entry point (``python -m k8sjobs.handoff pull`` as the init container runs it).

No timing asserts: a test starts the pull, waits for its "waiting for" line, pushes, and
waits for the pull to end; or lets a short bound run out and reads the one-line error."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from k8sjobs.artifacts import Registry
from k8sjobs.render import minicluster
from k8sjobs.render.manifests import Target, render
from k8sjobs.steps import Step, StepOutput
from k8sjobs.testing.registry import RegistryServer

from .artifact_helpers import make_tree, same_tree

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 60.0  # seconds a test waits for the pull: a hang fails the test, never a slow run


def _pod(tmp_path: Path, server: RegistryServer, reference: str, wait: float) -> dict[str, str]:
    dirs = {name: tmp_path / name for name in ("work", "inputs", "status")}
    for d in dirs.values():
        d.mkdir()
    config = tmp_path / "handoff.json"
    config.write_text(
        json.dumps(
            {
                "store": server.location,
                "plain_http": server.url.startswith("http://"),
                "inputs": {"data": reference},
                "outputs": {},
                "wait_inputs": wait,
            }
        )
    )
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "K8SJOBS_WORKDIR": str(dirs["work"]),
        "K8SJOBS_INPUTS": str(dirs["inputs"]),
        "K8SJOBS_STATUS_DIR": str(dirs["status"]),
        "K8SJOBS_CONFIG": str(config),
    }


async def _start(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "k8sjobs.handoff", "pull", "--config", env["K8SJOBS_CONFIG"],
        env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _failed_pull(env: dict[str, str]) -> str:
    """Run the pull to its end; check it failed (exit 1); return its stderr."""
    pull = await _start(env)
    _, err = await asyncio.wait_for(pull.communicate(), LIMIT)
    assert pull.returncode == 1, err.decode()
    return err.decode()


async def _line_with(stream: asyncio.StreamReader, text: str) -> str:
    """Return the first line of ``stream`` holding ``text`` (the pull's log, read live)."""
    while True:
        line = (await stream.readline()).decode()
        assert line, f'the pull ended without a line holding "{text}"'
        if text in line:
            return line


async def test_a_pull_started_before_the_push_waits_then_pulls_it(
    registry: Registry, plain_registry: RegistryServer, tmp_path: Path
) -> None:
    tree = make_tree(tmp_path / "upstream")
    env = _pod(tmp_path, plain_registry, "wait/producer:late", 600)
    pull = await _start(env)
    assert pull.stderr is not None
    line = await asyncio.wait_for(_line_with(pull.stderr, "waiting for"), LIMIT)
    assert 'input "data": wait/producer:late is not in the store yet' in line
    assert "up to 600 s" in line
    async with registry:
        await registry.push("wait/producer:late", [tree])
    out, err = await asyncio.wait_for(pull.communicate(), LIMIT)
    assert pull.returncode == 0, err.decode()
    assert same_tree(tree, Path(env["K8SJOBS_INPUTS"]) / "data" / "upstream")
    assert set(json.loads(out.decode().strip().splitlines()[-1])) == {"data"}
    assert 'input "data" is there' in err.decode()


async def test_an_input_that_never_appears_fails_at_the_bound_in_one_line(
    plain_registry: RegistryServer, tmp_path: Path
) -> None:
    env = _pod(tmp_path, plain_registry, "wait/producer:never", 1)
    last = (await _failed_pull(env)).strip().splitlines()[-1]
    assert last.startswith("k8sjobs handoff pull: ")
    assert 'input "data": wait/producer:never did not appear' in last
    assert "within the pull's bound of 1 s" in last and "--wait-inputs" in last
    assert not await asyncio.to_thread(os.listdir, env["K8SJOBS_INPUTS"])


async def test_a_refusal_is_not_waited_for(basic_registry: RegistryServer, tmp_path: Path) -> None:
    """Refused credentials are no missing input: the pull fails as without a wait."""
    env = _pod(tmp_path, basic_registry, "wait/producer:any", 600)
    env["DOCKER_CONFIG"] = str(tmp_path / "no-credentials")
    err = await _failed_pull(env)
    assert "waiting for" not in err and "credentials" in err.lower()


async def test_without_the_setting_a_missing_input_fails_at_once(
    plain_registry: RegistryServer, tmp_path: Path
) -> None:
    """A session's pull (no wait_inputs: its inputs are pinned, pushed before it submits)."""
    err = await _failed_pull(_pod(tmp_path, plain_registry, "wait/producer:absent", 0))
    assert "waiting for" not in err and "not found" in err


def test_a_session_rendering_writes_no_wait() -> None:
    """Only a Target with wait_inputs (k8sjobs render) puts the setting in the config."""
    step = Step(name="b", script="true", inputs={"x": StepOutput(step="a", output="o")})
    plain = render(step, Target(store="127.0.0.1:5000/k"))
    waited = render(step, Target(store="127.0.0.1:5000/k", wait_inputs=30))
    assert "wait_inputs" not in json.loads(plain.configmap["data"]["handoff.json"])
    assert json.loads(waited.configmap["data"]["handoff.json"])["wait_inputs"] == 30


def test_a_minicluster_runner_outwaits_its_sidecars_waiting_pull() -> None:
    """The Flux runner gives up on the sidecar after INPUT_WAIT s: a longer pull wait
    lengthens it, or the runner would fail a step whose pull still waits as told."""
    step = Step(name="b", script="true", target="minicluster", inputs={"x": "study/a:o"})
    store = "127.0.0.1:5000/k"
    runner = render(step, Target(store=store, wait_inputs=7200)).job["spec"]["containers"][0]
    assert runner["environment"]["K8SJOBS_HANDOFF_WAIT"] == str(minicluster.INPUT_WAIT + 7200)
    plain = render(step, Target(store=store)).job["spec"]["containers"][0]
    assert "K8SJOBS_HANDOFF_WAIT" not in plain["environment"]
