"""Parse artifact references: ``[host[:port]/]repository(:tag|@sha256:hex)``.

A reference is relative to a store unless its first component looks like a registry host,
by Docker's rule: it contains a '.' or a ':' or is 'localhost'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidReference

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
DIGEST_PATTERN = re.compile(r"^sha256:[a-f0-9]{64}$")
DEFAULT_TAG = "latest"


@dataclass(frozen=True)
class Reference:
    """A parsed reference; exactly one of ``tag`` and ``digest`` is set."""

    repository: str
    tag: str | None = None
    digest: str | None = None
    registry: str | None = None

    @property
    def target(self) -> str:
        """Return what follows ``/manifests/`` in a registry URL: the digest, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    def with_digest(self, digest: str) -> Reference:
        """Return the same repository pinned to ``digest``."""
        return Reference(self.repository, None, digest, self.registry)

    def __str__(self) -> str:
        prefix = f"{self.registry}/" if self.registry else ""
        suffix = f"@{self.digest}" if self.digest else f":{self.tag}"
        return f"{prefix}{self.repository}{suffix}"


def looks_like_host(component: str) -> bool:
    """Return True when a reference's first component names a registry host (Docker's rule)."""
    return "." in component or ":" in component or component == "localhost"


def check_digest(digest: str) -> str:
    """Return ``digest`` if it is a well-formed sha256 digest, else raise InvalidReference."""
    if not DIGEST_PATTERN.match(digest):
        raise InvalidReference(f'"{digest}" is not a sha256 digest; write "sha256:<64 hex>".')
    return digest


def parse_reference(text: str) -> Reference:
    """Return the Reference that ``text`` spells, or raise InvalidReference saying why."""
    registry = None
    first, sep, rest = text.partition("/")
    if sep and looks_like_host(first):
        registry, text = first, rest
    name, at, digest = text.partition("@")
    tag = None
    if not at:
        head, colon, maybe_tag = name.rpartition(":")
        if colon and "/" not in maybe_tag:
            name, tag = head, maybe_tag
    if not _REPOSITORY.match(name):
        raise InvalidReference(
            f'Reference "{text}": repository "{name}" must be lowercase path components '
            'of letters, digits and separators, e.g. "study/train:v1".'
        )
    if at:
        return Reference(name, None, check_digest(digest), registry)
    if tag is not None and not _TAG.match(tag):
        raise InvalidReference(f'Reference "{text}": tag "{tag}" is not a valid tag.')
    return Reference(name, tag or DEFAULT_TAG, None, registry)
