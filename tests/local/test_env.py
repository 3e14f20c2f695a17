"""Kubernetes' $(VAR) expansion of command, args and env values, on its own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from k8sjobs.local._env import expand

names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)
plain = st.text(alphabet=st.characters(blacklist_characters="$"), max_size=20)


@given(plain, st.dictionaries(names, plain))
def test_text_without_a_dollar_is_left_alone(text: str, env: dict[str, str]) -> None:
    assert expand(text, env) == text


@given(names, plain, plain, plain)
def test_a_known_variable_is_replaced_in_place(
    name: str, value: str, before: str, after: str
) -> None:
    assert expand(f"{before}$({name}){after}", {name: value}) == before + value + after


@given(names, plain)
def test_an_unknown_variable_stays_as_written_and_double_dollar_escapes(
    name: str, text: str
) -> None:
    assert expand(f"$({name}){text}", {}) == f"$({name}){text}"
    assert expand(f"$$({name})", {name: "no"}) == f"$({name})"
