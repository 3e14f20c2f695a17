"""A planted secret never leaves its Secret: not in other objects, logs, reprs or errors.

Each test plants a unique string (and looks for its base64 form too, which is how a Secret
holds it), drives k8sjobs through the paths that touch it, and greps everything k8sjobs
wrote or printed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from k8sjobs.artifacts import AuthenticationError, Registry
from k8sjobs.errors import ClusterUnreachable
from k8sjobs.render.manifests import Target
from k8sjobs.render.manifests import render as render_any
from k8sjobs.render.sshkey import generate_key
from k8sjobs.session import Session
from k8sjobs.steps.spec import Resources, Step
from k8sjobs.testing import ControllerConfig, Event, FakeCluster
from k8sjobs.testing.registry import RegistryServer, registry_available, start_registry

from .sechelpers import run_cli

# Multi-node steps are launched over ssh: they render with a key pair.
render = partial(render_any, ssh_key=generate_key())

FAKE = "fake.k8sjobs.io/"
FAST = ControllerConfig(batch_period=0.02, backoff_base=0.05, backoff_max=0.5, time_scale=0.2)


def _planted() -> str:
    return "planted-" + secrets.token_hex(12)


def _forms(secret: str) -> list[str]:
    """Return the secret and the encodings it could hide under."""
    raw = secret.encode()
    return [secret, base64.b64encode(raw).decode(), base64.b64encode(raw).decode().rstrip("=")]


def _assert_absent(secret: str, text: str, where: str) -> None:
    for form in _forms(secret):
        assert form not in text, f"the planted secret appears in {where}"


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Capture every k8sjobs logger at DEBUG."""
    with caplog.at_level(logging.DEBUG, logger="k8sjobs"):
        yield caplog


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    lines = []
    for record in caplog.records:
        lines.append(record.getMessage())
        if record.exc_info and record.exc_info[1] is not None:
            lines.append(repr(record.exc_info[1]))
    return "\n".join(lines)


def _error_text(error: BaseException) -> str:
    """Return str and repr of an exception and of every exception chained to it."""
    seen: list[str] = []
    current: BaseException | None = error
    while current is not None and len(seen) < 20:
        seen += [str(current), repr(current), repr(getattr(current, "body", ""))]
        current = current.__cause__ or current.__context__
    return "\n".join(seen)


# --- the Kubernetes path --------------------------------------------------------------


def _step(name: str, secret: str, **fields: Any) -> Step:
    notes = {f"{FAKE}duration": "0.05", **fields.pop("annotations", {})}
    return Step(
        name=name,
        script="echo hi",
        annotations=notes,
        env={"TOKEN": SecretStr(secret), "PLAIN": "visible"},
        **fields,
    )


async def test_secret_env_travels_only_in_its_secret(
    tmp_path: Path, debug_logs: pytest.LogCaptureFixture
) -> None:
    secret = _planted()
    written: list[Event] = []
    (tmp_path / "c").mkdir()
    async with FakeCluster("simulate", directory=tmp_path / "c", controller=FAST) as cluster:
        cluster.store.listen(written.append)
        async with Session(
            study="sec",
            kubeconfig=cluster.kubeconfig_path,
            store="registry.invalid:5000/k",
            log_dir=tmp_path / "logs",
        ) as s:
            ok = await s.submit(
                _step("ok", secret, resources=Resources(nodes=2, tasks=2), outputs={"o": "o"})
            )
            bad = await s.submit(_step("bad", secret, annotations={f"{FAKE}exit-code": "4"}))
            results = [await ok.wait(20), await bad.wait(20)]
            texts = [repr(ok), repr(bad), *map(repr, results), *map(str, results)]
            texts += [r.describe() for r in results]
            texts += [await ok.logs()]
    assert [r.state.value for r in results] == ["SUCCEEDED", "FAILED"]
    assert any(e.obj.get("kind") == "Secret" for e in written)
    for event in written:
        obj = event.obj
        if obj.get("kind") == "Secret":
            assert base64.b64decode(obj["data"]["TOKEN"]).decode() == secret
            obj = {**obj, "data": {}}
        _assert_absent(secret, json.dumps(obj), f"{event.resource} {event.type}")
    _assert_absent(secret, "\n".join(texts), "a handle, result or log")
    _assert_absent(secret, _logged(debug_logs), "a k8sjobs log line")
    for saved in (tmp_path / "logs").rglob("*"):
        if saved.is_file():
            _assert_absent(secret, saved.read_text(), f"saved log {saved}")


def test_reprs_of_steps_and_manifests_hide_secret_values() -> None:
    secret = _planted()
    step = _step("s", secret)
    manifests = render(step, Target())
    shown = [repr(step), str(step), repr(step.env), repr(manifests), str(manifests)]
    shown += [json.dumps(step.model_dump(mode="json"))]
    _assert_absent(secret, "\n".join(shown), "a repr")
    assert manifests.secret is not None  # it is there, just not shown
    for obj in (manifests.configmap, manifests.job):
        _assert_absent(secret, json.dumps(obj), obj["kind"])
    _assert_absent(secret, manifests.spec_hash, "the spec hash")


async def test_a_rejected_token_is_not_in_the_error_or_logs(
    tmp_path: Path, debug_logs: pytest.LogCaptureFixture
) -> None:
    right, wrong = _planted(), _planted()
    (tmp_path / "c").mkdir()
    async with FakeCluster(
        "simulate", directory=tmp_path / "c", controller=FAST, tls=True, token=right
    ) as cluster:
        kubeconfig = cluster.kubeconfig_path.read_text().replace(right, wrong)
        (tmp_path / "kubeconfig").write_text(kubeconfig)
        session = Session(study="sec", kubeconfig=tmp_path / "kubeconfig", log_dir=tmp_path)
        with pytest.raises(ClusterUnreachable) as caught:
            async with session:
                await session.submit(_step("s", _planted()))
        assert "401 Unauthorized" in str(caught.value)
        argv = ["status", "--study", "sec", "--backend", "kubernetes", "--kubeconfig"]
        code, out, err = await run_cli([*argv, str(tmp_path / "kubeconfig")], cwd=tmp_path)
    assert code == 1
    for token in (right, wrong):
        _assert_absent(token, _error_text(caught.value), "the 401 error")
        _assert_absent(token, _logged(debug_logs), "a log line")
        _assert_absent(token, out + err, "the CLI's output")


# --- the registry path ----------------------------------------------------------------

needs_registry = pytest.mark.skipif(not registry_available(), reason="docker-registry missing")


@pytest.fixture(scope="module")
def basic_registry() -> Iterator[RegistryServer]:
    server = start_registry(auth="basic", password=_planted())
    try:
        yield server
    finally:
        server.stop()


@needs_registry
async def test_a_bad_registry_password_is_not_in_the_error_or_logs(
    basic_registry: RegistryServer, tmp_path: Path, debug_logs: pytest.LogCaptureFixture
) -> None:
    wrong = _planted()
    store = Registry(basic_registry.location, plain_http=True, username="k8sjobs", password=wrong)
    payload = tmp_path / "f.txt"
    payload.write_text("x")
    with pytest.raises(AuthenticationError) as caught:
        async with store:
            await store.push("sec/x:1", [payload])
    text = _error_text(caught.value) + repr(store) + _logged(debug_logs)
    assert basic_registry.password is not None
    for secret in (wrong, basic_registry.password):
        _assert_absent(secret, text, "the registry error, the store's repr or a log line")


@needs_registry
async def test_the_in_pod_handoff_does_not_print_registry_credentials(
    basic_registry: RegistryServer, tmp_path: Path
) -> None:
    wrong = _planted()
    auth = base64.b64encode(f"k8sjobs:{wrong}".encode()).decode()
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "config.json").write_text(
        json.dumps({"auths": {basic_registry.location: {"auth": auth}}})
    )
    step = Step(name="s", script="x", inputs={"i": f"{basic_registry.location}/sec/x:1"})
    manifests = render(step, Target(store=basic_registry.location, plain_http=True))
    config = tmp_path / "handoff.json"
    config.write_text(manifests.configmap["data"]["handoff.json"])
    work = tmp_path / "work"
    work.mkdir()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "k8sjobs.handoff",
        "pull",
        "--config",
        str(config),
        cwd=work,
        env={
            "PATH": "/usr/bin:/bin",
            "DOCKER_CONFIG": str(docker),
            "K8SJOBS_WORKDIR": str(work),
            "K8SJOBS_INPUTS": str(work / "inputs"),
            "HOME": str(tmp_path),
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode != 0
    printed = (out + err).decode()
    assert "sec/x:1" in printed  # it says what failed...
    _assert_absent(wrong, printed, "the handoff's output")  # ...not with what
    _assert_absent(auth, printed, "the handoff's output")
