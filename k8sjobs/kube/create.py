"""Create one step's objects from its ``Manifests``: the two-writes rule, in one place.

Order: the Job (or MiniCluster, or JobSet), then the Service, Secret and ConfigMap, each created
already carrying an ownerReference to the Job's uid (from the create's answer), so deleting
the Job deletes them all and nothing is patched. A fresh single-node step costs two writes.
Until its ConfigMap exists a pod waits ContainerCreating (the kubelet retries the mount);
it is written last, so a pod that mounted it proves every object of the step exists.
Names are deterministic, so a resubmission meets its own objects: a live Job of the same
spec hash is adopted (and its missing objects created: its driver may have died between
the writes), one of another hash raises SpecMismatch unless ``replace`` (then the old
objects are deleted first). docs/design.md lists the windows between the writes.

``KubernetesBackend`` and the Maestro adapter both create through ``create_step``; they
differ only in how they know the current Job (a shared informer's cache; one GET) and how
they wait for a deleted Job to go (that informer; a one-object watch), passed in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..errors import AlreadyExists, Conflict, NotFound, SpecMismatch
from ..render.manifests import ANNOTATION_STEP, LABEL_HASH, Manifests
from .client import CONFIGMAPS, JOBS, JOBSETS, MINICLUSTERS, SECRETS, SERVICES, Kind, KubeClient

__all__ = ["EXTRA_KINDS", "create_step", "deleting", "ended", "extras", "spec_hash", "top_kind"]

#: The API resource of each object a step creates besides its Job.
EXTRA_KINDS = {"ConfigMap": CONFIGMAPS, "Secret": SECRETS, "Service": SERVICES}

Obj = Mapping[str, Any]
Waiter = Callable[[], Awaitable[None]]
#: How often a stale extra object is deleted and made again before giving up (something
#: else keeps writing it).
_STALE_TRIES = 3


def spec_hash(obj: Obj) -> str:
    """Return the spec hash label of an object k8sjobs created ("" if it has none)."""
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_HASH, ""))


def top_kind(obj: Obj) -> Kind:
    """Return the resource that owns a step: its MiniCluster (Flux Operator step) or JobSet
    (``target: jobset``), else its Job.

    ``obj`` is the step's rendered top object or the Job seen on the cluster: the Flux
    Operator's Job has its MiniCluster as controlling owner. Deleting that Job alone would
    only make the operator create it again, so a MiniCluster step is deleted as a whole.
    """
    if obj.get("kind") == "MiniCluster":
        return MINICLUSTERS
    if obj.get("kind") == "JobSet":
        return JOBSETS
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
    """Return whether the Job's outcome is decided (FailureTarget comes before Failed); a
    JobSet's says Completed."""
    decided = ("Complete", "Completed", "SuccessCriteriaMet", "Failed", "FailureTarget")
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
    written: Callable[[Obj], bool] = _never,
) -> bool:
    """Create the objects of ``manifests``, or adopt identical ones; return True if adopted.

    ``current`` is the Job of that name as the caller knows it (None: none known);
    ``gone`` returns once that Job no longer exists (after a deletion); ``rerun`` says
    whether a Job of the same spec is replaced all the same (Maestro resubmits an ended
    step to run it again; a session, a step run anew or not cached); ``written`` says
    whether an adopted Job is known to have all its objects (a pod of it mounted its
    ConfigMap), so adopting it costs no request. A Job of another spec that has ended is
    an older run's leftover and is replaced; one still running raises SpecMismatch unless
    ``replace`` is true.
    """
    if current is not None and not deleting(current):
        if spec_hash(current) == manifests.spec_hash and not rerun(current):
            # Its driver may have died between the Job and its ConfigMap: finish the step.
            if not ended(current) and not _started(current) and not written(current):
                await _create_extras(client, manifests, current)
            return True
        _check_replace(current, manifests, replace)
        await _remove(client, manifests, gone)
    elif current is not None:
        await gone()
    job = await _create_job(client, manifests, replace, gone)
    if job is not None:
        await _create_extras(client, manifests, job)
    return job is None  # an identical Job was there and is going


def extras(manifests: Manifests) -> list[dict[str, Any]]:
    """Return the objects a step has besides its Job, in the order they are created.

    The ConfigMap comes last: a pod that mounted it proves the step's every object exists.
    """
    return [obj for obj in (manifests.service, manifests.secret, manifests.configmap) if obj]


async def _create_job(
    client: KubeClient, manifests: Manifests, replace: bool, gone: Waiter
) -> dict[str, Any] | None:
    """Create the Job (or MiniCluster) and return it, or the identical one found in its
    place (our own create whose reply was lost, retried); None when that one is going."""
    kind = top_kind(manifests.job)
    try:
        created: dict[str, Any] = await client.create(kind, manifests.namespace, manifests.job)
        return created
    except AlreadyExists:
        current: dict[str, Any] = await client.get(kind, manifests.namespace, manifests.name)
    if spec_hash(current) == manifests.spec_hash:
        return None if deleting(current) else current
    _check_replace(current, manifests, replace)
    await _remove(client, manifests, gone)
    # Through the same adoption: the new Job's create may be applied and its reply lost.
    # Another spec in its place now is someone else's, never ours to delete again.
    return await _create_job(client, manifests, False, gone)


async def _create_extras(client: KubeClient, manifests: Manifests, job: Obj) -> None:
    """Create the Service, Secret and ConfigMap, each already owned by ``job``.

    One that exists already is kept when ``job`` owns it (our create whose reply was lost,
    or a driver that died after it); any other (left by an earlier Job of that name that is
    gone or going, or by a k8sjobs that wrote the ConfigMap first) is deleted and made
    again: nothing runs from it, and it is immutable.
    """
    owner = {
        "apiVersion": manifests.job["apiVersion"],
        "kind": manifests.job["kind"],
        "name": manifests.name,
        "uid": job["metadata"]["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }
    for obj in extras(manifests):
        body = {**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}}
        await _create_owned(client, EXTRA_KINDS[obj["kind"]], manifests, body, owner["uid"])


async def _create_owned(
    client: KubeClient, kind: Kind, manifests: Manifests, body: Obj, uid: str
) -> None:
    namespace, name = manifests.namespace, manifests.name
    for _ in range(_STALE_TRIES):
        try:
            await client.create(kind, namespace, body, answer=False)
            return
        except AlreadyExists:
            pass
        try:
            found = await client.get(kind, namespace, name)
        except NotFound:
            continue  # it went meanwhile (the garbage collector): create it again
        if uid in {r.get("uid") for r in found["metadata"].get("ownerReferences") or ()}:
            return
        # Only that object: a newer one of the same name is not ours to delete.
        stale = {"uid": found["metadata"]["uid"]}
        with contextlib.suppress(NotFound, Conflict):
            await client.delete(
                kind, namespace, name, propagation="Background", preconditions=stale
            )
    message = (
        f'Step "{_step_name(manifests)}": {kind.plural} "{name}" in namespace "{namespace}" '
        f"was made again by someone else {_STALE_TRIES} times while k8sjobs replaced it; "
        "find what else writes it, or rename the step."
    )
    raise Conflict(409, {"reason": "Conflict", "message": message})


def _started(job: Obj) -> bool:
    """Return whether the Job's status counts a pod that got past mounting its volumes (a
    ready or succeeded one): then its step's ConfigMap, written last, exists."""
    status = job.get("status") or {}
    return bool(status.get("ready") or status.get("succeeded"))


async def _remove(client: KubeClient, manifests: Manifests, gone: Waiter) -> None:
    """Delete the old Job (Foreground) and its extras, and wait for the Job to go."""
    await _delete(client, top_kind(manifests.job), manifests, "Foreground")
    for obj in extras(manifests):
        await _delete(client, EXTRA_KINDS[obj["kind"]], manifests, "Background")
    await gone()


async def _delete(client: KubeClient, kind: Kind, manifests: Manifests, propagation: str) -> None:
    with contextlib.suppress(NotFound):
        await client.delete(kind, manifests.namespace, manifests.name, propagation=propagation)


def _check_replace(current: Obj, manifests: Manifests, replace: bool) -> None:
    """Raise SpecMismatch if ``current`` has another spec, still runs, and may not be replaced."""
    if replace or spec_hash(current) == manifests.spec_hash or ended(current):
        return
    raise SpecMismatch(
        f'Step "{_step_name(manifests)}": Job "{manifests.name}" in namespace '
        f'"{manifests.namespace}" '
        f"was created from another spec (hash {spec_hash(current)}, now "
        f"{manifests.spec_hash}) and is still running; wait for it to end, stop it "
        "(k8sjobs cancel), or run with --replace (replace=True) to stop it and run the new "
        "spec."
    )


def _step_name(manifests: Manifests) -> str:
    annotations = manifests.job["metadata"].get("annotations") or {}
    return str(annotations.get(ANNOTATION_STEP) or manifests.name)
