"""Create one step's objects from its ``Manifests``: the three-writes rule, in one place.

Order: the ConfigMap (+ Secret, + Service), then the Job, then one merge patch per extra
object setting an ownerReference to the Job, so deleting the Job deletes them all. A fresh
single-node step costs three writes. Names are deterministic, so a resubmission meets its
own objects: a live Job of the same spec hash is adopted, one of another hash raises
SpecMismatch unless ``replace`` (then the old objects are deleted first).

``KubernetesBackend`` and the Maestro adapter both create through ``create_step``; they
differ only in how they know the current Job (a shared informer's cache; one GET) and how
they wait for a deleted Job to go (that informer; a one-object watch), passed in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..errors import AlreadyExists, NotFound, SpecMismatch
from ..render.manifests import ANNOTATION_STEP, LABEL_HASH, Manifests
from .client import CONFIGMAPS, JOBS, MINICLUSTERS, SECRETS, SERVICES, Kind, KubeClient

__all__ = ["EXTRA_KINDS", "create_step", "deleting", "ended", "spec_hash", "top_kind"]

#: The API resource of each object a step creates besides its Job.
EXTRA_KINDS = {"ConfigMap": CONFIGMAPS, "Secret": SECRETS, "Service": SERVICES}

Obj = Mapping[str, Any]
Waiter = Callable[[], Awaitable[None]]


def spec_hash(obj: Obj) -> str:
    """Return the spec hash label of an object k8sjobs created ("" if it has none)."""
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_HASH, ""))


def top_kind(obj: Obj) -> Kind:
    """Return the resource that owns a step: its MiniCluster (Flux Operator step), else its Job.

    ``obj`` is the step's rendered top object or the Job seen on the cluster: the Flux
    Operator's Job has its MiniCluster as controlling owner. Deleting that Job alone would
    only make the operator create it again, so a MiniCluster step is deleted as a whole.
    """
    if obj.get("kind") == "MiniCluster":
        return MINICLUSTERS
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        # A watch's slim copy keeps an owner's kind and name only.
        group = str(ref.get("apiVersion") or "flux-framework.org/").split("/")[0]
        if ref.get("kind") == "MiniCluster" and group == "flux-framework.org":
            return MINICLUSTERS
    return JOBS


def deleting(obj: Obj) -> bool:
    """Return whether the object is being deleted (it has a deletionTimestamp)."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def ended(job: Obj) -> bool:
    """Return whether the Job's outcome is decided (FailureTarget comes before Failed)."""
    decided = ("Complete", "SuccessCriteriaMet", "Failed", "FailureTarget")
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("type") in decided and cond.get("status") == "True":
            return True
    return False


def _never(job: Obj) -> bool:
    return False


async def create_step(
    client: KubeClient,
    manifests: Manifests,
    *,
    current: Obj | None,
    replace: bool,
    gone: Waiter,
    rerun: Callable[[Obj], bool] = _never,
) -> bool:
    """Create the objects of ``manifests``, or adopt identical ones; return True if adopted.

    ``current`` is the Job of that name as the caller knows it (None: none known);
    ``gone`` returns once that Job no longer exists (after a deletion); ``rerun`` says
    whether a Job of the same spec is replaced all the same (Maestro resubmits an ended
    step to run it again; a session, a step run anew or not cached). A Job of another
    spec that has ended is an older run's leftover and is replaced; one still running
    raises SpecMismatch unless ``replace`` is true.
    """
    if current is not None and not deleting(current):
        if spec_hash(current) == manifests.spec_hash and not rerun(current):
            return True
        _check_replace(current, manifests, replace)
        await _remove(client, manifests, gone)
    elif current is not None:
        await gone()
    await _create_extras(client, manifests)
    job = await _create_job(client, manifests, replace, gone)
    if job is not None:
        await _own(client, manifests, job)
    return job is None  # an identical Job was there (our own create, its reply lost)


async def _create_extras(client: KubeClient, manifests: Manifests) -> None:
    """Create the ConfigMap, Secret and Service; overwrite stale ones of an old spec."""
    for obj in manifests.objects()[:-1]:
        kind = EXTRA_KINDS[obj["kind"]]
        try:
            await client.create(kind, manifests.namespace, obj, answer=False)
        except AlreadyExists:
            current = await client.get(kind, manifests.namespace, manifests.name)
            if spec_hash(current) != manifests.spec_hash:
                # Left by a driver that died before creating its Job (the Job was
                # checked first): nothing runs from it, so it is ours to rewrite.
                await client.request(
                    "PUT",
                    kind.path(manifests.namespace, manifests.name),
                    body=obj,
                    what=f'replace {kind.plural} "{manifests.name}"',
                    kind=kind,
                    verb="update",
                )


async def _create_job(
    client: KubeClient, manifests: Manifests, replace: bool, gone: Waiter
) -> dict[str, Any] | None:
    """Create the Job (or MiniCluster); return it, or None when an identical one was adopted."""
    kind = top_kind(manifests.job)
    try:
        created: dict[str, Any] = await client.create(kind, manifests.namespace, manifests.job)
        return created
    except AlreadyExists:
        current: dict[str, Any] = await client.get(kind, manifests.namespace, manifests.name)
    if spec_hash(current) == manifests.spec_hash:
        # Adopted (our own create whose reply was lost, retried, is one of these): patch the
        # owners again, in case its driver died before doing so.
        return None if deleting(current) else current
    _check_replace(current, manifests, replace)
    await _remove(client, manifests, gone)
    await _create_extras(client, manifests)
    # Through the same adoption: the new Job's create may be applied and its reply lost.
    # Another spec in its place now is someone else's, never ours to delete again.
    return await _create_job(client, manifests, False, gone)


async def _own(client: KubeClient, manifests: Manifests, job: Obj) -> None:
    """Point every extra object's ownerReference at the Job (one merge patch each)."""
    owner = {
        "apiVersion": manifests.job["apiVersion"],
        "kind": manifests.job["kind"],
        "name": manifests.name,
        "uid": job["metadata"]["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }
    patch = {"metadata": {"ownerReferences": [owner]}}
    for obj in manifests.objects()[:-1]:
        await client.merge_patch(
            EXTRA_KINDS[obj["kind"]], manifests.namespace, manifests.name, patch, answer=False
        )


async def _remove(client: KubeClient, manifests: Manifests, gone: Waiter) -> None:
    """Delete the old Job (Foreground) and its extras, and wait for the Job to go."""
    await _delete(client, top_kind(manifests.job), manifests, "Foreground")
    for obj in manifests.objects()[:-1]:
        await _delete(client, EXTRA_KINDS[obj["kind"]], manifests, "Background")
    await gone()


async def _delete(client: KubeClient, kind: Kind, manifests: Manifests, propagation: str) -> None:
    with contextlib.suppress(NotFound):
        await client.delete(kind, manifests.namespace, manifests.name, propagation=propagation)


def _check_replace(current: Obj, manifests: Manifests, replace: bool) -> None:
    """Raise SpecMismatch if ``current`` has another spec, still runs, and may not be replaced."""
    if replace or spec_hash(current) == manifests.spec_hash or ended(current):
        return
    annotations = manifests.job["metadata"].get("annotations") or {}
    step = annotations.get(ANNOTATION_STEP) or manifests.name
    raise SpecMismatch(
        f'Step "{step}": Job "{manifests.name}" in namespace "{manifests.namespace}" '
        f"was created from another spec (hash {spec_hash(current)}, now "
        f"{manifests.spec_hash}) and is still running; wait for it to end, stop it "
        "(k8sjobs cancel), or run with --replace (replace=True) to stop it and run the new "
        "spec."
    )
