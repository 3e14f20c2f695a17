"""Check a pod spec against the Pod Security Standards (pure: no I/O).

    from k8sjobs.render import check_restricted
    problems = check_restricted(manifests.job["spec"]["template"]["spec"])

``check_baseline`` and ``check_restricted`` return one sentence per violation (empty: the
Pod Security admission controller of a namespace labelled
``pod-security.kubernetes.io/enforce: restricted`` would admit the pod). The rules are the
Kubernetes Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards,
policy version "latest"), for Linux pods. Windows-only fields are checked only where the
standard forbids them (hostProcess).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["check_baseline", "check_restricted"]

_BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
_SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
_SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
_RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def check_baseline(pod_spec: Mapping[str, Any], annotations: Mapping[str, str] = {}) -> list[str]:
    """Return every way ``pod_spec`` breaks the "baseline" level (empty when it passes).

    ``annotations`` are the pod's (AppArmor profiles were annotations before 1.30).
    """
    pod = _context(pod_spec)
    problems = [
        f"spec.{field} must be unset or false (baseline: Host Namespaces)"
        for field in ("hostNetwork", "hostPID", "hostIPC")
        if pod_spec.get(field)
    ]
    problems += _host_process("spec.securityContext", pod)
    problems += _selinux("spec.securityContext", pod)
    problems += _apparmor("spec.securityContext", pod)
    problems += _seccomp_not_unconfined("spec.securityContext", pod)
    for sysctl in pod.get("sysctls") or ():
        if sysctl.get("name") not in _SAFE_SYSCTLS:
            problems.append(
                f'spec.securityContext.sysctls "{sysctl.get("name")}" is not a safe sysctl '
                "(baseline: Sysctls)"
            )
    for volume in pod_spec.get("volumes") or ():
        if "hostPath" in volume:
            problems.append(
                f'volume "{volume.get("name")}" is a hostPath volume (baseline: HostPath Volumes)'
            )
    for key, value in annotations.items():
        if key.startswith(_APPARMOR_ANNOTATION) and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            problems.append(
                f'annotation {key} is "{value}"; use runtime/default or localhost/<profile> '
                "(baseline: AppArmor)"
            )
    for where, container in _containers(pod_spec):
        problems += _baseline_container(where, container)
    return problems


def check_restricted(pod_spec: Mapping[str, Any], annotations: Mapping[str, str] = {}) -> list[str]:
    """Return every way ``pod_spec`` breaks the "restricted" level (empty when it passes)."""
    problems = check_baseline(pod_spec, annotations)
    pod = _context(pod_spec)
    for volume in pod_spec.get("volumes") or ():
        kinds = set(volume) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            problems.append(
                f'volume "{volume.get("name")}" is of type {", ".join(sorted(kinds))}; '
                "restricted allows only " + ", ".join(sorted(_RESTRICTED_VOLUMES))
            )
    if pod.get("runAsUser") == 0:
        problems.append("spec.securityContext.runAsUser must not be 0 (restricted: non-root)")
    if pod.get("runAsNonRoot") is False:
        problems.append("spec.securityContext.runAsNonRoot must not be false (restricted)")
    pod_profile = (pod.get("seccompProfile") or {}).get("type")
    for where, container in _containers(pod_spec):
        problems += _restricted_container(where, container, pod, pod_profile)
    return problems


def _context(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return spec.get("securityContext") or {}


def _containers(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for kind in _CONTAINER_LISTS:
        for container in pod_spec.get(kind) or ():
            yield f"{kind}[{container.get('name')}]", container


def _baseline_container(where: str, container: Mapping[str, Any]) -> list[str]:
    context = _context(container)
    sc = f"{where}.securityContext"
    problems = _host_process(sc, context) + _selinux(sc, context) + _apparmor(sc, context)
    problems += _seccomp_not_unconfined(sc, context)
    if context.get("privileged"):
        problems.append(f"{sc}.privileged must be unset or false (baseline: Privileged)")
    added = set((context.get("capabilities") or {}).get("add") or ())
    if added - _BASELINE_CAPABILITIES:
        extra = ", ".join(sorted(added - _BASELINE_CAPABILITIES))
        problems.append(f"{sc}.capabilities.add has {extra} (baseline: Capabilities)")
    if context.get("procMount") not in (None, "Default"):
        problems.append(f"{sc}.procMount must be Default (baseline: /proc Mount Type)")
    for port in container.get("ports") or ():
        if port.get("hostPort"):
            problems.append(f"{where}.ports sets hostPort {port['hostPort']} (baseline)")
    return problems


def _restricted_container(
    where: str, container: Mapping[str, Any], pod: Mapping[str, Any], pod_profile: Any
) -> list[str]:
    context = _context(container)
    sc = f"{where}.securityContext"
    problems = []
    if context.get("allowPrivilegeEscalation") is not False:
        problems.append(
            f"{sc}.allowPrivilegeEscalation must be false (restricted: Privilege Escalation)"
        )
    capabilities = context.get("capabilities") or {}
    if "ALL" not in (capabilities.get("drop") or ()):
        problems.append(f'{sc}.capabilities.drop must include "ALL" (restricted: Capabilities)')
    added = set(capabilities.get("add") or ()) - {"NET_BIND_SERVICE"}
    if added:
        problems.append(
            f"{sc}.capabilities.add may hold only NET_BIND_SERVICE, not "
            f"{', '.join(sorted(added))} (restricted: Capabilities)"
        )
    non_root = context.get("runAsNonRoot", pod.get("runAsNonRoot"))
    if non_root is not True:
        problems.append(
            f"{sc}.runAsNonRoot (or the pod's) must be true (restricted: Running as Non-root)"
        )
    if context.get("runAsUser") == 0:
        problems.append(f"{sc}.runAsUser must not be 0 (restricted: Running as Non-root user)")
    profile = (context.get("seccompProfile") or {}).get("type", pod_profile)
    if profile not in ("RuntimeDefault", "Localhost"):
        problems.append(
            f"{sc}.seccompProfile.type (or the pod's) must be RuntimeDefault or Localhost "
            "(restricted: Seccomp)"
        )
    return problems


def _host_process(where: str, context: Mapping[str, Any]) -> list[str]:
    if (context.get("windowsOptions") or {}).get("hostProcess"):
        return [f"{where}.windowsOptions.hostProcess must be unset or false (baseline)"]
    return []


def _selinux(where: str, context: Mapping[str, Any]) -> list[str]:
    options = context.get("seLinuxOptions") or {}
    problems = []
    if options.get("type", "") not in _SELINUX_TYPES:
        problems.append(f'{where}.seLinuxOptions.type "{options["type"]}" (baseline: SELinux)')
    problems += [
        f"{where}.seLinuxOptions.{field} must be unset (baseline: SELinux)"
        for field in ("user", "role")
        if options.get(field)
    ]
    return problems


def _apparmor(where: str, context: Mapping[str, Any]) -> list[str]:
    kind = (context.get("appArmorProfile") or {}).get("type")
    if kind not in (None, "RuntimeDefault", "Localhost"):
        return [f'{where}.appArmorProfile.type "{kind}" (baseline: AppArmor)']
    return []


def _seccomp_not_unconfined(where: str, context: Mapping[str, Any]) -> list[str]:
    if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
        return [f"{where}.seccompProfile.type must not be Unconfined (baseline: Seccomp)"]
    return []
