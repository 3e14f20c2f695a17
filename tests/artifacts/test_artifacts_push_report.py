"""pin() and read_push_report(): the one reader of what the push container reported."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.artifacts import parse_reference
from k8sjobs.artifacts._reference import pin
from k8sjobs.artifacts.handoff import read_push_report

DIGEST = "sha256:" + "ab" * 32
# No '.' in a component: a first component with one would read as a registry host.
_component = st.from_regex(r"[a-z0-9]+([_-][a-z0-9]+)?", fullmatch=True)
_repository = st.lists(_component, min_size=1, max_size=3).map("/".join)
_host = st.sampled_from(["", "localhost/", "registry.example:5000/", "10.0.0.1:443/"])
_suffix = st.one_of(
    st.just(""),
    st.from_regex(r":[\w][\w.-]{0,20}", fullmatch=True),
    st.just("@sha256:" + "cd" * 32),
)


@given(_host, _repository, _suffix)
def test_pin_keeps_registry_and_repository_and_swaps_the_tag_for_the_digest(
    host: str, repository: str, suffix: str
) -> None:
    pinned = parse_reference(pin(f"{host}{repository}{suffix}", DIGEST))
    assert pinned.digest == DIGEST and pinned.tag is None
    assert pinned.repository == repository
    assert pinned.registry == (host.rstrip("/") or None)


@given(_host, _repository, _suffix)
def test_push_result_pinned_is_pin(host: str, repository: str, suffix: str) -> None:
    from k8sjobs.artifacts import PushResult

    reference = f"{host}{repository}{suffix}"
    result = PushResult(reference=reference, digest=DIGEST, layers=(), bytes_sent=0)
    assert result.pinned == pin(reference, DIGEST)


def test_report_is_the_last_json_object_line() -> None:
    report = {
        "model": {"reference": "host:5000/s/b:model", "digest": DIGEST},
        "broken": {"reference": "s/b:broken"},
        "odd": "not an object",
    }
    text = "pushing...\n" + json.dumps(report) + "\n[1, 2]\nnot json\n"
    assert read_push_report(text) == {"model": f"host:5000/s/b@{DIGEST}"}


def test_no_report_reads_as_nothing_pushed() -> None:
    assert read_push_report("") == {}
    assert read_push_report("k8sjobs handoff: the step exited with 3; no outputs pushed.") == {}
