"""`k8sjobs image build`: the handoff image built without Docker, checked from the registry
with plain HTTP (not our client), layer by layer, and run."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from k8sjobs.artifacts import Registry
from k8sjobs.artifacts._media import INDEX, MANIFEST, sha256_digest
from k8sjobs.artifacts._reference import Reference
from k8sjobs.artifacts.image import SITE_DIR, ImageBuildError, ImageSpec, Platform, build_image
from k8sjobs.cli.main import main
from k8sjobs.testing.registry import RegistryServer, registry_available, registry_process

ARCHES = ("amd64", "arm64")


@pytest.fixture(scope="module")
def server() -> Iterator[RegistryServer]:
    if not registry_available():
        if os.environ.get("CI"):
            pytest.fail("docker-registry is not installed (apt-get install docker-registry)")
        pytest.skip("docker-registry is not installed")
    with registry_process() as running:
        yield running


def _get(server: RegistryServer, path: str, accept: str = "*/*") -> bytes:
    request = urllib.request.Request(f"{server.url}/v2/{path}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as response:
        return bytes(response.read())


def _blob(server: RegistryServer, repo: str, digest: str) -> bytes:
    data = _get(server, f"{repo}/blobs/{digest}")
    assert sha256_digest(data) == digest
    return data


def _tar_gz(members: dict[str, bytes]) -> tuple[bytes, str]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue()), sha256_digest(raw.getvalue())


async def _push_base(server: RegistryServer, tag: str, env: list[str]) -> str:
    """Push a two-platform base image (an OCI index) and return its reference."""
    async with Registry(server.location, plain_http=True) as registry:
        ref = Reference("base/python", tag, None, server.location)
        entries = []
        for arch in ARCHES:
            layer, diff_id = _tar_gz({"etc/base-release": arch.encode()})
            config = {
                "architecture": arch,
                "os": "linux",
                "config": {"Env": env, "Cmd": ["python3"]},
                "rootfs": {"type": "layers", "diff_ids": [diff_id]},
                "history": [{"created_by": "base"}],
            }
            config_bytes = json.dumps(config).encode()
            for data in (layer, config_bytes):
                await registry.put_blob_bytes(ref, data, sha256_digest(data))
            manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": MANIFEST,
                    "config": {
                        "mediaType": "application/vnd.oci.image.config.v1+json",
                        "digest": sha256_digest(config_bytes),
                        "size": len(config_bytes),
                    },
                    "layers": [
                        {
                            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                            "digest": sha256_digest(layer),
                            "size": len(layer),
                        }
                    ],
                }
            ).encode()
            pinned = Reference("base/python", None, sha256_digest(manifest), server.location)
            await registry.put_manifest(pinned, manifest, MANIFEST)
            entries.append(
                {
                    "mediaType": MANIFEST,
                    "digest": sha256_digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": arch, "os": "linux"},
                }
            )
        index = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": entries})
        await registry.put_manifest(ref, index.encode(), INDEX)
    return f"{server.location}/base/python:{tag}"


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    """A directory holding one pure-Python wheel, demo_pkg 1.0 (made by hand, no build)."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    files = {
        "demo_pkg/__init__.py": b"VALUE = 'handoff-ready'\n",
        "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
        "demo_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},," + "\n" for name in [*files, "demo_pkg-1.0.dist-info/RECORD"])
    with zipfile.ZipFile(folder / "demo_pkg-1.0-py3-none-any.whl", "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)
        whl.writestr("demo_pkg-1.0.dist-info/RECORD", record)
    return folder


def _spec(base: str, wheels: Path, **changes: Any) -> ImageSpec:
    fields: dict[str, Any] = {
        "base": base,
        "requirements": ("demo_pkg",),
        "pip_args": ("--no-index", "--find-links", str(wheels)),
        **changes,
    }
    return ImageSpec(**fields)


async def test_build_pushes_a_verified_multi_platform_image_that_runs(
    server: RegistryServer, wheels: Path, tmp_path: Path
) -> None:
    env = ["PATH=/usr/local/bin:/usr/bin", "PYTHON_VERSION=3.11.7"]
    base = await _push_base(server, "3.11", env)
    digest = await build_image(
        f"{server.location}/mirror/handoff:t1",
        _spec(base, wheels),
        plain_http=True,
        base_plain_http=True,
    )

    index_bytes = _get(server, "mirror/handoff/manifests/t1", INDEX)
    assert sha256_digest(index_bytes) == digest
    index = json.loads(index_bytes)
    assert [m["platform"]["architecture"] for m in index["manifests"]] == list(ARCHES)
    for entry in index["manifests"]:
        manifest = json.loads(_get(server, f"mirror/handoff/manifests/{entry['digest']}", MANIFEST))
        config = json.loads(_blob(server, "mirror/handoff", manifest["config"]["digest"]))
        layers = [_blob(server, "mirror/handoff", d["digest"]) for d in manifest["layers"]]
        # Every layer's uncompressed digest is the config's diff_id: what a runtime checks.
        assert config["rootfs"]["diff_ids"] == [
            "sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest() for layer in layers
        ]
        assert len(config["history"]) == len(layers)
        run = config["config"]
        assert run["Entrypoint"] == ["python", "-m", "k8sjobs.handoff"]
        assert run["User"] == "65532:65532" and "Cmd" not in run
        assert [*env, f"PYTHONPATH={SITE_DIR}"] == run["Env"]
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layers[-1]))) as tar:
            members = tar.getmembers()
            assert all(m.uid == 0 and m.mtime == 0 for m in members)
            names = {m.name for m in members}
            assert "opt/k8sjobs/site/demo_pkg/__init__.py" in names
            assert not any("/bin/" in n or n.endswith(".pyc") for n in names)
            if entry["platform"]["architecture"] == "amd64":
                tar.extractall(tmp_path / "root", filter="data")

    site = tmp_path / "root" / SITE_DIR.strip("/")
    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", "import demo_pkg; print(demo_pkg.VALUE)"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert shown.stdout.strip() == "handoff-ready"

    again = await build_image(
        f"{server.location}/mirror/handoff:t2",
        _spec(base, wheels),
        plain_http=True,
        base_plain_http=True,
    )
    assert again == digest  # reproducible: the same inputs give the same image


async def test_build_names_what_is_missing(server: RegistryServer, wheels: Path) -> None:
    base = await _push_base(server, "no-version", ["PATH=/usr/bin"])
    dest = f"{server.location}/mirror/handoff:bad"
    with pytest.raises(ImageBuildError, match="--python-version"):
        await build_image(dest, _spec(base, wheels), plain_http=True, base_plain_http=True)
    s390x = (Platform.parse("linux/s390x"),)
    with pytest.raises(ImageBuildError, match=r"has: linux/amd64, linux/arm64"):
        await build_image(
            dest,
            _spec(base, wheels, platforms=s390x, python_version="3.11"),
            plain_http=True,
            base_plain_http=True,
        )
    with pytest.raises(ImageBuildError, match="pip could not install"):
        await build_image(
            dest,
            _spec(base, wheels, requirements=("no-such-package-k8sjobs",), python_version="3.11"),
            plain_http=True,
            base_plain_http=True,
        )


@pytest.mark.parametrize("text", ["amd64", "windows/amd64", "linux/", "linux/sparc", "a/b/c/d"])
def test_platform_refuses_what_it_cannot_build(text: str) -> None:
    with pytest.raises(ImageBuildError, match=f'"{text}"'):
        Platform.parse(text)


async def test_destination_must_name_a_registry(wheels: Path) -> None:
    with pytest.raises(ImageBuildError, match="names no registry"):
        await build_image("handoff:1", _spec("python:3.12", wheels))


def test_commands_build_the_repository_dockerfile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image", "commands", "registry.example/k8sjobs/handoff:1"]) == 0
    out = capsys.readouterr().out
    assert "--platform linux/amd64,linux/arm64 -f Dockerfile.handoff" in out
    assert "-t registry.example/k8sjobs/handoff:1 --push" in out
    assert (Path(__file__).parents[2] / "Dockerfile.handoff").is_file()


def _wheel(folder: Path, name: str, tag: str, body: bytes = b"VALUE = 1\n") -> Path:
    """Write a minimal wheel of package ``name`` 1.0 with the wheel tag ``tag``."""
    dist = f"{name}-1.0.dist-info"
    purelib = b"true" if tag == "py3-none-any" else b"false"
    files = {
        f"{name}/__init__.py": body,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
        + purelib
        + f"\nTag: {tag}\n".encode(),
    }
    record = "".join(f"{n},,\n" for n in [*files, f"{dist}/RECORD"])
    path = folder / f"{name}-1.0-{tag}.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for member, data in files.items():
            whl.writestr(member, data)
        whl.writestr(f"{dist}/RECORD", record)
    return path


def test_wheel_tags_are_the_whole_manylinux_ladder() -> None:
    tags = Platform.parse("linux/amd64").wheel_tags()
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "linux_x86_64"
    for older in ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"):
        assert older in tags
    assert tags.index("manylinux_2_27_x86_64") < tags.index("manylinux2014_x86_64")


async def test_a_dependency_with_only_manylinux2014_wheels_installs(
    server: RegistryServer, tmp_path: Path
) -> None:
    """As cffi does: wheels tagged manylinux2014 only. pip given only manylinux_2_28 refused
    them (ResolutionImpossible); the ladder takes them, for each architecture."""
    folder = tmp_path / "index"
    folder.mkdir()
    for machine in ("x86_64", "aarch64"):
        _wheel(folder, "old_pkg", f"cp311-cp311-manylinux2014_{machine}")
    env = ["PATH=/usr/bin", "PYTHON_VERSION=3.11.7"]
    base = await _push_base(server, "ladder", env)
    digest = await build_image(
        f"{server.location}/mirror/handoff:ladder",
        _spec(base, folder, requirements=("old_pkg",)),
        plain_http=True,
        base_plain_http=True,
    )
    assert digest.startswith("sha256:")


async def test_image_build_installs_the_given_wheel(
    server: RegistryServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--wheel: a development build or a fork, not the PyPI release of this version."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheel = _wheel(folder, "k8sjobs", "py3-none-any", b"FORK = 'mine'\n")
    base = await _push_base(server, "wheel", ["PATH=/usr/bin", "PYTHON_VERSION=3.11.7"])
    dest = f"{server.location}/mirror/handoff:fork"
    argv = ["image", "build", "--push", dest, "--base", base, "--wheel", str(wheel)]
    argv += ["--pip-arg=--no-index", "--plain-http", "--base-plain-http"]
    assert await asyncio.to_thread(main, argv) == 0, capsys.readouterr().err
    index = json.loads(_get(server, "mirror/handoff/manifests/fork", INDEX))
    entry = index["manifests"][0]
    manifest = json.loads(_get(server, f"mirror/handoff/manifests/{entry['digest']}", MANIFEST))
    layer = _blob(server, "mirror/handoff", manifest["layers"][-1]["digest"])
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as tar:
        init = tar.extractfile("opt/k8sjobs/site/k8sjobs/__init__.py")
        assert init is not None and init.read() == b"FORK = 'mine'\n"


async def test_without_a_wheel_a_checkout_builds_its_own(tmp_path: Path) -> None:
    """From a source checkout (as here), the image gets a wheel of this source."""
    from k8sjobs.artifacts.image import source_checkout
    from k8sjobs.cli.image import handoff_requirements

    assert source_checkout() == Path(__file__).parents[2].absolute()
    (built,) = await handoff_requirements(None, None, tmp_path)
    assert Path(built).name.startswith("k8sjobs-") and built.endswith(".whl")
    with zipfile.ZipFile(built) as whl:
        assert "k8sjobs/cli/image.py" in whl.namelist()
    assert await handoff_requirements(None, ["x==1"], tmp_path) == ("x==1",)
