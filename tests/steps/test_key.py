"""A step's key: every field that decides its result changes it; names and scheduling do not."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from k8sjobs.steps.key import (
    EXCLUDED_FIELDS,
    KEYED_FIELDS,
    cached_by_default,
    image_identity,
    step_key,
)
from k8sjobs.steps.spec import Resources, SecretKeyRef, Step, StepOutput
from k8sjobs.steps.volumes import NFS, Volume

TWO = Resources(nodes=2, tasks=2)
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
BASE: dict[str, Any] = {
    "name": "train",
    "script": "python train.py",
    "outputs": {"model": "model.bin"},
    "inputs": {"data": StepOutput(step="prep", output="table")},
}

# One change per keyed field: each must give another key.
CHANGES: dict[str, dict[str, Any]] = {
    "script": {"script": "python train.py --epochs 2"},
    "shell": {"shell": "python"},
    "image": {"image": "python:3.13-slim"},
    "resources": {"resources": Resources(cores_per_task=2)},
    "env": {"env": {"SEED": "1"}},
    "workdir": {"workdir": "/data"},
    "outputs": {"outputs": {"model": "model.pt"}},
    "volumes": {"volumes": [Volume(name="ref", mount_path="/ref", claim="refdata")]},
    "shm": {"shm": "1Gi"},
    "launch": {"resources": TWO, "launch": "none"},
    "mpi": {"mpi": "mpich"},
    "launcher": {"launcher": "srun"},
    "ssh_dir": {"resources": TWO, "ssh_dir": "/home/mpi/.ssh"},
    "target": {"resources": TWO, "target": "minicluster"},
    "flux_in_image": {"resources": TWO, "target": "minicluster", "flux_in_image": True},
    "security": {"security": "restricted"},
    "runtime_class": {"runtime_class": "gvisor"},
    "key_env": {"key_env": ["TOOL_VERSION"]},
}

# One change per excluded field: none may change the key.
SAME: dict[str, dict[str, Any]] = {
    "name": {"name": "train-again"},
    "namespace": {"namespace": "elsewhere"},
    "labels": {"labels": {"team": "a"}},
    "annotations": {"annotations": {"note": "x"}},
    "retries": {"retries": 3},
    "retry_oom": {"resources": {"memory": "1Gi"}, "retry_oom": {"max": "4Gi"}},
    "disruptions": {"disruptions": "count"},
    "retry_on_exit_codes": {"retries": 1, "retry_on_exit_codes": [3]},
    "fail_on_exit_codes": {"fail_on_exit_codes": [4]},
    "push_outputs": {"push_outputs": "always"},
    "walltime": {"walltime": "1h"},
    "pending_timeout": {"pending_timeout": "1h"},
    "ttl_after_finished": {"ttl_after_finished": "1h"},
    "node_selector": {"node_selector": {"zone": "a"}},
    "tolerations": {"tolerations": [{"key": "gpu", "operator": "Exists"}]},
    "service_account": {"service_account": "runner"},
    "image_pull_secrets": {"image_pull_secrets": ["pull"]},
    "queue": {"queue": "batch"},
    "priority": {"queue": "batch", "priority": "high"},
    "priority_class": {"priority_class": "high"},
    "affinity": {"affinity": {"required": [{"key": "zone", "operator": "Exists"}]}},
    "spread": {"spread": "zone"},
    "worker_wait": {"resources": TWO, "worker_wait": "1m"},
    "cache": {"cache": False},
    "allocation": {"allocation": "pool"},
}


def key(digests: dict[str, str] | None = None, **changes: Any) -> str:
    step = Step(**{**BASE, **changes})
    return step_key(step, {"data": D1} if digests is None else digests)


def test_every_step_field_is_keyed_or_excluded_on_purpose() -> None:
    # A new Step field fails here until someone decides whether it decides a result.
    assert set(Step.model_fields) == KEYED_FIELDS | EXCLUDED_FIELDS
    assert not KEYED_FIELDS & EXCLUDED_FIELDS
    assert set(CHANGES) | {"inputs"} == KEYED_FIELDS
    assert set(SAME) == EXCLUDED_FIELDS


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_each_keyed_field_changes_the_key(field: str) -> None:
    changes = CHANGES[field]
    # A multi-node change is compared with the same multi-node step without the field.
    base = {k: v for k, v in changes.items() if k == "resources" and field != "resources"}
    if field in ("ssh_dir",):
        base["launch"] = "ssh"
    if field == "flux_in_image":
        base["target"] = "minicluster"
    assert key(**changes) != key(**base)


@pytest.mark.parametrize("field", sorted(SAME))
def test_excluded_fields_leave_the_key(field: str) -> None:
    changes = SAME[field]
    base = {k: v for k, v in changes.items() if k in ("resources", "retries")}
    if field == "retries":
        base = {}
    assert key(**changes) == key(**base)


def test_an_input_digest_changes_the_key_and_its_producer_name_does_not() -> None:
    assert key({"data": D1}) != key({"data": D2})
    other_producer: dict[str, Any] = {"data": StepOutput(step="prep-v2", output="other")}
    assert key(inputs=other_producer) == key()
    external: dict[str, Any] = {"data": "reg.example/team/table:v1"}
    assert key(inputs=external) == key()  # by what it resolved to, not how it was named
    renamed: dict[str, Any] = {"table": StepOutput(step="prep", output="table")}
    assert key({"table": D1}, inputs=renamed) != key()  # the script reads it by name


def test_an_input_without_a_digest_is_refused() -> None:
    with pytest.raises(ValueError, match='no digest for input "data"'):
        key({})
    with pytest.raises(ValueError, match='input "data": "latest" is not a digest'):
        key({"data": "latest"})


def test_secret_env_is_keyed_by_digest_never_by_value() -> None:
    one = Step(**{**BASE, "env": {"TOKEN": SecretStr("hunter2-secret")}})
    two = Step(**{**BASE, "env": {"TOKEN": SecretStr("other-secret")}})
    assert step_key(one, {"data": D1}) != step_key(two, {"data": D1})
    assert "hunter2" not in step_key(one, {"data": D1})
    ref = Step(**{**BASE, "env": {"TOKEN": SecretKeyRef(secret="s", key="k")}})
    moved = Step(**{**BASE, "env": {"TOKEN": SecretKeyRef(secret="s", key="k2")}})
    assert step_key(ref, {"data": D1}) != step_key(moved, {"data": D1})


def test_an_image_with_a_digest_is_keyed_by_the_digest_alone() -> None:
    digest = "sha256:" + "a" * 64
    assert image_identity(f"python:3.12@{digest}") == digest
    assert key(image=f"python:3.12@{digest}") == key(image=f"docker.io/library/python@{digest}")
    assert key(image="python:3.12") != key(image="python:3.13")


@given(
    name=st.from_regex(r"[a-z][a-z0-9-]{0,30}", fullmatch=True),
    namespace=st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True),
    labels=st.dictionaries(
        st.from_regex(r"[a-z]{1,10}", fullmatch=True),
        st.from_regex(r"[a-z0-9]{0,10}", fullmatch=True),
    ),
)
def test_names_never_change_the_key(name: str, namespace: str, labels: dict[str, str]) -> None:
    assert key(name=name, namespace=namespace, labels=labels) == key()


# A script holds no NUL byte (Step refuses one: no shell runs such a file).
# A Step refuses a NUL byte and a lone surrogate (neither can be written to a ConfigMap as
# UTF-8); every other script is keyed.
SCRIPTS = st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]),
    min_size=1,
    max_size=200,
)


@given(script=SCRIPTS, other=SCRIPTS)
def test_two_scripts_share_a_key_only_when_equal(script: str, other: str) -> None:
    assert (key(script=script) == key(script=other)) == (script == other)


def test_what_is_cached_by_default() -> None:
    assert cached_by_default(Step(**BASE))
    assert not cached_by_default(Step(name="s", script="true"))  # no outputs: nothing to reuse
    assert cached_by_default(Step(name="s", script="true", cache=True))
    assert not cached_by_default(Step(**BASE, cache=False))
    writable = Volume(name="scratch", mount_path="/scratch", nfs=NFS(server="nfs", path="/x"))
    assert not cached_by_default(Step(**BASE, volumes=[writable]))
    read_only = writable.model_copy(update={"read_only": True})
    assert cached_by_default(Step(**BASE, volumes=[read_only]))
    scratch = Volume(name="scratch", mount_path="/scratch", empty_dir={})
    assert cached_by_default(Step(**BASE, volumes=[scratch]))  # gone with the pod


@given(
    names=st.lists(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=4),
    values=st.lists(st.none() | st.text(max_size=12), min_size=2, max_size=2),
)
def test_key_env_keys_the_step_by_each_named_value_of_the_driver_s_environment(
    names: list[str], values: list[str | None]
) -> None:
    step = Step(**{**BASE, "key_env": names})
    first, second = ({name: value for name in names} for value in values)
    same = values[0] == values[1]
    assert (step_key(step, {"data": D1}, first) == step_key(step, {"data": D1}, second)) is same
    assert step_key(step, {"data": D1}, first) == step_key(step, {"data": D1}, dict(first))


def test_key_env_names_must_be_environment_variable_names() -> None:
    with pytest.raises(ValueError, match='"a b" is not a valid environment variable name'):
        Step(**{**BASE, "key_env": ["a b"]})


@given(st.lists(st.binary(max_size=8), min_size=2, max_size=2))
def test_key_env_keys_a_value_of_any_bytes_as_the_driver_s_environment_holds_it(
    raw: list[bytes],
) -> None:
    """An environment value need not be UTF-8 (os.environ holds bytes 0x80-0xff as lone
    surrogates): a step keyed by one got no key at all (UnicodeEncodeError: never cached);
    it is keyed by the value's bytes, so distinct bytes give distinct keys."""
    import os

    step = Step(**{**BASE, "key_env": ["TOOL"]})
    first, second = (step_key(step, {"data": D1}, {"TOOL": os.fsdecode(b)}) for b in raw)
    assert (first == second) is (raw[0] == raw[1])
