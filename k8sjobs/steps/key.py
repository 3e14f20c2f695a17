"""A step's key: one digest over what decides its result (pure, no I/O).

Two steps with the same key compute the same thing, so a recorded success of one stands for
the other (``docs/reruns.md``). The key is a SHA-256 over a canonical JSON document of these
fields of the Step, and nothing else:

==================  ==========================================================================
field               why it is in the key
==================  ==========================================================================
script, shell       the program and the interpreter that runs it
image               the software around it: by digest alone when the reference carries one
                    (``python:3.12@sha256:ab..`` and ``python@sha256:ab..`` are the same key),
                    else the reference as written (a moving tag is the user's to pin)
resources           nodes, tasks, cores, GPUs, memory: the script reads them (``$K8SJOBS_TASKS``)
                    and ``$(LAUNCHER)`` expands from them
env                 plain values as written; a ``SecretStr`` by a SHA-256 of its value (never
                    the value), a ``SecretKeyRef`` by the Secret's name and key
workdir, outputs    where the script runs and which files of it are the result
volumes, shm        what else the script sees on disk
launch settings     launch, mpi, launcher, ssh_dir, target, flux_in_image, security,
                    runtime_class: how the program is started and under which identity
inputs              each input's name and the *content digest* of what it resolved to (its
                    files' digests, not its manifest's annotations): not the producer's study
                    or step name, so two studies sharing a step share its key
key_env             the value in the driver's environment of each name it lists (only when
                    it lists any): what the user adds of the environment the key cannot see
==================  ==========================================================================

Left out, on purpose: the step's name and namespace, its study, labels and annotations (names,
not content); retries and the failure rules, walltime, ttl and ``push_outputs`` (they decide
what happens when it fails, and only successes are reused); where it is scheduled (node
selector, tolerations, affinity, spread, queue, priority, service account, pull secrets); and
``cache`` itself. Times and the run's ids are not fields of a Step at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

from .spec import SecretKeyRef, Step
from .volumes import Volume

__all__ = [
    "EXCLUDED_FIELDS",
    "KEYED_FIELDS",
    "KEY_VERSION",
    "cached_by_default",
    "image_identity",
    "script_digest",
    "step_key",
]

#: Bumped when the key's document changes meaning, so old records are never taken as new.
KEY_VERSION = "k8sjobs.step-key/1"

#: The Step fields the key covers (``inputs`` through the digests given to ``step_key``).
KEYED_FIELDS = frozenset(
    {
        "script",
        "shell",
        "image",
        "resources",
        "env",
        "workdir",
        "outputs",
        "volumes",
        "shm",
        "launch",
        "mpi",
        "launcher",
        "ssh_dir",
        "target",
        "flux_in_image",
        "security",
        "runtime_class",
        "inputs",
        "key_env",  # by the values the driver's environment gives those names
    }
)

#: The Step fields that do not decide a success's result (see the module docstring).
EXCLUDED_FIELDS = frozenset(
    {
        "name",
        "namespace",
        "labels",
        "annotations",
        "retries",
        "retry_oom",  # how a step is retried, like retries: not what a success produces
        "disruptions",
        "retry_on_exit_codes",
        "fail_on_exit_codes",
        "push_outputs",
        "walltime",
        "pending_timeout",
        "ttl_after_finished",
        "node_selector",
        "tolerations",
        "service_account",
        "image_pull_secrets",
        "queue",
        "priority",
        "priority_class",
        "affinity",
        "spread",
        "worker_wait",
        "cache",
        # Where the step runs, like queue: an allocation's pod runs the same image and script
        # (refusal() refuses another image), so a success there is the success of a Job.
        "allocation",
    }
)


def step_key(
    step: Step, inputs: Mapping[str, str], environment: Mapping[str, str | None] | None = None
) -> str:
    """Return ``step``'s key, ``sha256:<hex>``, given the digest of each of its inputs.

    ``inputs`` maps every input name of the step to the digest (``sha256:...``) of the
    artifact it resolved to; a missing or non-digest value raises ValueError, since a key
    over a tag would outlive what the tag pointed at. ``environment`` gives the value (None:
    unset) of each name in ``step.key_env``, read by the caller from the driver's
    environment; a step without ``key_env`` has the key it had before the field existed.
    """
    missing = sorted(set(step.inputs) - set(inputs))
    if missing:
        raise ValueError(f'Step "{step.name}": no digest for input "{missing[0]}"')
    for name, digest in inputs.items():
        if not _is_digest(digest):
            raise ValueError(f'Step "{step.name}": input "{name}": "{digest}" is not a digest')
    document = {
        "version": KEY_VERSION,
        "script": step.script,
        "shell": step.shell,
        "image": image_identity(step.image),
        "resources": step.resources.model_dump(mode="json"),
        "env": {name: _env_value(value) for name, value in step.env.items()},
        "workdir": step.workdir,
        "outputs": dict(step.outputs),
        "volumes": [v.model_dump(mode="json") for v in step.volumes],
        "shm": step.shm,
        "launch": {
            "launch": step.launch,
            "mpi": step.mpi,
            "launcher": step.launcher,
            "ssh_dir": step.ssh_dir,
            "target": step.target,
            "flux_in_image": step.flux_in_image,
            "security": step.security,
            "runtime_class": step.runtime_class,
        },
        "inputs": {name: inputs[name] for name in step.inputs},
    }
    if step.key_env:
        given = environment or {}
        document["key_env"] = {name: given.get(name) for name in step.key_env}
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # surrogateescape: a key_env value the environment gave as non-UTF-8 bytes keys by
    # those bytes; every other string encodes exactly as before, so no key changes
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogateescape")).hexdigest()


def image_identity(image: str) -> str:
    """Return what identifies ``image`` in a key: its digest when it has one, else itself."""
    _, at, digest = image.rpartition("@")
    return digest if at and _is_digest(digest) else image


def script_digest(step: Step) -> str:
    """Return ``sha256:<hex>`` of the step's script (for lineage: which code made a file)."""
    return "sha256:" + hashlib.sha256(step.script.encode()).hexdigest()


def cached_by_default(step: Step) -> bool:
    """Return whether ``step`` is cached: its ``cache``, else outputs and no writable volume.

    A step that writes into a volume leaves results the store does not hold, so reusing it
    would skip them; one with no outputs has no result to hand on.
    """
    if step.cache is not None:
        return step.cache
    writable = any(_persistent(v) and not v.read_only for v in step.volumes)
    return bool(step.outputs) and not writable


def _persistent(volume: Volume) -> bool:
    """Return whether what a step writes into ``volume`` outlives the step's pod."""
    return volume.claim is not None or volume.nfs is not None or volume.host_path is not None


def _env_value(value: str | SecretStr | SecretKeyRef) -> Any:
    if isinstance(value, SecretStr):
        # Salted with a constant so the digest is not a plain SHA-256 of the secret; it
        # never leaves this function except mixed into the whole key.
        salted = b"k8sjobs.secret-env\0" + value.get_secret_value().encode()
        return {"secret_sha256": hashlib.sha256(salted).hexdigest()}
    if isinstance(value, SecretKeyRef):
        return {"secret": value.secret, "key": value.key}
    return value


def _is_digest(text: str) -> bool:
    algorithm, colon, hexpart = text.partition(":")
    return (
        bool(colon)
        and algorithm in ("sha256", "sha512")
        and len(hexpart) in (64, 128)
        and all(c in "0123456789abcdef" for c in hexpart)
    )
