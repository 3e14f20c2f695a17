from __future__ import annotations

import pytest

from k8sjobs.artifacts import InvalidReference, OCILayout, Registry, open_store, parse_reference

DIGEST = "sha256:" + "a" * 64


def test_parse_tag_digest_and_default_tag() -> None:
    assert str(parse_reference("study/train:v1")) == "study/train:v1"
    assert parse_reference("study/train").tag == "latest"
    ref = parse_reference(f"study/train@{DIGEST}")
    assert ref.digest == DIGEST and ref.tag is None and ref.target == DIGEST


def test_first_component_with_dot_colon_or_localhost_is_a_registry() -> None:
    assert parse_reference("reg.example/x:1").registry == "reg.example"
    assert parse_reference("127.0.0.1:5000/x:1").registry == "127.0.0.1:5000"
    assert parse_reference("localhost/x").registry == "localhost"
    assert parse_reference("team/x:1").registry is None


@pytest.mark.parametrize("bad", ["Upper/x", "x:bad tag", "x@sha256:123", "/x", "x//y"])
def test_invalid_references_are_refused_with_the_reason(bad: str) -> None:
    with pytest.raises(InvalidReference):
        parse_reference(bad)


def test_open_store_picks_layout_or_registry(tmp_path: object) -> None:
    assert isinstance(open_store("oci:/tmp/x"), OCILayout)
    assert isinstance(open_store("oci:rel/dir"), OCILayout)
    assert isinstance(open_store("127.0.0.1:5000/prefix", plain_http=True), Registry)
    with pytest.raises(InvalidReference):
        open_store("http://127.0.0.1:5000")
