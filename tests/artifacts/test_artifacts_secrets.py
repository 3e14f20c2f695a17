"""Credentials never leak: a store location with user:password@ is refused without echoing
it, registry text that echoes a credential is scrubbed before it reaches a message, and a
credential helper that forks is stopped with its whole process group at the timeout."""

from __future__ import annotations

import asyncio
import base64
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs.artifacts import (
    AuthenticationError,
    Credentials,
    InvalidReference,
    OCILayout,
    Registry,
    RegistryError,
    open_store,
    parse_reference,
)
from k8sjobs.artifacts._auth import run_credential_helper
from k8sjobs.errors import scrub

from ..waiting import wait_until_sync
from .hostile_registry import HostileRegistry

SECRET = "hunter2-Sup3r"


@pytest.mark.parametrize(
    "location",
    [f"user:{SECRET}@registry.example:5000", f"user:{SECRET}@127.0.0.1:5000/team"],
)
def test_userinfo_in_store_location_is_refused_without_echo(location: str) -> None:
    with pytest.raises(InvalidReference) as caught:
        open_store(location)
    message = str(caught.value)
    assert SECRET not in message and SECRET not in repr(caught.value)
    assert "credentials=Credentials" in message and "K8SJOBS_REGISTRY_USERNAME" in message


def test_scheme_location_with_userinfo_is_refused_without_echo() -> None:
    with pytest.raises(InvalidReference) as caught:
        open_store(f"https://user:{SECRET}@registry.example")
    assert SECRET not in str(caught.value)


async def test_registry_error_body_echoing_authorization_is_scrubbed(tmp_path: Path) -> None:
    hostile = HostileRegistry(basic_user=("user", SECRET), echo_authorization=True)
    async with hostile:
        registry = Registry(hostile.location, plain_http=True, username="user", password=SECRET)
        async with registry:
            with pytest.raises(RegistryError) as caught:
                await registry.pull("r:v1", tmp_path / "out")
    header = base64.b64encode(f"user:{SECRET}".encode()).decode()
    for shown in (str(caught.value), repr(caught.value)):
        assert SECRET not in shown and header not in shown
    assert "DENIED" in str(caught.value)  # the registry's reason is still there


secret_text = st.text(
    st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="\"'"),
    min_size=6,
    max_size=30,
)


@given(secret_text, st.sampled_from(["Basic", "Bearer", "basic", "BEARER"]), st.text(max_size=40))
@settings(max_examples=300)
def test_scrub_removes_authorization_values_and_known_secrets(
    secret: str, scheme: str, around: str
) -> None:
    token = base64.b64encode(f"u:{secret}".encode()).decode()
    text = f"{around} Authorization: {scheme} {token} {around} raw={secret} {around}"
    cleaned = scrub(text, [secret])
    assert token not in cleaned and secret not in cleaned
    assert "[redacted]" in cleaned


def test_every_registry_error_is_scrubbed_at_construction() -> None:
    token = base64.b64encode(b"user:pw-123456").decode()
    error = RegistryError(f"registry said: Authorization: Basic {token}; see https://u:pw@x/")
    assert token not in str(error) and "u:pw@" not in repr(error)


def _write_helper(bin_dir: Path, pid_file: Path) -> None:
    helper = bin_dir / "docker-credential-forky"
    helper.write_text(
        f"#!/bin/sh\nsleep 300 &\necho $! > {pid_file}.child\necho $$ > {pid_file}\nsleep 300\n"
    )
    helper.chmod(helper.stat().st_mode | stat.S_IEXEC)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead; only its parent (not us, for the grandchild) can reap it.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_helper_that_forks_is_killed_with_its_process_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "helper.pid"
    _write_helper(bin_dir, pid_file)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with pytest.raises(AuthenticationError, match="did not answer"):
        asyncio.run(run_credential_helper("forky", "registry.example", timeout=3.0))
    pids = [int(pid_file.read_text()), int(Path(f"{pid_file}.child").read_text())]
    wait_until_sync(lambda: not any(_alive(pid) for pid in pids), "the helper and its child end")


def test_credentials_repr_hides_the_secret() -> None:
    assert SECRET not in repr(Credentials("user", SECRET))


async def test_credentials_never_follow_a_link_to_another_host() -> None:
    async with HostileRegistry() as elsewhere:
        own = HostileRegistry(basic_user=("user", SECRET))
        own.tags_next = f"http://{elsewhere.location}/v2/r/tags/list?n=1000"
        async with own:
            registry = Registry(own.location, plain_http=True, username="user", password=SECRET)
            async with registry:
                tags = await registry.tags("r")
    assert tags == sorted([f"t{own.port}", f"t{elsewhere.port}"])
    assert own.authorizations and not elsewhere.authorizations


# -- issue 25 item 12: credentials written into a reference are redacted wherever shown ---

CRED_REF = f"robot:{SECRET}@registry.example:5000/team/x:v1"


def _shown(exc: BaseException) -> str:
    return f"{exc}\n{exc!r}"


def _redacted(text: str) -> None:
    assert SECRET not in text and "robot:" not in text, text
    assert "[redacted]@registry.example:5000" in text, text


def test_a_reference_with_credentials_is_refused_without_echoing_them() -> None:
    """The error echoed the password: ``Reference 'robot:S3cret...@...'`` (failed on main)."""
    with pytest.raises(InvalidReference) as caught:
        parse_reference(CRED_REF)
    _redacted(_shown(caught.value))


@pytest.mark.parametrize("how", ["registry-pull", "registry-push", "layout-pull", "exists"])
async def test_every_store_call_redacts_a_reference_with_credentials(
    tmp_path: Path, how: str
) -> None:
    store = (
        OCILayout(tmp_path / "layout")
        if how.startswith("layout")
        else Registry("127.0.0.1:9", plain_http=True)
    )
    (tmp_path / "f").write_text("x\n")
    with pytest.raises(InvalidReference) as caught:
        if how.endswith("push"):
            await store.push(CRED_REF, [tmp_path / "f"])
        elif how == "exists":
            await store.exists(CRED_REF)
        else:
            await store.pull(CRED_REF, tmp_path / "out")
    _redacted(_shown(caught.value))


def test_a_step_input_with_credentials_is_refused_without_echoing_them() -> None:
    from k8sjobs import Step

    with pytest.raises(ValueError) as caught:
        Step(name="s", script="true", inputs={"data": CRED_REF})
    _redacted(_shown(caught.value))


@pytest.mark.parametrize("verb", ["pull", "push", "rm"])
def test_the_artifact_command_redacts_a_reference_with_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    from k8sjobs.cli.main import main

    (tmp_path / "f").write_text("x\n")
    extra = {"pull": [str(tmp_path / "out")], "push": [str(tmp_path / "f")], "rm": []}[verb]
    code = main(["artifact", verb, CRED_REF, *extra, "--store", f"oci:{tmp_path / 'l'}"])
    captured = capsys.readouterr()
    assert code == 2  # a mistake in the command line (docs/cli.md)
    assert captured.err.count("\n") == 1
    _redacted(captured.err)
    assert SECRET not in captured.out


@pytest.mark.parametrize(
    "location",
    [
        f"robot:{SECRET}@registry.example:5000",
        f"https://robot:{SECRET}@registry.example:5000/team",
        f"robot:{SECRET}@registry.example:5000/Bad_Prefix",
    ],
)
def test_a_store_location_with_credentials_is_redacted_in_every_message(location: str) -> None:
    with pytest.raises(InvalidReference) as caught:
        open_store(location)
    _redacted(_shown(caught.value))


def test_scrub_redacts_bare_userinfo_but_not_digests_or_mail() -> None:
    assert scrub(f"Reference '{CRED_REF}'") == (
        "Reference '[redacted]@registry.example:5000/team/x:v1'"
    )
    digest = "sha256:" + "a" * 64
    for kept in (f"team/x@{digest}", f"x:v1@{digest}", "bob@example.com wrote"):
        assert scrub(kept) == kept


def test_a_rendered_store_with_credentials_is_refused_before_anything_is_written() -> None:
    """Rendered, the store location goes into the step's ConfigMap: a password in it would be
    there for anyone who may read ConfigMaps (it was, on main)."""
    from k8sjobs import Step
    from k8sjobs.render.manifests import Target, render

    with pytest.raises(ValueError) as caught:
        render(Step(name="s", script="true"), Target(store=f"robot:{SECRET}@registry.example:5000"))
    _redacted(_shown(caught.value))
    assert "registry_secret" in str(caught.value)
