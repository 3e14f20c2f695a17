"""Step volumes: the model's rules (field errors), their rendering, schema validity, golden file.

Every source (claim, NFS, ConfigMap, Secret, emptyDir, hostPath, the /dev/shm shorthand) is
rendered and checked against the strict Kubernetes schema over a hypothesis sweep; the
rules that need the rest of the step (work directory, inputs, outputs, restricted level) are
refused at their field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8sjobs.errors import StudyError
from k8sjobs.render.manifests import Manifests, Target
from k8sjobs.steps.spec import Step
from k8sjobs.steps.volumes import RESERVED_NAMES, RESERVED_PREFIX, SHM_PATH
from k8sjobs.study import load_study

from ..render.test_render import GOLDEN, assert_valid, render
from .test_spec import refused

STORE = Target(study="vol", namespace="science", store="registry.example:5000/k8sjobs")


def step(**fields: Any) -> Step:
    fields.setdefault("name", "train")
    fields.setdefault("script", "echo hi\n")
    return Step(**fields)


def claim(name: str = "data", path: str = "/data", **extra: Any) -> dict[str, Any]:
    return {"name": name, "claim": "results", "mount_path": path, **extra}


def pod(manifests: Manifests) -> dict[str, Any]:
    spec: dict[str, Any] = manifests.job["spec"]["template"]["spec"]
    return spec


# --- the model's rules --------------------------------------------------------------------


def test_a_volume_needs_exactly_one_source() -> None:
    refused(lambda: step(volumes=[{"name": "a", "mount_path": "/a"}]), ("volumes", 0), "none")
    both = {"name": "a", "mount_path": "/a", "claim": "c", "host_path": "/x"}
    refused(lambda: step(volumes=[both]), ("volumes", 0), "claim, host_path")


@pytest.mark.parametrize("name", ["Data", "a_b", "-a", "a" * 64, "", "x.y"])
def test_volume_names_are_dns_labels(name: str) -> None:
    refused(lambda: step(volumes=[claim(name)]), ("volumes", 0, "name"), "volume name")


@pytest.mark.parametrize("name", [*sorted(RESERVED_NAMES), RESERVED_PREFIX + "x"])
def test_k8sjobs_own_volume_names_are_refused(name: str) -> None:
    refused(lambda: step(volumes=[claim(name)]), ("volumes", 0, "name"), "choose another")


@pytest.mark.parametrize("path", ["data", "", "/", "./x"])
def test_mount_paths_are_absolute(path: str) -> None:
    refused(lambda: step(volumes=[claim(path=path)]), ("volumes", 0, "mount_path"), "absolute")


@pytest.mark.parametrize("path", ["/k8sjobs", "/k8sjobs/entrypoint", "/k8sjobs/status/x"])
def test_mount_paths_stay_out_of_k8sjobs_own(path: str) -> None:
    refused(lambda: step(volumes=[claim(path=path)]), ("volumes", 0, "mount_path"), "/k8sjobs")


def test_the_work_directory_and_inputs_are_not_mount_paths() -> None:
    refused(lambda: step(volumes=[claim(path="/work")]), ("volumes", 0, "mount_path"), "work")
    refused(
        lambda: step(volumes=[claim(path="/scratch/run/inputs/x")], workdir="/scratch/run"),
        ("volumes", 0, "mount_path"),
        "/scratch/run/inputs",
    )
    # Beside, above or inside the work directory is fine: nested mounts are ordinary.
    for path in ("/data", "/work/data", "/srv"):
        step(volumes=[claim(path=path)])


def test_two_volumes_on_one_path_or_name_are_refused() -> None:
    two = [claim("a", "/d"), {"name": "b", "empty_dir": {}, "mount_path": "/d/"}]
    refused(lambda: step(volumes=two), ("volumes", 1, "mount_path"), '"a" and "b"')
    same = [claim("a", "/d"), claim("a", "/e")]
    refused(lambda: step(volumes=same), ("volumes", 1, "name"), "rename")
    at_shm = [{"name": "s", "empty_dir": {"medium": "Memory"}, "mount_path": SHM_PATH}]
    refused(lambda: step(volumes=at_shm, shm="1Gi"), ("shm",), "keep one")


def test_an_output_may_not_overlap_a_volume() -> None:
    refused(
        lambda: step(volumes=[claim(path="/work/out")], outputs={"model": "out/model.pt"}),
        ("volumes", 0, "mount_path"),
        'output "model"',
    )
    refused(
        lambda: step(volumes=[claim(path="/work/out/cache")], outputs={"all": "out"}),
        ("volumes", 0, "mount_path"),
        'output "all"',
    )
    step(volumes=[claim(path="/work/data")], outputs={"model": "out/model.pt"})


@pytest.mark.parametrize("source", ["host_path", "nfs"])
def test_restricted_steps_refuse_host_path_and_nfs(source: str) -> None:
    value: Any = "/srv" if source == "host_path" else {"server": "nfs.example", "path": "/e"}
    volume = {"name": "v", "mount_path": "/v", source: value}
    step(volumes=[volume])
    refused(
        lambda: step(volumes=[volume], security="restricted"),
        ("volumes", 0, source),
        "restricted",
    )


def test_a_multi_node_steps_ssh_dir_is_not_a_mount_path() -> None:
    two = {"nodes": 2, "tasks": 2}
    at_ssh = [claim(path="/root/.ssh")]
    refused(lambda: step(volumes=at_ssh, resources=two), ("volumes", 0, "mount_path"), "ssh_dir")
    step(volumes=at_ssh)  # one node: no key pair mounted
    step(volumes=at_ssh, resources=two, launch="none")


def test_restricted_steps_keep_their_own_tmp() -> None:
    tmp = [{"name": "t", "empty_dir": {}, "mount_path": "/tmp"}]
    step(volumes=tmp)
    refused(lambda: step(volumes=tmp, security="restricted"), ("volumes", 0, "mount_path"))


def test_sources_check_their_own_fields() -> None:
    bad: list[tuple[dict[str, Any], tuple[str | int, ...], str]] = [
        ({"claim": "Not_A_Name"}, ("volumes", 0, "claim"), "PersistentVolumeClaim"),
        ({"config_map": "a b"}, ("volumes", 0, "config_map"), "ConfigMap"),
        ({"secret": "-x"}, ("volumes", 0, "secret"), "Secret"),
        ({"host_path": "srv"}, ("volumes", 0, "host_path"), "absolute"),
        ({"nfs": {"server": "", "path": "/e"}}, ("volumes", 0, "nfs", "server"), ""),
        ({"nfs": {"server": "h", "path": "e"}}, ("volumes", 0, "nfs", "path"), "absolute"),
        ({"empty_dir": {"medium": "Disk"}}, ("volumes", 0, "empty_dir", "medium"), ""),
        ({"empty_dir": {"size_limit": "lots"}}, ("volumes", 0, "empty_dir", "size_limit"), ""),
        ({"empty_dir": {"size_limit": 0}}, ("volumes", 0, "empty_dir", "size_limit"), "zero"),
        ({"claim": "c", "sub_path": "../up"}, ("volumes", 0, "sub_path"), '".."'),
        ({"claim": "c", "items": {"k": "v"}}, ("volumes", 0), "config_map and secret"),
        ({"secret": "s", "items": {"k": "/abs"}}, ("volumes", 0, "items"), "relative"),
        ({"secret": "s", "items": {}}, ("volumes", 0, "items"), "at least one"),
        ({"secret": "s", "mode": 0o1777}, ("volumes", 0, "mode"), ""),
    ]
    for fields, loc, phrase in bad:
        volume = {"name": "v", "mount_path": "/v", **fields}
        refused(lambda v=volume: step(volumes=[v]), loc, phrase)


@pytest.mark.parametrize("size", ["0", 0, "-1Gi", "huge"])
def test_shm_must_be_a_positive_size(size: str | int) -> None:
    refused(lambda: step(shm=size), ("shm",))


# --- rendering ----------------------------------------------------------------------------


def test_each_source_renders_as_kubernetes_spells_it() -> None:
    volumes = [
        claim(read_only=True, sub_path="run-1"),
        {"name": "share", "nfs": {"server": "10.0.0.5", "path": "/export"}, "mount_path": "/n"},
        {
            "name": "conf",
            "config_map": "app",
            "items": {"a.toml": "conf/a.toml"},
            "mode": 0o440,
            "mount_path": "/etc/app",
        },
        {"name": "creds", "secret": "token", "mount_path": "/etc/creds", "read_only": True},
        {"name": "scratch", "empty_dir": {"size_limit": "20Gi"}, "mount_path": "/scratch"},
        {"name": "host", "host_path": "/opt/tools", "mount_path": "/tools"},
    ]
    manifests = render(step(volumes=volumes, shm="8Gi"), STORE)
    assert_valid(manifests)
    spec = pod(manifests)
    by_name = {v["name"]: v for v in spec["volumes"]}
    assert by_name["data"] == {
        "name": "data",
        "persistentVolumeClaim": {"claimName": "results", "readOnly": True},
    }
    assert by_name["share"]["nfs"] == {"server": "10.0.0.5", "path": "/export"}
    assert by_name["conf"]["configMap"] == {
        "name": "app",
        "items": [{"key": "a.toml", "path": "conf/a.toml"}],
        "defaultMode": 0o440,
    }
    assert by_name["creds"]["secret"] == {"secretName": "token"}
    assert by_name["scratch"]["emptyDir"] == {"sizeLimit": "20Gi"}
    assert by_name["host"]["hostPath"] == {"path": "/opt/tools"}
    assert by_name["k8sjobs-shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    main = spec["containers"][0]
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    assert mounts["data"] == {
        "name": "data",
        "mountPath": "/data",
        "readOnly": True,
        "subPath": "run-1",
    }
    assert mounts["k8sjobs-shm"]["mountPath"] == "/dev/shm"
    assert mounts["creds"]["readOnly"] is True


def test_volumes_go_to_the_step_container_only() -> None:
    manifests = render(
        step(volumes=[claim()], inputs={"x": "r.example/a:1"}, outputs={"y": "y"}), STORE
    )
    spec = pod(manifests)
    for container in [*spec["initContainers"], *spec["containers"][1:]]:
        assert "data" not in {m["name"] for m in container["volumeMounts"]}
    assert "data" in {m["name"] for m in spec["containers"][0]["volumeMounts"]}


def test_k8sjobs_own_volume_names_are_the_reserved_ones() -> None:
    # The reserved list in volumes.py must follow render.py's own volumes.
    full = step(
        inputs={"x": "r.example/a:1"},
        outputs={"y": "y"},
        security="restricted",
        shm="1Gi",
        resources={"nodes": 2, "tasks": 2},
    )
    target = Target(store="r.example/p", registry_secret="regcred")
    names = {v["name"] for v in pod(render(full, target))["volumes"]}
    assert all(n in RESERVED_NAMES or n.startswith(RESERVED_PREFIX) for n in names), names


names = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True).filter(
    lambda n: n not in RESERVED_NAMES and not n.startswith(RESERVED_PREFIX)
)
sources = st.one_of(
    st.fixed_dictionaries({"claim": names}, optional={"sub_path": st.sampled_from(["a", "a/b"])}),
    st.fixed_dictionaries(
        {"nfs": st.fixed_dictionaries({"server": names, "path": st.just("/export/x")})}
    ),
    st.fixed_dictionaries(
        {"config_map": names},
        optional={
            "items": st.dictionaries(names, st.sampled_from(["f", "d/f"]), min_size=1),
            "mode": st.integers(0, 0o777),
        },
    ),
    st.fixed_dictionaries({"secret": names}, optional={"mode": st.integers(0, 0o777)}),
    st.fixed_dictionaries(
        {
            "empty_dir": st.fixed_dictionaries(
                {},
                optional={
                    "medium": st.sampled_from(["", "Memory"]),
                    "size_limit": st.sampled_from(["1Gi", "500M", 1024]),
                },
            )
        }
    ),
    st.fixed_dictionaries({"host_path": st.sampled_from(["/srv", "/opt/data"])}),
)


@st.composite
def volume_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(0, 4))
    chosen = draw(st.lists(names, min_size=count, max_size=count, unique=True))
    return [
        {
            "name": name,
            "mount_path": f"/mnt/{name}",
            "read_only": draw(st.booleans()),
            **draw(sources),
        }
        for name in chosen
    ]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    volumes=volume_lists(),
    shm=st.one_of(st.none(), st.sampled_from(["8Gi", "64Mi"])),
    nodes=st.integers(1, 3),
)
def test_every_volume_renders_valid_kubernetes(
    volumes: list[dict[str, Any]], shm: str | None, nodes: int
) -> None:
    manifests = render(
        step(volumes=volumes, shm=shm, resources={"nodes": nodes, "tasks": nodes}), STORE
    )
    assert_valid(manifests)
    spec = pod(manifests)
    declared = [v["name"] for v in spec["volumes"]]
    assert len(declared) == len(set(declared))
    mounted = [m["mountPath"] for m in spec["containers"][0]["volumeMounts"]]
    assert len(mounted) == len(set(mounted))
    assert {v["name"] for v in volumes} <= set(declared)


# --- golden file --------------------------------------------------------------------------


def test_golden_volumes() -> None:
    simulate = Step(
        name="simulate",
        script='torchrun --nproc-per-node 4 train.py --data "$DATA" --config "$CONFIG"\n',
        image="ghcr.io/example/train:1.0",
        resources={"nodes": 2, "tasks": 8, "gpus": 4, "memory": "64Gi"},
        env={"DATA": "/data/set-1", "CONFIG": "/etc/train/train.toml"},
        shm="16Gi",
        volumes=[
            {"name": "datasets", "claim": "datasets", "mount_path": "/data", "read_only": True},
            {"name": "results", "claim": "results", "mount_path": "/work/results", "sub_path": "r"},
            {
                "name": "shared",
                "nfs": {"server": "nfs.example.org", "path": "/export/shared"},
                "mount_path": "/shared",
                "read_only": True,
            },
            {
                "name": "config",
                "config_map": "train-config",
                "items": {"train.toml": "train.toml"},
                "mount_path": "/etc/train",
            },
            {"name": "token", "secret": "hub-token", "mode": 0o400, "mount_path": "/etc/token"},
            {"name": "scratch", "empty_dir": {"size_limit": "100Gi"}, "mount_path": "/scratch"},
            {"name": "modules", "host_path": "/opt/modules", "mount_path": "/opt/modules"},
        ],
        outputs={"model": "model.pt"},
    )
    assert_golden(render(simulate, STORE), "volumes")


def assert_golden(manifests: Manifests, case: str) -> None:
    """Assert ``manifests`` are valid and read as golden/<case>.yaml (K8SJOBS_UPDATE_GOLDEN=1
    rewrites it)."""
    assert_valid(manifests)
    text = manifests.to_yaml()
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("K8SJOBS_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), (
        f"{path.name} differs from the rendering; if the change is intended, rerun with "
        "K8SJOBS_UPDATE_GOLDEN=1 and review the diff"
    )


# --- study YAML ---------------------------------------------------------------------------


def test_study_yaml_takes_volumes_and_locates_their_errors(tmp_path: Path) -> None:
    body = """\
name: vols
defaults:
  shm: 2Gi
steps:
  - name: train
    script: echo
    volumes:
      - name: data
        claim: datasets
        mount_path: /data
      - name: scratch
        empty_dir: {medium: Memory, size_limit: 1Gi}
        mount_path: data
"""
    path = tmp_path / "s.yaml"
    path.write_text(body)
    with pytest.raises(StudyError) as caught:
        load_study(path)
    assert str(caught.value).startswith(f"{path}:13: "), caught.value
    assert "volumes.1.mount_path" in str(caught.value)
    path.write_text(body.replace("mount_path: data", "mount_path: /scratch"))
    [train] = load_study(path).steps
    assert [v.name for v in train.volumes] == ["data", "scratch"]
    assert train.shm == "2Gi"
