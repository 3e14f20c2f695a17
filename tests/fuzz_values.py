"""Hypothesis strategies for fuzzing input models: any value a user could write, nested."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def any_values(
    *extra: st.SearchStrategy[Any], words: list[str], keys: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """Return nested lists and mappings of every scalar kind (huge ints, NaN, any text),
    the ``words`` a field might hold, and ``extra`` scalars; mapping keys from ``keys``."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=10**18, max_value=10**40),
        st.floats(),
        st.text(max_size=16),
        st.sampled_from(words),
        *extra,
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)
        ),
        max_leaves=10,
    )
