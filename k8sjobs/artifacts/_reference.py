"""Parse artifact references: ``[host[:port]/]repository(:tag|@sha256:hex)``.

A reference is relative to a store unless its first component looks like a registry host,
by Docker's rule: it contains a '.' or a ':' or is 'localhost'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidReference
from ._media import check_digest as _check_digest

# The distribution reference grammar. Patterns are matched with fullmatch and re.ASCII:
# "$" would let a trailing newline through, and "\w" non-ASCII letters, into a URL.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?")
DEFAULT_TAG = "latest"
# What may follow "@" in a reference: a digest, by the OCI grammar of any algorithm.
_ANY_DIGEST = re.compile(r"(?:sha256|sha512):.*|[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}")


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

    def __str__(self) -> str:
        prefix = f"{self.registry}/" if self.registry else ""
        suffix = f"@{self.digest}" if self.digest else f":{self.tag}"
        return f"{prefix}{self.repository}{suffix}"


def pin(reference: str, digest: str) -> str:
    """Return ``reference`` pinned by ``digest``: ``repository@sha256:...``, tag or digest dropped.

    ``"host:5000/a/b:v1"`` -> ``"host:5000/a/b@sha256:..."`` (a ':' before the last '/' is a
    port, not a tag). The one place a pushed reference is pinned, for ``PushResult.pinned``
    and for both backends reading the push container's report.
    """
    repository = reference.rsplit("@", 1)[0]
    head, _, tail = repository.rpartition(":")
    if head and "/" not in tail:
        repository = head
    return f"{repository}@{digest}"


def redact(text: str) -> str:
    """Return a reference or store location with any credentials in it (``user:password@``
    before the host, with or without a scheme) replaced by ``[redacted]@``: the only form in
    which an error message or a log line may show one the user wrote."""
    scheme, sep, rest = text.rpartition("://")
    head, slash, tail = rest.partition("/")
    host = head.rpartition("@")[2]
    if "@" not in head or _ANY_DIGEST.fullmatch(host):
        return text  # "repo@sha256:..." is a digest, not credentials
    return f"{scheme}{sep}[redacted]@{host}{slash}{tail}"


def looks_like_host(component: str) -> bool:
    """Return True when a reference's first component names a registry host (Docker's rule)."""
    return "." in component or ":" in component or component == "localhost"


def check_host(host: str, what: str) -> str:
    """Return ``host`` if it is ``name[:port]`` or ``[ipv6][:port]``, else raise
    InvalidReference naming ``what`` (the reference or store location it came from)."""
    if "@" in host:
        raise InvalidReference(
            f"{what}: a registry location cannot hold credentials (user:password@host). "
            "Pass credentials=Credentials(user, password) to open_store, set "
            "K8SJOBS_REGISTRY_USERNAME and K8SJOBS_REGISTRY_PASSWORD, or run docker login."
        )
    if not _HOST.fullmatch(host) or not host.isascii():
        raise InvalidReference(
            f'{what}: "{host[:80]}" is not a registry host; write host[:port], '
            'e.g. "registry.example:5000" or "127.0.0.1:5000".'
        )
    return host


def check_repository(name: str, what: str) -> str:
    """Return ``name`` if it is a valid repository path, else raise InvalidReference."""
    if not name.isascii() or not _REPOSITORY.fullmatch(name):
        raise InvalidReference(
            f'{what}: repository "{name[:80]}" must be lowercase path components '
            'of letters, digits and separators, e.g. "study/train:v1".'
        )
    return name


def parse_reference(text: str) -> Reference:
    """Return the Reference that ``text`` spells, or raise InvalidReference saying why."""
    what = f"Reference {redact(text)[:200]!r}"
    if not text:
        raise InvalidReference('Reference is empty; write "repository:tag", e.g. "study/a:v1".')
    registry = None
    first, sep, rest = text.partition("/")
    if sep and looks_like_host(first):
        registry, text = check_host(first, what), rest
    name, at, digest = text.partition("@")
    tag = None
    if not at:
        head, colon, maybe_tag = name.rpartition(":")
        if colon and "/" not in maybe_tag:
            name, tag = head, maybe_tag
    check_repository(name, what)
    if at:
        return Reference(name, None, _check_digest(digest, what), registry)
    if tag is not None and not (tag.isascii() and _TAG.fullmatch(tag)):
        raise InvalidReference(
            f'{what}: tag "{tag[:80]}" is not a valid tag (letters, digits, "_", "." and "-", '
            "at most 128, not starting with . or -)."
        )
    return Reference(name, tag or DEFAULT_TAG, None, registry)
