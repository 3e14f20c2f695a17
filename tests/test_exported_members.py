"""The public API is exactly what ``k8sjobs.__all__`` says (the httpx habit)."""

from __future__ import annotations

import k8sjobs


def test_all_names_exist_and_are_sorted() -> None:
    names = k8sjobs.__all__
    assert len(names) == len(set(names))
    assert all(hasattr(k8sjobs, name) for name in names)
    capitalised = [n for n in names if n[0].isupper()]
    assert capitalised == sorted(capitalised)


def test_every_public_object_of_the_package_is_exported() -> None:
    for name in k8sjobs.__all__:  # the package imports its names on first use
        getattr(k8sjobs, name)
    public = {
        name
        for name, value in vars(k8sjobs).items()
        if not name.startswith("_")
        and getattr(value, "__module__", "").startswith("k8sjobs")
        and callable(value)
    }
    assert public == set(k8sjobs.__all__)


def test_allocations_are_public() -> None:
    """Allocation (for Session(allocations=...)) and the error a refused step raises."""
    from k8sjobs.errors import AllocationRefused
    from k8sjobs.steps.allocation import Allocation

    assert k8sjobs.Allocation is Allocation and k8sjobs.AllocationRefused is AllocationRefused
    assert issubclass(AllocationRefused, k8sjobs.K8sJobsError)
    assert issubclass(AllocationRefused, ValueError)  # what a bad argument raises
