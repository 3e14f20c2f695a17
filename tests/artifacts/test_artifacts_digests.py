"""Digests, references and manifests from anywhere are checked against their grammar before a
digest or a name is used to build a path or a URL (property tests and hostile stores)."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs.artifacts import InvalidReference, OCILayout, Registry, RegistryError
from k8sjobs.artifacts._media import check_digest, decode_manifest
from k8sjobs.artifacts._reference import parse_reference

from .hostile_registry import HostileRegistry, digest_of, file_layer, manifest_for

GRAMMAR = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")
HEX = "0123456789abcdef"
valid_digests = st.one_of(
    st.text(HEX, min_size=64, max_size=64).map(lambda h: "sha256:" + h),
    st.text(HEX, min_size=128, max_size=128).map(lambda h: "sha512:" + h),
)


def _mutate(digest: str, data: st.DataObject) -> str:
    i = data.draw(st.integers(0, len(digest)))
    op = data.draw(st.sampled_from(["insert", "replace", "delete", "suffix"]))
    ch = data.draw(st.characters())
    if op == "insert":
        return digest[:i] + ch + digest[i:]
    if op == "replace" and i < len(digest):
        return digest[:i] + ch + digest[i + 1 :]
    if op == "delete" and i < len(digest):
        return digest[:i] + digest[i + 1 :]
    return digest + data.draw(st.sampled_from(["\n", "/..", " ", "\0", "A"]))


@given(st.one_of(st.text(), valid_digests), st.data())
@settings(max_examples=400)
def test_any_digest_off_the_grammar_is_refused(seed: str, data: st.DataObject) -> None:
    digest = _mutate(seed, data) if data.draw(st.booleans()) else seed
    if GRAMMAR.fullmatch(digest):
        assert check_digest(digest, "test") == digest
    else:
        with pytest.raises(InvalidReference, match="not a valid digest"):
            check_digest(digest, "test")


@given(st.text(max_size=120))
@settings(max_examples=400)
def test_any_reference_parses_to_grammar_or_is_refused(text: str) -> None:
    try:
        ref = parse_reference(text)
    except InvalidReference as exc:
        assert "Reference" in str(exc)
        return
    # Whatever is accepted is plain ASCII with no character that could change a URL.
    for part in (ref.repository, ref.tag or "", ref.digest or "", ref.registry or ""):
        assert part.isascii() and not re.search(r"[\s?#%@\\]", part)
    assert ".." not in ref.repository.split("/")
    assert ref.digest is None or GRAMMAR.fullmatch(ref.digest)


@pytest.mark.parametrize("text", ["../r:v1", "./r:v1", "a..b/r:v1", "study/a\n", "Ünï/x:v1"])
def test_bad_reference_names_itself(text: str) -> None:
    with pytest.raises(InvalidReference) as caught:
        parse_reference(text)
    assert repr(text[:200]) in str(caught.value)


async def test_registry_pull_of_dotdot_reference_is_a_clear_error(tmp_path: Path) -> None:
    async with Registry("127.0.0.1:9", plain_http=True) as registry:
        with pytest.raises(InvalidReference, match=r"'\.\./r:v1'.*not a registry host"):
            await registry.pull("../r:v1", tmp_path / "out")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)
descriptor_like = st.fixed_dictionaries(
    {},
    optional={
        "mediaType": st.one_of(st.just("application/vnd.oci.image.layer.v1.tar"), json_values),
        "digest": st.one_of(valid_digests, st.text(max_size=80), json_values),
        "size": st.one_of(st.integers(-5, 2**70), json_values),
        "annotations": st.one_of(st.dictionaries(st.text(max_size=10), st.text()), json_values),
    },
)


@given(
    st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"layers": st.one_of(st.lists(descriptor_like, max_size=4), json_values)},
            optional={"config": descriptor_like, "mediaType": json_values},
        ),
    )
)
@settings(max_examples=400)
def test_fuzzed_manifests_decode_or_raise_registry_error(body: object) -> None:
    try:
        manifest = decode_manifest(json.dumps(body).encode(), "fuzz:v1")
    except RegistryError:
        return
    for desc in manifest.blobs():
        assert GRAMMAR.fullmatch(desc.digest)
        assert isinstance(desc.size, int) and desc.size >= 0
        assert all(isinstance(v, str) for v in desc.annotations.values())


HOSTILE_DIGESTS = ["sha256:../../../../../../dev/zero", "sha256:../../v2/other/blobs/x", "md5:00"]


@pytest.mark.parametrize("bad", HOSTILE_DIGESTS)
async def test_registry_never_requests_a_hostile_digest(bad: str, tmp_path: Path) -> None:
    layer = {**file_layer("f.txt", b"x"), "digest": bad}
    async with HostileRegistry() as hostile:
        hostile.put("v1", manifest_for([layer]))
        async with Registry(hostile.location, plain_http=True) as registry:
            with pytest.raises(InvalidReference, match="not a valid digest"):
                await registry.pull("r:v1", tmp_path / "out")
    assert [path for _, path in hostile.requests if "/blobs/" in path] == []
    assert list((tmp_path / "out").iterdir()) == [] if (tmp_path / "out").exists() else True


def _plant(layout_root: Path, tag: str, manifest: bytes) -> None:
    """Store ``manifest`` in an OCI layout by hand and tag it."""
    digest = digest_of(manifest)
    (layout_root / "blobs" / "sha256" / digest.split(":")[1]).write_bytes(manifest)
    index = json.loads((layout_root / "index.json").read_text())
    index["manifests"].append(
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": len(manifest),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }
    )
    (layout_root / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("bad", HOSTILE_DIGESTS)
async def test_layout_never_reads_a_hostile_digest(bad: str, tmp_path: Path) -> None:
    seed = tmp_path / "seed.txt"
    seed.write_text("seed")
    layout = OCILayout(tmp_path / "layout")
    await layout.push("r:seed", [seed])
    _plant(tmp_path / "layout", "r:v1", manifest_for([{**file_layer("f", b"x"), "digest": bad}]))
    with pytest.raises(InvalidReference, match="not a valid digest"):
        await layout.pull("r:v1", tmp_path / "out")
    assert not (tmp_path / "out" / "f").exists()


index_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)
index_entries = st.fixed_dictionaries(
    {},
    optional={
        "digest": st.one_of(valid_digests, st.text(max_size=70), index_values),
        "annotations": st.one_of(
            st.just({"org.opencontainers.image.ref.name": "r:v1"}), index_values
        ),
    },
)


@given(st.one_of(index_values, st.fixed_dictionaries({"manifests": st.lists(index_entries)})))
@settings(max_examples=200, deadline=None)
def test_fuzzed_layout_index_resolves_or_raises_registry_error(index: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "index.json").write_text(json.dumps(index))
        layout = OCILayout(root)
        try:
            digest = asyncio.run(layout.resolve("r:v1"))
        except RegistryError:
            return
        assert GRAMMAR.fullmatch(digest)


@given(st.one_of(st.text(max_size=140), valid_digests.map(lambda d: d + "/..")))
@settings(max_examples=300)
def test_blob_paths_and_urls_are_built_only_from_grammar_digests(digest: str) -> None:
    registry = Registry("127.0.0.1:5000", plain_http=True)
    layout = OCILayout("/nonexistent-layout")
    ref = parse_reference("r:v1")
    if GRAMMAR.fullmatch(digest):
        assert registry._blob_url(ref, digest).endswith(f"/v2/r/blobs/{digest}")
        assert layout._blob_path(digest).name == digest.split(":")[1]
        return
    with pytest.raises(InvalidReference):
        registry._blob_url(ref, digest)
    with pytest.raises(InvalidReference):
        layout._blob_path(digest)
