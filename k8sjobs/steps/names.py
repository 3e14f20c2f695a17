"""Kubernetes-safe names for studies, steps and the objects that carry them.

A study or step name is the user's words ("Train model #3"); the objects that run it need
RFC 1123 labels (lowercase, ``[a-z0-9-]``, at most 63 characters). Every derived name ends
in a short hash of the *original* text, so two different inputs never share an object
name, even when they read the same once lowercased or cut to length. The original name is
kept in an annotation (see ``render``). ``check_object_name`` and ``check_label_key`` hold
the API server's rules for names the user writes (a claim, a PriorityClass, a label key).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re

__all__ = [
    "DNS_LABEL_MAX",
    "JOB_NAME_MAX",
    "check_label_key",
    "check_object_name",
    "digest_suffix",
    "is_dns_label",
    "job_name",
    "label_value",
    "slug",
]

DNS_LABEL_MAX = 63
# An Indexed Job's pods are named "<job>-<index>" and that must stay a DNS label, and the
# job controller copies the Job name into a label value; 52 leaves room for "-<index>".
JOB_NAME_MAX = 52
_HASH_LEN = 8
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_INVALID = re.compile(r"[^a-z0-9]+")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def check_object_name(value: str, what: str) -> str:
    """Return ``value`` if it is a DNS subdomain (most object names); else raise ValueError."""
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(
            f'"{value}" is not a valid {what} name; use lowercase letters, digits, "-" and ".", '
            "starting and ending with a letter or digit"
        )
    return value


def check_label_key(key: str) -> str:
    """Return ``key`` if it is a label key (``[prefix/]name``); else raise ValueError."""
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ValueError(f'key "{key}": prefix "{prefix}" is not a DNS subdomain')
    if len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(
            f'key "{key}": name part must be 1-63 characters of [A-Za-z0-9-_.], '
            "starting and ending with a letter or digit"
        )
    return key


def is_dns_label(text: str) -> bool:
    """Return whether ``text`` is a valid RFC 1123 label (a Kubernetes object name)."""
    return len(text) <= DNS_LABEL_MAX and bool(_DNS_LABEL.match(text))


def digest_suffix(*parts: str) -> str:
    """Return a short, stable hash of ``parts``, where ("a", "bc") and ("ab", "c") differ."""
    # JSON, not a separator: with "\0".join, ("abc\0", "x") and ("abc", "\0x") collided.
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:_HASH_LEN]


def slug(text: str, limit: int) -> str:
    """Return ``text`` lowercased, with runs of other characters folded to "-", cut to ``limit``."""
    folded = _INVALID.sub("-", text.lower()).strip("-")
    return folded[:limit].rstrip("-") or "x"


@functools.lru_cache(maxsize=65536)
def label_value(name: str) -> str:
    """Return the label value that identifies ``name`` (a study or step): slug plus hash."""
    return f"{slug(name, DNS_LABEL_MAX - _HASH_LEN - 1)}-{digest_suffix(name)}"


@functools.lru_cache(maxsize=65536)
def job_name(study: str, step: str) -> str:
    """Return the name shared by a step's Job, ConfigMap, Secret and Service in a study."""
    room = JOB_NAME_MAX - _HASH_LEN - 1
    step_part = slug(step, room)
    study_part = slug(study, max(room - len(step_part) - 1, 0))
    readable = f"{study_part}-{step_part}" if len(study_part) >= 3 else step_part
    if not readable[0].isalpha():
        # The headless Service of a multi-node step shares this name, and a Service name
        # must start with a letter (RFC 1035), so "2024-run" becomes "s-2024-run".
        readable = f"s-{readable}"
    return f"{readable[:room].rstrip('-')}-{digest_suffix(study, step)}"
