"""The resource types the emulator serves, and their discovery documents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" is the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    # Extra field-selector labels beyond metadata.name / metadata.namespace (real API allow-lists).
    fields: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """`plural` or `plural.group`, kubectl style; the key used by `Store` methods."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


_EVENT_FIELDS = (
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
    "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
    "reason", "reportingComponent", "source", "type",
)

RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, ("ns",), ("status",), ("status.phase",)),
    ResourceType("", "v1", "nodes", "Node", False, ("no",), ("status",), ("spec.unschedulable",)),
    ResourceType(
        "", "v1", "pods", "Pod", True, ("po",), ("binding", "status", "log"),
        ("spec.nodeName", "spec.schedulerName", "spec.restartPolicy", "spec.serviceAccountName",
         "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"),
    ),
    ResourceType("", "v1", "events", "Event", True, ("ev",), (), _EVENT_FIELDS),
    ResourceType("", "v1", "resourcequotas", "ResourceQuota", True, ("quota",), ("status",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    ResourceType("", "v1", "secrets", "Secret", True, (), (), ("type",)),
    ResourceType("", "v1", "services", "Service", True, ("svc",), ("status",)),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",)),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, ("ev",), (), _EVENT_FIELDS),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    # What an installed chart holds (loaded by hami.testing.install; no controller acts on them).
    ResourceType("apps", "v1", "deployments", "Deployment", True, ("deploy",), ("status",)),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), ("status",)),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceType(
        "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration", False,
    ),
    ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ("netpol",)),
    # Custom resources of cert-manager and the Prometheus Operator, as their CRDs serve them.
    ResourceType("cert-manager.io", "v1", "issuers", "Issuer", True),
    ResourceType("cert-manager.io", "v1", "certificates", "Certificate", True, ("cert",), ("status",)),
    ResourceType("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor", True, ("smon",)),
    ResourceType("monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule", True, ("promrule",)),
)

BY_PATH: dict[tuple[str, str, str], ResourceType] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}


def resolve(key: str) -> ResourceType:
    """`pods`, `events` (core), `events.events.k8s.io`, `leases` (unique plural) → the type."""
    for r in RESOURCES:
        if key == r.key:
            return r
    matches = [r for r in RESOURCES if r.plural == key]
    if len(matches) == 1:
        return matches[0]
    raise KeyError(f"unknown resource {key!r}; known: {sorted(r.key for r in RESOURCES)}")


VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


_SUBRESOURCES = {"binding": ("Binding", ["create"]), "log": ("Pod", ["get"])}


def _resource_doc(r: ResourceType) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [{
        "name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind,
        "verbs": VERBS, "shortNames": list(r.short_names),
    }]
    for sub in r.subresources:
        kind, verbs = _SUBRESOURCES.get(sub, (r.kind, ["get", "patch", "update"]))
        docs.append({"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                     "kind": kind, "verbs": verbs})
    return docs


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    found = [r for r in RESOURCES if r.group == group and r.version == version]
    if not found:
        return None
    docs = [doc for r in found for doc in _resource_doc(r)]
    if not group:
        docs.append({"name": "bindings", "singularName": "binding", "namespaced": True, "kind": "Binding",
                     "verbs": ["create"]})
    return {
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": docs,
    }


def _group_doc(group: str) -> dict[str, Any]:
    versions = sorted({r.version for r in RESOURCES if r.group == group})
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def group_doc(group: str) -> dict[str, Any] | None:
    if not group or all(r.group != group for r in RESOURCES):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group)}


def group_list() -> dict[str, Any]:
    groups = sorted({r.group for r in RESOURCES if r.group})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group_doc(g) for g in groups]}
