"""What a manifest is, decided from its Content-Type and its body together, as containerd
does (issue 25 item 11). A Docker schema 1 manifest and an image index whose body omits
``mediaType`` were "pulled" with nothing written and nothing said (failed on main); they are
refused naming the type, and so is a document whose header and body disagree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from k8sjobs.artifacts import Registry, RegistryError, _media
from k8sjobs.testing.registry import RegistryServer

from .artifact_helpers import FAST_RETRY
from .hostile_registry import HostileRegistry, digest_of, file_layer, manifest_for

DATA = b"payload\n"
SCHEMA1 = json.dumps(
    {
        "schemaVersion": 1,
        "name": "team/x",
        "tag": "v1",
        "architecture": "amd64",
        "fsLayers": [{"blobSum": digest_of(DATA)}],
        "history": [{"v1Compatibility": "{}"}],
        "signatures": [{"header": {}, "signature": "abc", "protected": "e30"}],
    }
).encode()
INDEX_BODY = json.dumps(
    {
        "schemaVersion": 2,
        "manifests": [
            {"mediaType": _media.MANIFEST, "digest": digest_of(b"m"), "size": 1,
             "platform": {"architecture": "amd64", "os": "linux"}}
        ],
    }
).encode()  # fmt: skip
MANIFEST_NO_TYPE = json.dumps(
    {k: v for k, v in json.loads(manifest_for([file_layer("f.txt", DATA)])).items()
     if k != "mediaType"}
).encode()  # fmt: skip


async def _pull(tmp_path: Path, body: bytes, content_type: str) -> Path:
    async with HostileRegistry() as hostile:
        hostile.put("v1", body, {"f.txt": DATA}, content_type=content_type)
        async with Registry(hostile.location, plain_http=True, retry=FAST_RETRY) as store:
            await store.pull("team/x:v1", tmp_path / "out")
    return tmp_path / "out"


@pytest.mark.parametrize(
    ("body", "content_type", "said"),
    [
        (SCHEMA1, _media.DOCKER_SCHEMA1_SIGNED, "Docker schema 1 manifest"),
        (SCHEMA1, _media.DOCKER_SCHEMA1, "Docker schema 1 manifest"),
        (SCHEMA1, "application/json", "Docker schema 1 manifest"),
        (INDEX_BODY, _media.INDEX, "an image index"),
        (INDEX_BODY, _media.DOCKER_INDEX, "an image index"),
        (INDEX_BODY, "application/json", "an image index"),
        (INDEX_BODY, _media.MANIFEST, "contradicts itself"),
        (MANIFEST_NO_TYPE, _media.INDEX, "contradicts itself"),
        (b'{"schemaVersion": 2}', "application/octet-stream", "not an artifact manifest"),
    ],
)
async def test_what_is_not_an_artifact_manifest_is_refused_naming_it(
    tmp_path: Path, body: bytes, content_type: str, said: str
) -> None:
    with pytest.raises(RegistryError, match=said) as caught:
        await _pull(tmp_path, body, content_type)
    assert "team/x:v1" in str(caught.value)
    assert not (tmp_path / "out").exists()  # refused before the target is made


@pytest.mark.parametrize(
    "content_type", [_media.MANIFEST, _media.DOCKER_MANIFEST, "application/json", ""]
)
async def test_a_manifest_without_media_type_is_read_by_its_header_and_fields(
    tmp_path: Path, content_type: str
) -> None:
    out = await _pull(tmp_path, MANIFEST_NO_TYPE, content_type)
    assert (out / "f.txt").read_bytes() == DATA


async def test_an_index_in_a_real_registry_is_refused_naming_it(
    plain_registry: RegistryServer, tmp_path: Path
) -> None:
    (tmp_path / "f.txt").write_bytes(DATA)
    async with Registry(plain_registry.location, plain_http=True, retry=FAST_RETRY) as store:
        pushed = await store.push("media/x:one", [tmp_path / "f.txt"])
        manifest = pushed.layers and await store.get_manifest(store._ref(pushed.pinned))
        assert manifest
        index = {
            "schemaVersion": 2,
            "mediaType": _media.INDEX,
            "manifests": [
                {"mediaType": _media.MANIFEST, "digest": pushed.digest, "size": len(manifest[0])}
            ],
        }
        await store.put_manifest(
            store._ref("media/x:index"), json.dumps(index).encode(), _media.INDEX
        )
        with pytest.raises(RegistryError, match=r"media/x:index is an image index .*pull one"):
            await store.pull("media/x:index", tmp_path / "out")
    assert not (tmp_path / "out" / "f.txt").exists()


async def test_an_image_whose_layers_have_no_titles_is_refused_not_pulled_as_nothing(
    tmp_path: Path,
) -> None:
    layer = {"mediaType": _media.LAYER_TAR_GZIP, "digest": digest_of(DATA), "size": len(DATA)}
    body = manifest_for([layer, layer])
    with pytest.raises(RegistryError, match=r"team/x:v1: none of its 2 layers has a title"):
        await _pull(tmp_path, body, _media.MANIFEST)


async def test_an_index_in_an_oci_layout_is_refused_naming_it(tmp_path: Path) -> None:
    """A layout keeps no Content-Type: the stored document's own mediaType stands for it
    (the layout said "manifest" of everything, and an index then read as a contradiction)."""
    from k8sjobs.artifacts import DigestCache, OCILayout

    layout = OCILayout(tmp_path / "layout", cache=DigestCache(tmp_path / "c.sqlite"))
    await layout.put_manifest(layout._ref("media/x:index"), INDEX_BODY, _media.INDEX)
    with pytest.raises(RegistryError, match=r"media/x:index is an image index"):
        await layout.pull("media/x:index", tmp_path / "out")
