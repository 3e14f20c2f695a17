"""Result records read from a store that anyone writes (issue 34, items 2 and 3).

A record is one tag of ``k8sjobs/cache`` in the study's store: another tool, another team or
a crash can leave anything there. Whatever it holds (arbitrary JSON, arbitrary bytes, JSON
nested 200,000 deep, a number such as 1e400, a field of the wrong type), a lookup answers
"no record" (the step runs anew) and ``cache ls`` lists it as unreadable, never a traceback.
Tags of that repository that are not step keys are skipped, by ``ls`` and by ``clear``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k8sjobs import Session, Step
from k8sjobs.artifacts import OCILayout, _media
from k8sjobs.artifacts.stepcache import (
    CACHE_REPOSITORY,
    RESULT_TYPE,
    ResultRecord,
    StepCache,
    record_reference,
)
from k8sjobs.cli.main import main
from k8sjobs.local import LocalBackend
from k8sjobs.state import StepResult, StepState

KEY = "sha256:" + "ab" * 32
OUTPUT_MANIFEST = _media.encode_manifest(_media.build_manifest([], "application/x-out", {}))
OUTPUT_REF = f"k8sjobs/s/a@{_media.sha256_digest(OUTPUT_MANIFEST)}"


def valid_record() -> dict[str, Any]:
    return {
        "key": KEY,
        "study": "s",
        "step": "a",
        "exit_code": 0,
        "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:00:01+00:00",
        "backend": "local",
        "namespace": "default",
        "object_name": "a",
        "k8sjobs_version": "1",
        "outputs": {
            "out": {
                "reference": OUTPUT_REF,
                "media_type": _media.MANIFEST,
                "manifest": base64.b64encode(OUTPUT_MANIFEST).decode(),
            }
        },
    }


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
FIELDS = sorted(valid_record())
OUTPUT_FIELDS = ["reference", "media_type", "manifest"]


@st.composite
def one_field_wrong(draw: st.DrawFn) -> str:
    """A valid record with one field (top level or of its output) replaced or removed."""
    record = valid_record()
    where = record if draw(st.booleans()) else record["outputs"]["out"]
    field = draw(st.sampled_from(FIELDS if where is record else OUTPUT_FIELDS))
    if draw(st.booleans()):
        del where[field]
    else:
        where[field] = draw(JSON | st.sampled_from([1e400, -1, 256, True, 2**70, "x" * 5000]))
    return json.dumps(record)


ANNOTATIONS = st.one_of(
    one_field_wrong(),
    JSON.map(json.dumps),
    st.text(max_size=60),
    st.integers(1, 300_000).map(lambda depth: "[" * depth + "]" * depth),
    st.just('{"exit_code": 1e400}'),
)


def result_manifest(annotation: str) -> bytes:
    annotations = {"k8sjobs.io/step-result": annotation}
    return _media.encode_manifest(_media.build_manifest([], RESULT_TYPE, annotations))


MANIFESTS = st.one_of(
    ANNOTATIONS.map(result_manifest),
    st.binary(max_size=200),
    JSON.map(lambda value: json.dumps(value).encode()),
    st.integers(1, 300_000).map(lambda depth: b"{" + b'"a":[' * depth + b"]" * depth + b"}"),
)


@pytest.fixture(scope="module")
def layout() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(_put(Path(root), result_manifest(json.dumps(valid_record()))))
        yield Path(root)


async def _put(root: Path, manifest: bytes, tag: str | None = None) -> None:
    async with OCILayout(root) as store:
        reference = f"{CACHE_REPOSITORY}:{tag}" if tag else record_reference(KEY)
        await store.put_manifest(store._ref(reference), manifest, _media.MANIFEST)


def cli(*words: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(words))
    return code, out.getvalue(), err.getvalue()


def test_a_valid_record_reads_back_whole(layout: Path) -> None:
    async def read() -> ResultRecord | None:
        async with OCILayout(layout) as store:
            return await StepCache(store).lookup(KEY)

    asyncio.run(_put(layout, result_manifest(json.dumps(valid_record()))))
    record = asyncio.run(read())
    assert record is not None and record.outputs["out"].reference == OUTPUT_REF


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(manifest=MANIFESTS)
def test_any_record_bytes_are_a_record_or_none_and_cache_ls_lists_them(
    layout: Path, manifest: bytes
) -> None:
    async def read() -> ResultRecord | None:
        await _put(layout, manifest)
        async with OCILayout(layout) as store:
            return await StepCache(store).lookup(KEY)

    record = asyncio.run(read())
    if record is not None:  # only a record every field of which is what it claims
        assert record.key == KEY and isinstance(record.exit_code, int)
        assert all(isinstance(v, str) for v in (record.study, record.step, record.backend))
    code, out, err = cli("cache", "ls", "--store", f"oci:{layout}")
    assert code == 0, err
    assert len(out.splitlines()) == 1 and out.startswith(KEY[:19]), out
    assert ("unreadable" in out) == (record is None), out
    assert "\x1b" not in out


def test_foreign_tags_in_the_cache_repository_are_skipped_by_ls_and_clear(
    tmp_path: Path,
) -> None:
    asyncio.run(_put(tmp_path, result_manifest(json.dumps(valid_record()))))
    for tag in ("0-backup", "latest", "AB" * 32, "ab" * 31):
        asyncio.run(_put(tmp_path, OUTPUT_MANIFEST, tag))
    code, out, err = cli("cache", "ls", "--store", f"oci:{tmp_path}")
    assert code == 0, err
    assert out.split()[:2] == [KEY[:19], "s/a"]
    assert "skipped 4 tags of k8sjobs/cache that are not a step key" in err
    code, out, err = cli("cache", "clear", "--store", f"oci:{tmp_path}")
    assert (code, out) == (0, "forgot 1 recorded result\n"), err

    async def tags() -> list[str]:
        async with OCILayout(tmp_path) as store:
            return await store.tags(CACHE_REPOSITORY)

    foreign = ["0-backup", "latest", "AB" * 32, "ab" * 31]
    assert sorted(asyncio.run(tags())) == sorted([*foreign, KEY.partition(":")[2]])  # a mark
    code, out, err = cli("cache", "ls", "--store", f"oci:{tmp_path}")
    assert (code, out) == (0, ""), err  # the cleared key's mark is no record


@pytest.mark.parametrize(
    "annotation",
    [
        "[" * 200_000 + "]" * 200_000,
        json.dumps({**valid_record(), "exit_code": 1e400}),
        json.dumps({**valid_record(), "outputs": ["out"]}),
        json.dumps({**valid_record(), "started_at": 12}),
    ],
    ids=["nested-200000-deep", "exit-code-1e400", "outputs-a-list", "time-a-number"],
)
async def test_an_unreadable_record_makes_the_step_run_anew_never_fail(
    tmp_path: Path, annotation: str
) -> None:
    store, ran = tmp_path / "store", tmp_path / "ran"
    step = Step(name="a", script=f"echo x >> {ran}; echo y > out.txt", outputs={"out": "out.txt"})

    async def run(study: str) -> StepResult:
        backend = LocalBackend(state_dir=tmp_path / study)
        async with Session(study=study, backend=backend, store=f"oci:{store}") as s:
            return (await s.gather(await s.submit(step), timeout=120))[0]

    assert (await run("first")).state is StepState.SUCCEEDED
    async with OCILayout(store) as opened:
        (tag,) = await opened.tags(CACHE_REPOSITORY)
        ref = opened._ref(f"{CACHE_REPOSITORY}:{tag}")
        await opened.put_manifest(ref, result_manifest(annotation), _media.MANIFEST)
    again = await run("second")  # another study: nothing of the first to adopt
    assert (again.state, again.reason) == (StepState.SUCCEEDED, "Completed"), again
    assert ran.read_text().split() == ["x", "x"]


@pytest.mark.parametrize(
    "command", [["cache", "ls"], ["cache", "clear"], ["artifact", "tags", "study/data"]]
)
def test_a_store_that_does_not_exist_is_an_error_not_an_empty_cache(
    tmp_path: Path, command: list[str]
) -> None:
    """A mistyped --store listed nothing and exited 0 (artifact tags did until now)."""
    missing = tmp_path / "no" / "such" / "dir"
    code, out, err = cli(*command, "--store", f"oci:{missing}")
    assert code == 1 and out == "", out
    assert f"no OCI layout at {missing}" in err and "--store" in err
    assert not missing.exists()  # nothing made where nothing was
