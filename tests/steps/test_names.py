"""Names: every derived name is a valid, bounded RFC 1123 label, stable, and collision-free."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from k8sjobs.steps.names import (
    DNS_LABEL_MAX,
    JOB_NAME_MAX,
    digest_suffix,
    is_dns_label,
    job_name,
    label_value,
    slug,
)

# A Service name (the headless Service shares the Job's name) is an RFC 1035 label.
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

names = st.text(min_size=0, max_size=300)
readable = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_.#/")


@given(study=names, step=names)
def test_job_name_is_a_dns_label_with_room_for_an_index(study: str, step: str) -> None:
    name = job_name(study, step)
    assert len(name) <= JOB_NAME_MAX
    assert is_dns_label(name)
    assert _DNS_1035.match(name), name
    assert is_dns_label(f"{name}-{10_000}")
    assert job_name(study, step) == name


@given(name=names)
def test_label_value_is_a_dns_label(name: str) -> None:
    value = label_value(name)
    assert len(value) <= DNS_LABEL_MAX
    assert is_dns_label(value)
    assert label_value(name) == value


@given(first=st.tuples(names, names), second=st.tuples(names, names))
def test_different_inputs_never_share_a_job_name(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    if first != second:
        assert job_name(*first) != job_name(*second)


@given(first=names, second=names)
def test_different_inputs_never_share_a_label_value(first: str, second: str) -> None:
    if first != second:
        assert label_value(first) != label_value(second)


def _variants(text: str) -> set[str]:
    """Return spellings of ``text`` that read the same once lowercased and punctuation folded."""
    return {
        text,
        text.upper(),
        text.title(),
        text.replace(" ", "-"),
        text.replace(" ", "_"),
        text.replace(" ", "."),
        text.replace(" ", "  "),
        f" {text} ",
        f"{text}!",
        f"#{text}",
    }


@settings(max_examples=50)
@given(study=readable, step=readable)
def test_case_and_punctuation_variants_get_different_names(study: str, step: str) -> None:
    pairs = {(a, b) for a in _variants(study) for b in _variants(step)}
    assert len({job_name(a, b) for a, b in pairs}) == len(pairs)
    steps = _variants(step)
    assert len({label_value(s) for s in steps}) == len(steps)


@settings(max_examples=20)
@given(prefix=st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=60, max_size=250))
def test_long_names_differing_only_at_the_end_get_different_names(prefix: str) -> None:
    steps = [f"{prefix}{i}" for i in range(200)]
    assert len({job_name("study", s) for s in steps}) == len(steps)
    assert len({job_name(s, "train") for s in steps}) == len(steps)
    assert len({label_value(s) for s in steps}) == len(steps)


def test_many_near_identical_names_never_collide() -> None:
    studies = ["Study", "study", "STUDY", "study!", "study.", "stu-dy", "stu dy", ""]
    steps = [f"{base}{i}" for base in ("Train", "train", "train_", "TRAIN-") for i in range(300)]
    pairs = {(a, b) for a in studies for b in steps}
    assert len({job_name(a, b) for a, b in pairs}) == len(pairs)


def test_split_between_study_and_step_matters() -> None:
    assert job_name("ab", "c") != job_name("a", "bc")
    assert job_name("abc\0", "x") != job_name("abc", "\0x")
    assert digest_suffix("a", "bc") != digest_suffix("ab", "c")


def test_names_stay_readable() -> None:
    assert job_name("Genome Study", "Train model #3").startswith("genome-study-train-model-3-")
    assert label_value("Train model #3").startswith("train-model-3-")
    assert job_name("2024", "1").startswith("s-2024-1-")


def test_names_are_stable_across_releases() -> None:
    # Resubmission and re-attach find a running Job by these names: changing them orphans it.
    assert job_name("default", "train") == "default-train-" + digest_suffix("default", "train")
    assert digest_suffix("default", "train") == "78bd5b3e"


def test_slug_folds_and_cuts() -> None:
    assert slug("  Hello,  World!  ", 63) == "hello-world"
    assert slug("abc-def", 4) == "abc"
    assert slug("!!!", 10) == "x"
