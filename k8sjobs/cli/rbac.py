"""The least rights k8sjobs needs in one namespace: a ServiceAccount, a Role, a RoleBinding.

    k8sjobs rbac --namespace hpc --service-account k8sjobs | kubectl apply -f -
    k8sjobs rbac --namespace hpc study.yaml   # and the rights that study's steps need

``RULES`` lists every (API group, resource, verbs) the Kubernetes backend sends, and why;
``rbac_objects`` turns it into objects (pure: no I/O). Nothing is cluster-wide: a Role, not
a ClusterRole. tests/security/test_rbac.py runs the backend on the fake cluster with only
these rights and checks that every right is used and none is missing; docs/security.md
explains each rule.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..steps.allocation import Allocation
    from ..steps.spec import Step

__all__ = [
    "ALLOCATION_RULES",
    "DEFAULT_SERVICE_ACCOUNT",
    "JOBSET_RULES",
    "KUEUE_RULES",
    "MINICLUSTER_RULES",
    "RULES",
    "Rule",
    "add_rbac_command",
    "rbac_objects",
]

DEFAULT_SERVICE_ACCOUNT = "k8sjobs"


@dataclass(frozen=True)
class Rule:
    """One Role rule: ``verbs`` on ``resource`` (``pods/log`` for a subresource) in ``group``."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str


# Verbs in the order kubectl prints them. Each "why" names the code path in kube/backend.py.
RULES: tuple[Rule, ...] = (
    Rule(
        "batch",
        "jobs",
        ("create", "get", "list", "watch", "patch", "delete"),
        "create a step's Job; get it when the name is taken, to adopt or refuse it; list and "
        "watch the study's Jobs (one shared watch); patch to mark it cancelled from another "
        "shell (so its driver says CANCELLED); delete to cancel, replace or clean up",
    ),
    Rule(
        "",
        "configmaps",
        ("create", "get", "list", "delete"),
        "the step's script and handoff configuration, created owned by its Job: get one "
        "found in its place, to keep it (ours) or delete and remake it (stale); list to find "
        "Jobs without one, and ConfigMaps without a Job, on attach; delete on replace",
    ),
    Rule(
        "",
        "secrets",
        ("create", "get", "delete"),
        "the Secret holding a step's SecretStr env values: the same life as its ConfigMap "
        "(no list or watch: k8sjobs never enumerates Secrets)",
    ),
    Rule(
        "",
        "services",
        ("create", "get", "delete"),
        "the headless Service of a multi-node step, so indexed pods find each other",
    ),
    Rule(
        "",
        "pods",
        ("list", "watch"),
        "follow the study's pods (one shared watch) to tell pending, running and why it failed",
    ),
    Rule(
        "",
        "events",
        ("list", "watch"),
        "follow the namespace's Warning Events (one shared watch) to tell why a step waits: "
        "its pods refused by admission (FailedCreate), unschedulable, a volume not mounted",
    ),
    Rule(
        "",
        "pods/log",
        ("get",),
        "read and follow logs; read the push container's output digests; save a failed log",
    ),
)


#: Added by ``--minicluster``: steps with ``target: minicluster`` (the Flux Operator). Their
#: Job and pods are the operator's, followed through the Job and Pod rules above.
MINICLUSTER_RULES: tuple[Rule, ...] = (
    Rule(
        "flux-framework.org",
        "miniclusters",
        ("create", "get", "delete"),
        "create a target: minicluster step's MiniCluster; get it when the name is taken; "
        "delete it to cancel, replace or clean up (its Job alone would be made again)",
    ),
)


#: Added by ``--jobset``: steps with ``target: jobset``. Their child Jobs and pods are the
#: JobSet controller's, followed through the Job and Pod rules above.
JOBSET_RULES: tuple[Rule, ...] = (
    Rule(
        "jobset.x-k8s.io",
        "jobsets",
        ("create", "get", "list", "watch", "patch", "delete"),
        "create a target: jobset step's JobSet; get it when the name is taken; list and watch "
        "the study's JobSets (one shared watch); patch to mark it cancelled from another "
        "shell; delete it to cancel, replace or clean up",
    ),
)

#: Added by ``--kueue``: steps with a ``queue``. Read only: Kueue writes the Workloads.
KUEUE_RULES: tuple[Rule, ...] = (
    Rule(
        "kueue.x-k8s.io",
        "workloads",
        ("list", "watch"),
        "follow the Workloads of queued steps (one shared watch) to tell why a step waits: "
        "not admitted, its queue missing, preempted",
    ),
)


#: Added by ``--allocations`` (or a study file with ``allocations:``): the driver reaches
#: each allocation pod's agent through one long-lived ``pods/exec`` stream.
ALLOCATION_RULES: tuple[Rule, ...] = (
    Rule(
        "",
        "pods/exec",
        ("create", "get"),
        "open one stream to the agent of each pod of an allocation (a WebSocket: "
        "Kubernetes 1.31 and later authorize its upgrade as create, earlier ones as get)",
    ),
    Rule(
        "",
        "pods",
        ("get",),
        "read an allocation's pod before opening its stream (running, and which container)",
    ),
)


def _rules(
    minicluster: bool, jobset: bool = False, kueue: bool = False, allocations: bool = False
) -> tuple[Rule, ...]:
    return (
        RULES
        + (MINICLUSTER_RULES if minicluster else ())
        + (JOBSET_RULES if jobset else ())
        + (KUEUE_RULES if kueue else ())
        + (ALLOCATION_RULES if allocations else ())
    )


def rbac_objects(
    namespace: str,
    service_account: str = DEFAULT_SERVICE_ACCOUNT,
    *,
    minicluster: bool = False,
    jobset: bool = False,
    kueue: bool = False,
    allocations: bool = False,
) -> list[Any]:
    """Return the ServiceAccount, Role and RoleBinding that let k8sjobs run in ``namespace``.

    ``minicluster`` adds the rights Flux Operator steps need (``MINICLUSTER_RULES``),
    ``jobset`` those of JobSet steps (``JOBSET_RULES``), ``kueue`` those of queued steps,
    ``allocations`` those of a study's allocations (``ALLOCATION_RULES``).
    """
    from ..steps.spec import check_dns_label  # pydantic: not for the parser (``rbac --help``)

    check_dns_label(namespace, "namespace")
    check_dns_label(service_account, "service account name")
    labels = {"app.kubernetes.io/managed-by": "k8sjobs"}

    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": namespace, "labels": dict(labels)}

    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(service_account)}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(service_account),
        "rules": [
            {"apiGroups": [r.group], "resources": [r.resource], "verbs": list(r.verbs)}
            for r in _rules(minicluster, jobset, kueue, allocations)
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(service_account),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": service_account,
        },
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
    return [account, role, binding]


def rbac_yaml(
    namespace: str,
    service_account: str = DEFAULT_SERVICE_ACCOUNT,
    *,
    minicluster: bool = False,
    jobset: bool = False,
    kueue: bool = False,
    allocations: bool = False,
) -> str:
    """Return ``rbac_objects`` as one YAML stream for ``kubectl apply -f -``, rules explained."""
    header = [f"# k8sjobs: the rights it needs in namespace {namespace}, and nothing else."]
    for rule in _rules(minicluster, jobset, kueue, allocations):
        header += textwrap.wrap(
            f"{rule.resource}: {rule.why}",
            width=98,
            initial_indent="#   ",
            subsequent_indent="#     ",
        )
    objects = rbac_objects(
        namespace,
        service_account,
        minicluster=minicluster,
        jobset=jobset,
        kueue=kueue,
        allocations=allocations,
    )
    import yaml  # not for the parser (``rbac --help``)

    body = yaml.safe_dump_all(objects, sort_keys=False)
    return "\n".join(header) + "\n" + body


def add_rbac_command(commands: Any, common: Any) -> None:
    """Add ``k8sjobs rbac`` to the CLI's subparsers; ``common`` adds the global options."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "rbac",
        help="print the ServiceAccount, Role and RoleBinding k8sjobs needs in a namespace",
        description="Print, as YAML for kubectl apply, the least rights k8sjobs needs.",
    )
    common(parser, ("namespace",))
    parser.add_argument(
        "--service-account",
        default=DEFAULT_SERVICE_ACCOUNT,
        help=f"the ServiceAccount to create and bind (default {DEFAULT_SERVICE_ACCOUNT})",
    )
    parser.add_argument(
        "--minicluster",
        action="store_true",
        help="also the rights of target: minicluster steps (Flux Operator MiniClusters)",
    )
    parser.add_argument(
        "--jobset",
        action="store_true",
        help="also the rights of target: jobset steps (jobset.x-k8s.io JobSets)",
    )
    parser.add_argument(
        "--kueue",
        action="store_true",
        help="also the rights of queued steps (reading kueue.x-k8s.io Workloads)",
    )
    parser.add_argument(
        "--allocations",
        action="store_true",
        help="also the rights of a study's allocations (pods/exec to each pod's agent)",
    )
    parser.add_argument(
        "study",
        nargs="?",
        metavar="STUDY.yaml",
        help="a study file: also the rights its steps and allocations need "
        "(as --allocations, --jobset, --minicluster, --kueue)",
    )
    parser.set_defaults(func=_cmd_rbac)


def study_needs(path: str) -> dict[str, bool]:
    """Return the extra rule sets the study file at ``path`` needs, as ``rbac_objects``
    takes them: allocations when it has any, jobset, minicluster and kueue by its steps'
    (and allocations') targets and queues."""
    from ..study import load_study  # pydantic and yaml: not for the parser (``rbac --help``)

    study = load_study(path)
    placed: list[Step | Allocation] = [*study.steps, *study.allocations]
    targets = {p.target for p in placed}
    return {
        "allocations": bool(study.allocations),
        "jobset": "jobset" in targets,
        "minicluster": "minicluster" in targets,
        "kueue": any(p.queue for p in placed),
    }


def _cmd_rbac(args: argparse.Namespace) -> int:
    if not args.namespace:
        from .options import UsageError

        raise UsageError("k8sjobs rbac: name the namespace the steps run in: -n NAMESPACE")
    needs = study_needs(args.study) if args.study else {}
    text = rbac_yaml(
        args.namespace,
        args.service_account,
        minicluster=args.minicluster or needs.get("minicluster", False),
        jobset=args.jobset or needs.get("jobset", False),
        kueue=args.kueue or needs.get("kueue", False),
        allocations=args.allocations or needs.get("allocations", False),
    )
    sys.stdout.write(text)
    return 0
