"""The resource kinds the fake API server serves: their REST names, defaults and validation.

Defaults are those a v1.36 API server fills in (recorded in the k8s reference transcripts),
because drivers and their tests read them back. Validation combines the schema check of
kubernetes-validate with the few semantic rules users hit in practice: object names, the Job
restartPolicy, the immutable Job template, the 1 MiB ConfigMap/Secret limit, what a
LimitRange or ResourceQuota may say (`resourcelists`) and what a container's resources may say,
in a Pod or a Job's pod template (`containerresources`).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import errors as _errors
from .containerresources import pod_spec_resource_causes
from .errors import cause as cause
from .names import DNS1123_LABEL, DNS1123_SUBDOMAIN, LABEL_MSG, SUBDOMAIN_MSG
from .podresources import default_requests_from_limits
from .resourcelists import default_limit_range, limit_range_causes, resource_quota_causes

SCHEMA_VERSION = "1.36.0"
MAX_DATA_BYTES = 1024 * 1024
MAX_ANNOTATION_BYTES = 256 * 1024  # all of an object's annotations, keys and values
_JOB_NONNEGATIVE = (
    "parallelism",
    "completions",
    "backoffLimit",
    "backoffLimitPerIndex",
    "maxFailedIndexes",
    "ttlSecondsAfterFinished",
)


class ResourceHooks(Protocol):
    """What a resource defined at run time (a CRD, a custom kind) adds to the store's writes."""

    @property
    def served(self) -> tuple[str, ...]:
        """Return the versions under which the resource is served."""

    @property
    def builtin_schema(self) -> bool:
        """Return whether the built-in (kubernetes-validate) schema check applies too."""

    def prepare(self, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Normalise `obj` in place before validation (prune, default), `old` on update."""

    def causes(self, obj: dict[str, Any], old: dict[str, Any] | None) -> list[dict[str, str]]:
        """Return the validation causes for `obj` (empty when it is valid), `old` on update."""


@dataclass(frozen=True)
class Resource:
    """One REST resource: where it lives in the URL space and what kind it holds."""

    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    has_generation: bool = False
    has_status: bool = False
    hooks: ResourceHooks | None = field(default=None, compare=False)

    @property
    def api_version(self) -> str:
        """Return the apiVersion written on objects of this resource."""
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES: dict[str, Resource] = {
    r.plural if r.plural != "events" or not r.group else f"events.{r.group}": r
    for r in (
        Resource("namespaces", "Namespace", "", "v1", False, has_status=True),
        Resource("nodes", "Node", "", "v1", False, has_status=True),
        Resource("configmaps", "ConfigMap", "", "v1", True),
        Resource("secrets", "Secret", "", "v1", True),
        Resource("services", "Service", "", "v1", True, has_status=True),
        Resource("events", "Event", "", "v1", True),
        Resource("limitranges", "LimitRange", "", "v1", True),
        Resource("resourcequotas", "ResourceQuota", "", "v1", True, has_status=True),
        Resource("pods", "Pod", "", "v1", True, has_generation=True, has_status=True),
        Resource("jobs", "Job", "batch", "v1", True, has_generation=True, has_status=True),
        Resource("priorityclasses", "PriorityClass", "scheduling.k8s.io", "v1", False),
        Resource("runtimeclasses", "RuntimeClass", "node.k8s.io", "v1", False),
        # The same stored Events, served in the events.k8s.io/v1 shape (see _events).
        Resource("events", "Event", "events.k8s.io", "v1", True),
    )
}

_MAX_INT32 = 2**31 - 1

# --------------------------------------------------------------------------- defaults


def default_job(job: dict[str, Any], uid: str) -> None:
    """Fill in what the API server and its Job strategy add on create (selector, labels...)."""
    spec = job.setdefault("spec", {})
    name = job["metadata"]["name"]
    labels = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    meta_labels = job["metadata"].setdefault("labels", {})
    for key, value in labels.items():
        meta_labels.setdefault(key, value)
    job["metadata"]["labels"] = dict(sorted(meta_labels.items()))
    if not spec.get("manualSelector"):
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
        template_labels = template_meta.setdefault("labels", {})
        template_labels.update(labels)
        template_meta["labels"] = dict(sorted(template_labels.items()))
    ordered: dict[str, Any] = {}
    ordered["parallelism"] = spec.get("parallelism", 1)
    if "completions" in spec:
        ordered["completions"] = spec["completions"]
    elif "parallelism" not in spec:
        ordered["completions"] = 1
    for key in ("activeDeadlineSeconds", "podFailurePolicy", "successPolicy"):
        if key in spec:
            ordered[key] = spec[key]
    _default_pod_failure_policy(spec.get("podFailurePolicy"))
    per_index = spec.get("backoffLimitPerIndex") is not None
    ordered["backoffLimit"] = spec.get("backoffLimit", _MAX_INT32 if per_index else 6)
    for key in ("backoffLimitPerIndex", "maxFailedIndexes", "selector"):
        if key in spec:
            ordered[key] = spec[key]
    ordered["manualSelector"] = spec.get("manualSelector", False)
    template = spec.get("template", {})
    ordered["template"] = {"metadata": template.get("metadata", {}), **template}
    if "ttlSecondsAfterFinished" in spec:
        ordered["ttlSecondsAfterFinished"] = spec["ttlSecondsAfterFinished"]
    ordered["completionMode"] = spec.get("completionMode", "NonIndexed")
    ordered["suspend"] = spec.get("suspend", False)
    replacement = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    ordered["podReplacementPolicy"] = spec.get("podReplacementPolicy", replacement)
    for key, value in spec.items():
        ordered.setdefault(key, value)
    job["spec"] = ordered
    default_pod_spec(ordered["template"].setdefault("spec", {}))
    job["status"] = {}


def _default_pod_failure_policy(policy: dict[str, Any] | None) -> None:
    """Default each `onPodConditions` pattern's status to "True", as the Job strategy does."""
    for rule in (policy or {}).get("rules") or []:
        for pattern in rule.get("onPodConditions") or []:
            pattern.setdefault("status", "True")


def default_pod_spec(spec: dict[str, Any]) -> None:
    """Fill in the PodSpec defaults the API server writes (dnsPolicy, schedulerName...)."""
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        _default_container(container)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for volume in spec.get("volumes", []):
        for source in ("configMap", "secret"):
            if source in volume:
                volume[source].setdefault("defaultMode", 420)
        if "emptyDir" in volume and volume["emptyDir"] is None:
            volume["emptyDir"] = {}


def _default_container(container: dict[str, Any]) -> None:
    container.setdefault("resources", {})
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = str(container.get("image", ""))
    tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
    latest = not tagged or image.endswith(":latest")
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    for port in container.get("ports", []):
        port.setdefault("protocol", "TCP")


def default_pod(pod: dict[str, Any]) -> None:
    """Fill in what the API server and its admission plugins add to a new Pod."""
    spec = pod.setdefault("spec", {})
    default_pod_spec(spec)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault(
        "tolerations",
        [
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ],
    )
    spec.setdefault("priority", 0)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    default_requests_from_limits(spec)
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def qos_class(spec: dict[str, Any]) -> str:
    """Return the pod's QoS class (BestEffort, Burstable or Guaranteed) from its resources."""
    containers = [*spec.get("initContainers", []), *spec.get("containers", [])]
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        if not {"cpu", "memory"} <= limits.keys():
            return "Burstable"
        if any(requests.get(k, limits[k]) != limits[k] for k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"


def default_service(service: dict[str, Any]) -> None:
    """Fill in the Service defaults (type, sessionAffinity, a headless or fake cluster IP)."""
    spec = service.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports", []):
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    if spec.get("clusterIP") != "None":
        spec.setdefault("clusterIP", "10.96.0.10")
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    service["status"] = {"loadBalancer": {}}


def apply_defaults(resource: Resource, obj: dict[str, Any], uid: str) -> None:
    """Fill in the creation defaults for `obj` of `resource` in place."""
    if resource.plural == "jobs":
        default_job(obj, uid)
    elif resource.plural == "pods":
        default_pod(obj)
    elif resource.plural == "services":
        default_service(obj)
    elif resource.plural == "secrets":
        obj.setdefault("type", "Opaque")
    elif resource.plural == "limitranges":
        default_limit_range(obj)
    elif resource.plural == "priorityclasses":
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    elif resource.plural == "namespaces":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active"}
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"][
            "name"
        ]


# --------------------------------------------------------------------------- validation


class Validator:
    """Validate objects the way the API server does, cheaply enough for bulk submission.

    A kubernetes-validate call costs ~8 ms, so a schema check of every object would cap
    creation at about 120 objects/s. Schema errors are almost always about the *shape* of
    an object (unknown fields, wrong types), so with `schema="shape"` (the default) each
    distinct shape (keys and value types, not values) is checked once and remembered.
    `schema="always"` checks every object; `schema="off"` skips the schema check.
    """

    def __init__(self, schema: str = "shape") -> None:
        if schema not in ("shape", "always", "off"):
            raise ValueError(f'schema must be "shape", "always" or "off", not {schema!r}')
        self.schema = schema
        self._valid_shapes: set[str] = set()
        self._lock = threading.Lock()

    def validate_create(self, resource: Resource, obj: dict[str, Any]) -> None:
        """Raise 422 Invalid when `obj` may not be created."""
        name = obj.get("metadata", {}).get("name", "")
        causes = self._name_causes(resource, name)
        causes += _semantic_causes(resource, obj, None)
        if not causes and (resource.hooks is None or resource.hooks.builtin_schema):
            causes += self._schema_causes(obj)
        if causes:
            raise _errors.invalid(resource.kind, name, causes, resource.group)

    def validate_update(self, resource: Resource, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Raise 422 Invalid when `new` may not replace `old` (immutable fields, schema)."""
        name = new["metadata"]["name"]
        causes = _semantic_causes(resource, new, old)
        if resource.plural == "jobs":
            causes += _job_immutable_causes(old, new)
        elif resource.plural in ("configmaps", "secrets"):
            causes += _immutable_data_causes(old, new)
        if not causes and (resource.hooks is None or resource.hooks.builtin_schema):
            causes += self._schema_causes(new)
        if causes:
            raise _errors.invalid(resource.kind, name, causes, resource.group)

    def _name_causes(self, resource: Resource, name: str) -> list[dict[str, str]]:
        if not name:
            return [
                cause(
                    "FieldValueRequired",
                    "Required value: name or generateName is required",
                    "metadata.name",
                )
            ]
        pattern, msg = (
            (DNS1123_LABEL, LABEL_MSG)
            if resource.plural in ("namespaces", "services")
            else (DNS1123_SUBDOMAIN, SUBDOMAIN_MSG)
        )
        if len(name) > 253 or not pattern.match(name):
            return [cause("FieldValueInvalid", f'Invalid value: "{name}": {msg}', "metadata.name")]
        if resource.plural == "jobs" and len(name) > 63:
            message = f'Invalid value: "{name}": must be no more than 63 characters'
            return [cause("FieldValueInvalid", message, "metadata.name")]
        return []

    def _schema_causes(self, obj: dict[str, Any]) -> list[dict[str, str]]:
        if self.schema == "off":
            return []
        key = json.dumps(_shape(obj), sort_keys=True) if self.schema == "shape" else ""
        if key and key in self._valid_shapes:
            return []
        kubernetes_validate = schema_validator()
        if kubernetes_validate is None:
            return []
        try:
            with self._lock:
                kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            field = ".".join(str(p) for p in getattr(exc, "path", [])) or "<root>"
            message = str(getattr(exc, "message", exc)).splitlines()[0]
            return [cause("FieldValueInvalid", f"Invalid value: {message}", field)]
        except kubernetes_validate.SchemaNotFoundError:
            return []
        if key:
            self._valid_shapes.add(key)
        return []


@functools.cache
def schema_validator() -> Any:
    """Return the kubernetes_validate module, or None (once warned) when it is not installed.

    It comes with ``pip install 'k8sjobs[testing]'``. Without it the fake cluster still
    serves and runs Jobs, but no longer refuses an object the Kubernetes schema would
    (an unknown field, a mistyped value) as kube-apiserver does.
    """
    try:
        import kubernetes_validate
    except ImportError:
        logging.getLogger("k8sjobs.testing").warning(
            "kubernetes_validate is not installed: the fake cluster does not check objects "
            "against the Kubernetes schema; pip install 'k8sjobs[testing]' for the checks"
        )
        return None
    return kubernetes_validate


def _shape(value: Any) -> Any:
    """Return the structure of `value` without its scalar contents."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def _semantic_causes(
    resource: Resource, obj: dict[str, Any], old: dict[str, Any] | None
) -> list[dict[str, str]]:
    causes = _annotation_causes(obj)
    if resource.hooks is not None:
        return causes + resource.hooks.causes(obj, old)
    if resource.plural in ("configmaps", "secrets"):
        causes += _size_causes(resource, obj)
    if resource.plural == "secrets":
        causes += _secret_type_causes(obj)
    if resource.plural == "pods":
        spec = _mapping(obj.get("spec"))
        if not spec.get("containers"):  # validateContainers: a Pod runs at least one
            causes.append(cause("FieldValueRequired", "Required value", "spec.containers"))
        causes += pod_spec_resource_causes(spec, "spec", requests_from_limits=True)
    if resource.plural == "jobs":
        causes += _job_number_causes(obj) + _job_template_causes(obj) + _job_causes(obj)
    if resource.plural in ("limitranges", "resourcequotas"):
        if resource.plural == "limitranges":
            causes += limit_range_causes(obj)
        else:
            causes += resource_quota_causes(obj)
    return causes


def _job_template_causes(job: dict[str, Any]) -> list[dict[str, str]]:
    """Return the causes of the Job's pod template (ValidatePodTemplateSpec): its containers'
    resources, checked after the Job's counts and before its restartPolicy, as validateJobSpec
    orders them."""
    spec = _mapping(_mapping(_mapping(job.get("spec")).get("template")).get("spec"))
    return pod_spec_resource_causes(spec, "spec.template.spec")


def _annotation_causes(obj: dict[str, Any]) -> list[dict[str, str]]:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if total > MAX_ANNOTATION_BYTES:
        message = f"Too long: may not be more than {MAX_ANNOTATION_BYTES} bytes"
        return [cause("FieldValueTooLong", message, "metadata.annotations")]
    return []


def _job_number_causes(job: dict[str, Any]) -> list[dict[str, str]]:
    """Return a cause for each count the Job spec gives below zero."""
    spec = job.get("spec") or {}
    causes = []
    for key in _JOB_NONNEGATIVE:
        value = spec.get(key)
        if isinstance(value, int) and value < 0:
            message = f"Invalid value: {value}: must be greater than or equal to 0"
            causes.append(cause("FieldValueInvalid", message, f"spec.{key}"))
    return causes


# Keys the API server requires of a Secret of each built-in type (ValidateSecret).
_SECRET_REQUIRED_KEYS = {
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
}


def _secret_type_causes(secret: dict[str, Any]) -> list[dict[str, str]]:
    """Return a Required cause for each key the Secret's type needs and it lacks."""
    present = {**(secret.get("data") or {}), **(secret.get("stringData") or {})}
    required = _SECRET_REQUIRED_KEYS.get(str(secret.get("type") or "Opaque"), ())
    return [
        cause("FieldValueRequired", "Required value", f"data[{key}]")
        for key in required
        if not present.get(key)
    ]


def _size_causes(resource: Resource, obj: dict[str, Any]) -> list[dict[str, str]]:
    """Refuse a ConfigMap or Secret whose values exceed 1 MiB, counted as the API server
    counts them: the bytes of the values (UTF-8 text, decoded base64), keys not counted; a
    Secret's stringData replaces the data of the same key."""
    if resource.plural == "configmaps":
        sizes = {k: _text_bytes(v) for k, v in _mapping(obj.get("data")).items()}
        total = sum(sizes.values())
        total += sum(_base64_bytes(v) for v in _mapping(obj.get("binaryData")).values())
        field = "[]"  # the whole object, as ValidateConfigMap names it
    else:
        sizes = {k: _base64_bytes(v) for k, v in _mapping(obj.get("data")).items()}
        sizes.update({k: _text_bytes(v) for k, v in _mapping(obj.get("stringData")).items()})
        total = sum(sizes.values())
        field = "data"
    if total > MAX_DATA_BYTES:
        message = f"Too long: may not be more than {MAX_DATA_BYTES} bytes"
        return [cause("FieldValueTooLong", message, field)]
    return []


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text_bytes(value: Any) -> int:
    return len(str(value).encode("utf-8", "surrogatepass"))


def _base64_bytes(value: Any) -> int:
    """Return how many bytes a base64 value decodes to (without decoding it)."""
    text = str(value).rstrip("=")
    return len(text) * 3 // 4


def _job_causes(job: dict[str, Any]) -> list[dict[str, str]]:
    # a null spec, template or pod spec decodes to Go's zero struct: judged as empty
    pod_spec = _mapping(_mapping(_mapping(job.get("spec")).get("template")).get("spec"))
    policy = pod_spec.get("restartPolicy")
    field = "spec.template.spec.restartPolicy"
    # validateJobSpec: an unset policy is defaulted to Always first, so the two read alike
    if policy in (None, "", "Always"):
        return [
            cause("FieldValueRequired", 'Required value: valid values: "OnFailure", "Never"', field)
        ]
    if policy not in ("OnFailure", "Never"):
        message = f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"'
        return [cause("FieldValueNotSupported", message, field)]
    if _mapping(job.get("spec")).get("podFailurePolicy") is not None and policy != "Never":
        message = (
            f'Invalid value: "{policy}": only "Never" is supported when podFailurePolicy is '
            "specified"
        )
        return [cause("FieldValueInvalid", message, field)]
    if not pod_spec.get("containers"):
        return [cause("FieldValueRequired", "Required value", "spec.template.spec.containers")]
    return []


def _immutable_data_causes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, str]]:
    """Return kube-apiserver's causes for changing an immutable ConfigMap or Secret: once
    ``immutable: true``, only its metadata may change (labels, annotations, owners,
    finalizers), and it may be deleted (ValidateConfigMapUpdate, ValidateSecretUpdate)."""
    causes = []
    if old.get("kind") == "Secret" and new.get("type", "Opaque") != old.get("type", "Opaque"):
        message = f"Invalid value: {json.dumps(new.get('type'))}: field is immutable"
        causes.append(cause("FieldValueInvalid", message, "type"))
    if old.get("immutable") is not True:
        return causes
    message = "Forbidden: field is immutable when `immutable` is set"
    if new.get("immutable") is not True:
        causes.append(cause("FieldValueForbidden", message, "immutable"))
    for key in ("data", "binaryData"):
        if new.get(key) != old.get(key):
            causes.append(cause("FieldValueForbidden", message, key))
    return causes


def _job_immutable_causes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, str]]:
    old_template = old["spec"].get("template")
    new_template = new.get("spec", {}).get("template")
    suspended = old["spec"].get("suspend") and not old.get("status", {}).get("startTime")
    if new_template != old_template and not suspended:
        message = f"Invalid value: {json.dumps(new_template)}: field is immutable"
        return [cause("FieldValueInvalid", message, "spec.template")]
    for key in ("completions", "completionMode", "selector"):
        if key == "completions" and new["spec"].get("parallelism") == new["spec"].get(key):
            continue  # elastic Indexed jobs may scale completions with parallelism
        if new.get("spec", {}).get(key) != old["spec"].get(key):
            value = json.dumps(new.get("spec", {}).get(key))
            message = f"Invalid value: {value}: field is immutable"
            return [cause("FieldValueInvalid", message, f"spec.{key}")]
    return []
