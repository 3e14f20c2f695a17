"""A directory layer's ``k8sjobs.io/files-digest`` is a claim, and it is checked.

The step cache keys a directory input by that claim (so a times-only re-push is reused). A
layer of other bytes that copies another's claim must never have the other's result stand
for it: every pull computes the files digest while unpacking and refuses a mismatch, and a
reuse whose input is another archive than the record's reads that layer and checks the claim
first. Forged on a real docker-registry (through a proxy that counts the blob reads) and on
an OCI layout, on the local backend end to end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8sjobs import Session
from k8sjobs.artifacts import OCILayout, _media, _tarball, _untar, open_store
from k8sjobs.artifacts._transfer import StoreFront
from k8sjobs.artifacts.stepcache import CACHE_REPOSITORY, StepCache
from k8sjobs.errors import DigestMismatch
from k8sjobs.local import LocalBackend
from k8sjobs.reuse import CACHED
from k8sjobs.state import StepState
from k8sjobs.steps.spec import Step
from k8sjobs.testing.registry import FaultProxy, RegistryServer

ROOT = Path(__file__).resolve().parents[2]
INPUT = "in/corpus:v1"


@dataclass
class Place:
    """A store for one test: its location, and the proxy in front of it (a registry)."""

    location: str
    proxy: FaultProxy | None

    @property
    def plain_http(self) -> bool:
        return self.proxy is not None

    def blob_reads(self, digest: str) -> int:
        assert self.proxy is not None
        tail = f"/blobs/{digest}"
        return sum(m == "GET" and path.endswith(tail) for m, path, _ in self.proxy.log)


@pytest.fixture(params=["oci", "registry"])
def server(request: pytest.FixtureRequest) -> RegistryServer | None:
    """The real docker-registry of a registry case (None: an OCI layout)."""
    if request.param == "oci":
        return None
    found: RegistryServer = request.getfixturevalue("plain_registry")
    return found


@pytest.fixture
async def place(server: RegistryServer | None, tmp_path: Path) -> AsyncIterator[Place]:
    if server is None:
        yield Place(f"oci:{tmp_path / 'store'}", None)
        return
    async with FaultProxy(server.url) as proxy:  # the registry outlives the test: a prefix
        yield Place(f"{proxy.location}/{tmp_path.name}", proxy)


def corpus(root: Path, text: str) -> Path:
    folder = root / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(text)
    (folder / "sub" / "b.txt").write_text("beta\n")
    (folder / "link").symlink_to("a.txt")
    return folder


def _layer(manifest: bytes) -> dict[str, object]:
    layer = json.loads(manifest)["layers"][0]
    assert isinstance(layer, dict)
    return layer


async def forge(place: Place, tmp_path: Path) -> tuple[str, str]:
    """Push directory A (in/corpus:v1) then put there B, other bytes, whose layer carries A's
    files digest; return (A's claim, B's true files digest)."""
    store = open_store(place.location, plain_http=place.plain_http)
    assert isinstance(store, StoreFront)  # a Registry or an OCILayout
    async with store:
        honest = await store.push(INPUT, [corpus(tmp_path / "a", "alpha\n")])
        other = await store.push("in/corpus:b", [corpus(tmp_path / "b", "forged\n")])
        claim = honest.layers[0].annotations[_media.FILES_DIGEST]
        found = other.layers[0].annotations[_media.FILES_DIGEST]
        manifest, _, _ = await store.get_manifest(store._ref(other.pinned))
        data = json.loads(manifest)
        data["layers"][0]["annotations"][_media.FILES_DIGEST] = claim
        await store.put_manifest(store._ref(INPUT), json.dumps(data).encode(), _media.MANIFEST)
    assert claim != found
    return claim, found


async def test_a_pull_refuses_a_layer_whose_files_are_not_its_claim(
    place: Place, tmp_path: Path
) -> None:
    claim, found = await forge(place, tmp_path)
    target = tmp_path / "target"
    async with open_store(place.location, plain_http=place.plain_http) as store:
        with pytest.raises(DigestMismatch) as refused:
            await store.pull(INPUT, target)
        honest = await store.pull("in/corpus:b", tmp_path / "honest")  # its own claim holds
    message = str(refused.value)
    assert "\n" not in message
    assert "corpus of " in message and "in/corpus:v1" in message  # the layer, the artifact
    assert claim in message and found in message
    assert os.listdir(target) == []  # nothing of it, not even a staging directory
    assert (honest.paths[0] / "a.txt").read_text() == "forged\n"


async def test_the_handoff_pull_refuses_a_false_claim_in_one_line(
    place: Place, tmp_path: Path
) -> None:
    """``python -m k8sjobs.handoff pull`` as the init container runs it."""
    claim, found = await forge(place, tmp_path)
    inputs = tmp_path / "inputs"
    for name in ("work", "inputs", "status"):
        (tmp_path / name).mkdir()
    config = tmp_path / "handoff.json"
    config.write_text(
        json.dumps(
            {
                "store": place.location,
                "plain_http": place.plain_http,
                "inputs": {"data": INPUT},
                "outputs": {},
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "K8SJOBS_WORKDIR": str(tmp_path / "work"),
        "K8SJOBS_INPUTS": str(inputs),
        "K8SJOBS_STATUS_DIR": str(tmp_path / "status"),
    }
    pull = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "k8sjobs.handoff", "pull", "--config", str(config),
        env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(120):
        _, err = await pull.communicate()
    assert pull.returncode == 1, err.decode()
    last = err.decode().strip().splitlines()[-1]
    assert last.startswith("k8sjobs handoff pull: ")
    assert claim in last and found in last and "corpus of " in last
    leftover = [p.relative_to(inputs) for p in inputs.rglob("*")]
    assert leftover in ([], [Path("data")])  # its empty target at most, as for a bad blob


def reader(name: str = "reader") -> Step:
    return Step(
        name=name,
        script='cat "$K8SJOBS_INPUTS"/data/corpus/a.txt > out.txt',
        inputs={"data": INPUT},
        outputs={"out": "out.txt"},
    )


async def run_reader(
    place: Place, tmp_path: Path, readers: int = 1
) -> tuple[str, StepState, str, int]:
    """Run the reader once (with ``readers`` - 1 more like it); return its reason, state,
    output's text, and the verifications made."""
    session = Session(
        study="verify",
        backend=LocalBackend(state_dir=tmp_path / "state"),
        store=place.location,
        plain_http=place.plain_http,
    )
    async with session as s:
        handles = await s.submit_many([reader(f"reader{i or ''}") for i in range(readers)])
        result, *others = await s.gather(*handles, check=False, timeout=240)
        assert all(o.reason == result.reason for o in others), others
        verified = sum(c.verifications for c in s._reuse.caches.values())
        text = ""
        if result.state is StepState.SUCCEEDED:
            store = open_store(place.location, plain_http=place.plain_http)
            async with store:
                pulled = await store.pull(result.outputs["out"], tmp_path / "got")
            text = pulled.paths[0].read_text()
    return result.reason or "", result.state, text, verified


async def test_a_layer_with_a_copied_claim_never_reuses_the_other_s_result(
    place: Place, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_store(place.location, plain_http=place.plain_http) as store:
        await store.push(INPUT, [corpus(tmp_path / "first", "alpha\n")])
    reason, state, text, _ = await run_reader(place, tmp_path)
    assert (state, text) == (StepState.SUCCEEDED, "alpha\n")
    assert reason != CACHED

    await forge(place, tmp_path / "forged")  # in/corpus:v1 now holds B under A's claim
    caplog.set_level(logging.WARNING, "k8sjobs")
    reason, state, text, verified = await run_reader(place, tmp_path)
    assert reason != CACHED, "a result made from other bytes stood for this input"
    assert state is not StepState.SUCCEEDED  # the step ran, and its pull refused the input
    assert verified == 1
    warned = [r.getMessage() for r in caplog.records if "files digest claim" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "input data (in/corpus@sha256:" in warned[0] and "claims" in warned[0]


async def test_an_honest_times_only_re_push_is_reused_after_one_read_of_its_layer(
    place: Place, tmp_path: Path
) -> None:
    folder = corpus(tmp_path / "src", "alpha\n")
    async with open_store(place.location, plain_http=place.plain_http) as store:
        await store.push(INPUT, [folder])
    first = await run_reader(place, tmp_path)
    assert first[0] != CACHED and first[1:] == (StepState.SUCCEEDED, "alpha\n", 0)

    again = await run_reader(place, tmp_path)  # the same archive: no read at all
    assert (again[0], again[3]) == (CACHED, 0)

    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (1_000_000_000, 1_000_000_000), follow_symlinks=False)
    async with open_store(place.location, plain_http=place.plain_http) as store:
        repushed = await store.push(INPUT, [folder])
    layer = repushed.layers[0].digest
    # Three steps read the re-pushed archive: its claim is read once for the three.
    reason, state, text, verified = await run_reader(place, tmp_path, readers=3)
    assert (reason, state, text, verified) == (CACHED, StepState.SUCCEEDED, "alpha\n", 1)
    if place.proxy is not None:
        assert place.blob_reads(layer) == 1  # the check's read; the steps themselves pulled none


async def test_a_record_written_before_archives_were_recorded_has_its_input_checked(
    tmp_path: Path,
) -> None:
    """An old record (no ``inputs``) stands for a forged input no more than a new one."""
    place = Place(f"oci:{tmp_path / 'store'}", None)
    async with open_store(place.location) as store:
        await store.push(INPUT, [corpus(tmp_path / "first", "alpha\n")])
    assert (await run_reader(place, tmp_path))[1] is StepState.SUCCEEDED
    layout = OCILayout(tmp_path / "store")
    async with layout:
        cache = StepCache(layout)
        [tag] = await layout.tags(CACHE_REPOSITORY)
        record = await cache.read(f"sha256:{tag}")
        assert record.inputs  # the new record names them
        await cache.save(dataclasses.replace(record, inputs={}))
    again = await run_reader(place, tmp_path)  # the same archive, but nothing says so
    assert (again[0], again[3]) == (CACHED, 1)
    await forge(place, tmp_path / "forged")
    reason, state, _, verified = await run_reader(place, tmp_path)
    assert reason != CACHED and verified == 1 and state is not StepState.SUCCEEDED


# -- the push's files digest is the pull's, over every tree --------------------------------

_NAMES = st.text(alphabet=st.sampled_from("abcXYZ019-_. é☃"), min_size=1, max_size=110).filter(
    lambda n: n not in (".", "..")
)
_FILE_MODES = st.sampled_from([0o600, 0o644, 0o640, 0o700, 0o755, 0o4755, 0o666, 0o400])
_DIR_MODES = st.sampled_from([0o700, 0o755, 0o750, 0o775])


@st.composite
def trees(draw: st.DrawFn, depth: int = 0) -> dict[str, object]:
    """A directory: name -> bytes and a mode (a file), a str (a symlink to that sibling),
    a list of one str (a hard link to that sibling file), or a dict (a directory, maybe
    empty), with the directory's mode under ""."""
    names = draw(st.lists(_NAMES, max_size=5, unique=True))
    tree: dict[str, object] = {"": draw(_DIR_MODES)}
    files = []
    for name in names:
        kinds = ["file", "dir", "link", "hard"] if depth < 2 else ["file", "link", "hard"]
        kind = draw(st.sampled_from(kinds))
        if kind == "file":
            tree[name] = (draw(st.binary(max_size=1500)), draw(_FILE_MODES))
            files.append(name)
        elif kind == "dir":
            tree[name] = draw(trees(depth + 1))
        elif files and kind == "link":
            tree[name] = draw(st.sampled_from(files))
        elif files:
            tree[name] = [draw(st.sampled_from(files))]
    return tree


def _make(path: Path, tree: dict[str, object]) -> None:
    path.mkdir()
    for name, value in tree.items():
        if not name:
            continue
        if isinstance(value, dict):
            _make(path / name, value)
        elif isinstance(value, str):
            (path / name).symlink_to(value)
        elif isinstance(value, list):
            os.link(path / value[0], path / name)
        else:
            assert isinstance(value, tuple)
            (path / name).write_bytes(value[0])
            (path / name).chmod(value[1])
    path.chmod(int(tree[""]))  # type: ignore[call-overload]


def _restore(path: Path) -> None:
    """Give the owner back the right to remove what a tree's modes took away."""
    for inner in [path, *path.rglob("*")]:
        if inner.is_dir() and not inner.is_symlink():
            inner.chmod(0o755)


@given(
    tree=trees(),
    compression=st.sampled_from(["none", "gzip0", "gzip1", "zstd"]),
    piece=st.integers(1, 5000),
)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_push_s_files_digest_is_what_every_pull_finds(
    tree: dict[str, object], compression: str, piece: int
) -> None:
    kind = "gzip" if compression.startswith("gzip") else compression
    level = int(compression[-1]) if kind == "gzip" else 3
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        _make(root, tree)
        try:
            archive = io.BytesIO()
            info = _tarball.write_archive(_tarball.scan(root), archive, kind, level)  # type: ignore[arg-type]
        finally:
            _restore(root)
        blob = archive.getvalue()
        media_type = _tarball.media_type_for(kind)  # type: ignore[arg-type]
        for target in (None, Path(tmp) / "out"):  # counted only, and unpacked
            if target is not None:
                target.mkdir()
            files = _tarball.FilesDigest()
            extractor = _untar.Extractor(
                target, media_type, _tarball.zstandard_module, root="data", files=files
            )
            for start in range(0, len(blob), piece):
                extractor.feed(blob[start : start + piece])
            assert extractor.close() == ["data"]
            assert files.digest() == info.files_digest
            if target is not None:
                _restore(target)


async def test_a_claim_that_cannot_be_checked_runs_the_step_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Any failure to check (here a bound that is not a number) is no licence to reuse."""
    place = Place(f"oci:{tmp_path / 'store'}", None)
    folder = corpus(tmp_path / "src", "alpha\n")
    async with open_store(place.location) as store:
        await store.push(INPUT, [folder])
        assert (await run_reader(place, tmp_path))[1] is StepState.SUCCEEDED
        for path in [folder, *folder.rglob("*")]:
            os.utime(path, (1_000_000_000, 1_000_000_000), follow_symlinks=False)
        await store.push(INPUT, [folder])
    monkeypatch.setenv("K8SJOBS_CACHE_VERIFY_TIMEOUT", "soon")
    caplog.set_level(logging.WARNING, "k8sjobs")
    reason, state, text, _ = await run_reader(place, tmp_path)
    assert (reason != CACHED, state, text) == (True, StepState.SUCCEEDED, "alpha\n")
    warned = [r.getMessage() for r in caplog.records if "files digest claim" in r.getMessage()]
    assert len(warned) == 1 and 'K8SJOBS_CACHE_VERIFY_TIMEOUT: "soon"' in warned[0], warned
