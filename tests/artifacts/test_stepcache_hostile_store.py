"""The step cache's store turned hostile: what ``cache ls``/``clear`` and a run meet in a
registry or layout that another tool, a crash or a bad server left behind (issue 34).

Each test is named for the class of input it covers.
"""

from __future__ import annotations

import asyncio

import pytest

from k8sjobs.artifacts import Registry
from k8sjobs.artifacts.stepcache import CACHE_REPOSITORY
from k8sjobs.errors import RegistryError

from .hostile_registry import HostileRegistry


@pytest.mark.parametrize(
    "next_page",
    ["/v2/k8sjobs/cache/tags/list?n=1000", "/v2/k8sjobs/cache/tags/list?n=1000&last=t"],
    ids=["back-to-the-first-page", "a-page-to-itself"],
)
async def test_a_tag_listing_whose_links_loop_ends_with_an_error(next_page: str) -> None:
    """A ``Link: rel="next"`` back to a page already read listed tags without end (28,542
    requests in 10 s, memory growing): ``cache ls`` and ``clear`` never returned."""
    async with HostileRegistry() as hostile:
        hostile.tags_next = next_page
        async with Registry(hostile.location, plain_http=True) as registry:
            with pytest.raises(RegistryError, match="pagination loops"):
                await asyncio.wait_for(registry.tags(CACHE_REPOSITORY), 120)
        assert len(hostile.requests) <= 3
