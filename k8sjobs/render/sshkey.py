"""Make a multi-node step's ssh key pair (the one place k8sjobs draws key material).

A fresh ed25519 pair per step, made at submit time by the caller of ``render`` (a Session,
the Maestro adapter, ``k8sjobs render``), so that render stays pure. The private half goes
only into the step's Secret; the public half is the workers' ``authorized_keys``.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..steps.spec import Step
from .multinode import SshKey

__all__ = ["generate_key", "key_for"]


def generate_key(comment: str = "k8sjobs") -> SshKey:
    """Return a new ed25519 key pair in OpenSSH formats, ``comment`` ending the public line."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return SshKey(public=f"{public.decode()} {comment}\n", private=pem)


def key_for(step: Step) -> SshKey | None:
    """Return a new key pair when ``step`` is launched over ssh, else None (none is needed)."""
    return generate_key(f"k8sjobs-{step.name}"[:64]) if step.launch_mode == "ssh" else None
