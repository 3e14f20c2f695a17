"""Fuzzed artifacts end to end: manifests with hostile titles, media types, sizes and digests,
and layers of random bytes or archives with hostile members, served over real HTTP. A pull
either succeeds or raises a RegistryError, and never writes outside its target."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8sjobs.artifacts import PullLimits, Registry, RegistryError, _media

from .hostile_registry import HostileRegistry, manifest_for

titles = st.sampled_from(["d", "f.txt", "d/x.txt", "../up", "/abs", "a\\b", "", ".", "e" * 300])
member_names = st.sampled_from(["d/a", "d/../../x", "other/y", "/abs", "d", "d/s/t", "./d/b"])


@st.composite
def archives(draw: st.DrawFn) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in draw(st.lists(member_names, max_size=4)):
            info = tarfile.TarInfo(name)
            kind = draw(st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE]))
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = draw(st.sampled_from(["a", "../../etc", "/etc"]))
            data = b"x" * draw(st.integers(0, 600)) if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@st.composite
def layers(draw: st.DrawFn) -> tuple[dict[str, object], bytes]:
    blob = draw(st.one_of(st.binary(max_size=300), archives()))
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    media = draw(st.sampled_from([_media.LAYER_TAR, _media.LAYER_TAR_GZIP, "text/plain"]))
    annotations = {_media.TITLE: draw(titles)}
    if draw(st.booleans()):
        annotations[_media.UNPACK] = draw(st.sampled_from(["true", "false", "TRUE"]))
    layer = {
        "mediaType": media,
        "digest": draw(st.sampled_from([digest, digest, digest, digest[:-1] + "0", "sha256:.."])),
        "size": draw(st.sampled_from([len(blob)] * 3 + [len(blob) + 1, max(0, len(blob) - 1)])),
        "annotations": annotations,
    }
    return layer, blob


async def _pull(found: list[tuple[dict[str, object], bytes]], sandbox: Path) -> None:
    async with HostileRegistry(chunk=97) as hostile:
        hostile.put("v1", manifest_for([layer for layer, _ in found]))
        for _, blob in found:
            hostile.blobs["sha256:" + hashlib.sha256(blob).hexdigest()] = blob
        async with Registry(hostile.location, plain_http=True) as registry:
            with contextlib.suppress(RegistryError):
                await registry.pull("r:v1", sandbox / "a" / "target", limits=PullLimits(10**6))


@given(st.lists(layers(), min_size=1, max_size=3))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzzed_artifact_pulls_or_raises_and_stays_inside(found: list[object]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = Path(tmp)
        (sandbox / "a").mkdir()
        (sandbox / "a" / "beside.txt").write_text("kept")
        asyncio.run(_pull(found, sandbox))  # type: ignore[arg-type]
        outside = {
            p.relative_to(sandbox).as_posix()
            for p in sandbox.rglob("*")
            if not p.is_relative_to(sandbox / "a" / "target")
        }
        assert outside == {"a", "a/beside.txt", "a/target"} or outside == {"a", "a/beside.txt"}
        assert (sandbox / "a" / "beside.txt").read_text() == "kept"
        assert not Path("/abs").exists() and not Path("/etc/k8sjobs-fuzz").exists()
