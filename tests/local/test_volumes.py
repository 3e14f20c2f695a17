"""The path translation rule on its own: container mount paths onto sandbox paths."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.local._volumes import PathMap

segments = st.lists(
    st.sampled_from(["a", "b", "data", "out", "a.b", "x-y"]), min_size=1, max_size=4
)


def _path(parts: list[str]) -> str:
    return "/" + "/".join(parts)


@given(st.lists(segments, min_size=1, max_size=4, unique_by=tuple), segments)
def test_a_path_moves_under_the_longest_mount_that_contains_it(
    mounts: list[list[str]], value: list[str]
) -> None:
    hosts = {_path(m): f"/sandbox/volumes/v{i}" for i, m in enumerate(mounts)}
    translated = PathMap(hosts.items()).translate(_path(value))
    owners = [m for m in mounts if value[: len(m)] == m]
    if not owners:
        assert translated == _path(value)  # nothing outside a mount is rewritten
        return
    owner = max(owners, key=len)
    rest = value[len(owner) :]
    assert translated == hosts[_path(owner)] + ("/" + "/".join(rest) if rest else "")


@given(segments)
def test_a_mere_prefix_of_a_name_is_not_a_mount(parts: list[str]) -> None:
    paths = PathMap([(_path(parts), "/sandbox/v")])
    assert paths.translate(_path(parts) + "x") == _path(parts) + "x"
    assert paths.translate("relative/" + "/".join(parts)) == "relative/" + "/".join(parts)


def test_the_root_mount_takes_every_absolute_path() -> None:
    paths = PathMap([("/", "/sandbox/root"), ("/data", "/sandbox/data")])
    assert paths.translate("/etc/hosts") == "/sandbox/root/etc/hosts"
    assert paths.translate("/data/x") == "/sandbox/data/x"
