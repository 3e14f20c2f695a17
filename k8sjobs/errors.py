"""Every exception k8sjobs raises, in one tree.

    K8sJobsError
    ├── StepFailed            wait(check=True) on a step that did not succeed
    ├── SpecMismatch          a Job of that name exists with a different spec hash
    ├── SessionClosed         a handle or session used after its session ended
    ├── ApiError              the Kubernetes API said no (carries the Status)
    │   ├── NotFound          404
    │   ├── AlreadyExists     409, reason AlreadyExists
    │   ├── Conflict          409, stale resourceVersion
    │   ├── Forbidden         403: names the verb and resource to grant
    │   ├── Invalid           422, with the causes
    │   ├── Gone              410, a watch or list resourceVersion too old
    │   └── ServerUnavailable 429/5xx or no connection, after the retries ran out
    ├── ClusterUnreachable    the API server cannot be used: not reached, TLS, 401/403 at
    │                         start, or lost for longer than ``outage_timeout``
    ├── StudyError            a study file or DAG that cannot run (cycle, unknown step)
    ├── ConfigError           a kubeconfig that is not there or cannot be used
    └── RegistryError         storing or fetching an artifact failed
        ├── InvalidReference      a reference or store location that cannot be parsed
        ├── AuthenticationError   credentials missing, wrong, or refused (401/403)
        ├── ArtifactNotFound      the manifest or blob does not exist (404)
        ├── DigestMismatch        the bytes received do not match their digest or size
        ├── UnsafeArchive         a directory archive would write outside its target
        ├── LimitExceeded         a manifest or a pull over its size limit
        ├── RegistryUnavailable   refused, timed out, or 5xx after the retries ran out
        │   └── TransientFailure  internal: one attempt failed; the operation around it retries
        ├── UploadFailed          the registry rejected an upload
        └── HandoffError          the in-pod handoff: bad config or environment, missing output

Input errors are raised by the models as ``pydantic.ValidationError`` (a ``ValueError``),
before anything is sent: that is where the field name lives. Messages are full sentences
naming the object and the cause; they never hold a secret.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "AllocationRefused",
    "AlreadyExists",
    "ApiError",
    "ArtifactNotFound",
    "AuthenticationError",
    "ClusterUnreachable",
    "ConfigError",
    "Conflict",
    "DigestMismatch",
    "Forbidden",
    "Gone",
    "HandoffError",
    "Invalid",
    "InvalidReference",
    "K8sJobsError",
    "LimitExceeded",
    "NotFound",
    "RegistryError",
    "RegistryUnavailable",
    "ServerUnavailable",
    "SessionClosed",
    "SpecMismatch",
    "StepFailed",
    "StudyError",
    "UnsafeArchive",
    "UploadFailed",
    "scrub",
]

REDACTED = "[redacted]"
_CREDENTIAL_PATTERNS = (
    # An Authorization value: "Basic <base64>", "Bearer <token>".
    re.compile(r"(?i)\b(basic|bearer)(\s+)(?!auth|realm)[A-Za-z0-9._~+/=-]{8,}"),
    # user:password@ (or a token as user@) in a URL.
    re.compile(r"(//)[^\s/@\"']+@"),
    # password=..., "token": "...", secret: ...
    re.compile(
        r"(?i)\b(password|passwd|secret|token|access_token|identitytoken|auth)"
        r"([\"']?\s*[:=]\s*[\"']?)[^\s\"',;&}]+"
    ),
)


# user:password@ opening a reference or a store location written without a scheme
# ("robot:pw@host/repo:tag"), as a word of its own or quoted.
_BARE_USERINFO = re.compile(
    r"(?:^|(?<=[\s\"'(\[]))[^\s/@\"':(\[]+:[^\s/@\"']*@(?!sha256:|sha512:)(?=[A-Za-z0-9\[])"
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Return ``text`` with credentials replaced by "[redacted]": Authorization values,
    userinfo in URLs, ``password=``-like fields, and each of ``secrets`` (as given and as
    the base64 of a basic header). The one function every error message passes through."""
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    text = _CREDENTIAL_PATTERNS[0].sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)
    text = _CREDENTIAL_PATTERNS[1].sub(lambda m: f"{m[1]}{REDACTED}@", text)
    text = _BARE_USERINFO.sub(f"{REDACTED}@", text)
    return _CREDENTIAL_PATTERNS[2].sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)


def basic_forms(username: str, password: str) -> list[str]:
    """Return the password and the base64 forms a basic header carries it in."""
    raw = f"{username}:{password}".encode()
    return [password, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()]


class K8sJobsError(Exception):
    """Base of every error k8sjobs raises on purpose."""


class StepFailed(K8sJobsError):
    """A step ended in a state other than SUCCEEDED while the caller asked to be told."""

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class SpecMismatch(K8sJobsError):
    """A Job with the step's name exists, rendered from a different spec."""


class AllocationRefused(K8sJobsError, ValueError):
    """A step names an allocation the session does not have, or one it cannot run in.

    Raised by ``submit`` and ``submit_many`` before anything is sent; the message names the
    step, the allocation and the fix. ``step`` and ``allocation`` are their names.
    """

    def __init__(self, message: str, *, step: str, allocation: str) -> None:
        super().__init__(message)
        self.step = step
        self.allocation = allocation


class SessionClosed(K8sJobsError):
    """The session that owns this object has been closed."""


class StudyError(K8sJobsError):
    """A study cannot run as written: a cycle, an unknown step or output, a bad file."""


class ConfigError(K8sJobsError, FileNotFoundError):
    """A kubeconfig that is not there, not YAML, or without what a client needs.

    A ``FileNotFoundError`` too, which ``load_config`` raised before this class existed.
    """


class StudyBusy(K8sJobsError):
    """Another driver is running the same study on this machine (see ``k8sjobs.local``)."""


class ApiError(K8sJobsError):
    """The Kubernetes API answered with an error ``Status``."""

    def __init__(
        self, status: int, body: Mapping[str, Any] | None = None, *, what: str = ""
    ) -> None:
        body = body or {}
        self.status = status
        self.reason: str = str(body.get("reason", "")) or "Unknown"
        self.body: Mapping[str, Any] = body
        message = str(body.get("message", "")) or f"HTTP {status}"
        super().__init__(f"{what}: {message}" if what else message)

    @property
    def causes(self) -> list[Mapping[str, Any]]:
        """Return the field-level causes of a 422 Invalid, if the server gave any."""
        details = self.body.get("details") or {}
        return list(details.get("causes") or [])


class NotFound(ApiError):
    """404: the object does not exist (or no longer does)."""


class AlreadyExists(ApiError):
    """409 AlreadyExists: an object of that name exists."""


class Conflict(ApiError):
    """409 Conflict: the object changed since it was read; read it again and retry."""


class Forbidden(ApiError):
    """403: the credentials lack a right; the message names the verb and resource to grant."""


class Invalid(ApiError):
    """422: the server rejected the object; ``causes`` names the fields."""


class Gone(ApiError):
    """410: the resourceVersion asked for is older than the server's history."""


class ServerUnavailable(ApiError):
    """The server stayed unreachable or overloaded (429/5xx) after every allowed retry.

    ``last_error`` is the last attempt's connection error, when no attempt got an answer.
    """

    last_error: BaseException | None = None


class ClusterUnreachable(K8sJobsError):
    """The Kubernetes API server cannot be used: the one line names it, the cause, the fix.

    Raised by a session's start (nothing listens, no answer, TLS fails, 401, 403), and by
    ``wait()``, ``submit`` and the like once the server was lost for longer than the
    backend's ``outage_timeout``: the steps are not failed by that, they keep running on
    the cluster, and a later ``attach`` finds them. ``server`` is the address.
    """

    def __init__(self, message: str, *, server: str = "") -> None:
        super().__init__(message)
        self.server = server


class RegistryError(K8sJobsError):
    """Storing or fetching an artifact failed. The message is scrubbed of credentials when
    the error is made (``scrub``), whichever code raised it: text a registry sent back can
    echo an Authorization header."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(scrub(a) if isinstance(a, str) else a for a in args))


class InvalidReference(RegistryError, ValueError):
    """A reference or a store location could not be parsed."""


class AuthenticationError(RegistryError):
    """The registry refused the credentials, or asked for credentials none were given."""


class ArtifactNotFound(RegistryError):
    """The manifest, tag, or blob does not exist in the store."""


class DigestMismatch(RegistryError):
    """Received bytes do not match the digest or size that names them."""


class UnsafeArchive(RegistryError):
    """A directory archive holds a member that would escape its target directory."""


class LimitExceeded(RegistryError):
    """A manifest or a pull is larger than its limit allows (each message says how to raise it)."""


class RegistryUnavailable(RegistryError):
    """The registry could not be reached, timed out, or kept failing after retries."""


class UploadFailed(RegistryError):
    """The registry rejected an upload (a status that retrying will not fix)."""


class TransientFailure(RegistryUnavailable):
    """Internal: a single-attempt request failed in a way that retrying the larger operation
    around it (a whole blob upload, say) may fix. Callers see a RegistryUnavailable."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class HandoffError(RegistryError):
    """The handoff config or environment is wrong, or a declared output is missing."""


_BY_STATUS: dict[int, type[ApiError]] = {
    403: Forbidden,
    404: NotFound,
    410: Gone,
    422: Invalid,
    429: ServerUnavailable,
}


def api_error(status: int, body: Mapping[str, Any] | None = None, *, what: str = "") -> ApiError:
    """Return the most specific ApiError for an HTTP status and Status body."""
    if status == 409:
        kind: type[ApiError] = (
            AlreadyExists if (body or {}).get("reason") == "AlreadyExists" else Conflict
        )
    elif status >= 500:
        kind = ServerUnavailable
    else:
        kind = _BY_STATUS.get(status, ApiError)
    return kind(status, body, what=what)
