"""The chart's RBAC grants each daemon exactly the API calls its code makes: every call is allowed,
and nothing else is granted by hami's own roles (least privilege)."""

from __future__ import annotations

from tests.deploy import manifests as m

# (verb, resource) a daemon's code performs, and where. "resource" is "<group>/<plural>[/sub]" with
# "" for the core group; a namespace after "@" means the call is made in that namespace only.
MONITOR = {
    ("list", "/pods"),  # hami/exporter/main.py run(): Informer(pods, fieldSelector spec.nodeName)
    ("watch", "/pods"),  # same informer (hami/core/kube/informer.py _watch_once)
}
DEVICE_PLUGIN = {
    ("list", "/pods"),  # hami/deviceplugin/main.py run(): Informer(pods, spec.nodeName=<node>)
    ("watch", "/pods"),  # same informer
    ("get", "/pods"),  # hami/deviceplugin/kubeops.py get_pod <- allocator.py (pending pod lookup)
    ("patch", "/pods"),  # kubeops.py patch_pod_annotations <- allocator.py (bind phase, allocations,
    # the hami.io/vgpu-node label)
    ("get", "/nodes"),  # kubeops.py get_node <- registrar.py, allocator.py, release_node_lock
    ("patch", "/nodes"),  # kubeops.py patch_node_annotations <- registrar.py (register, handshake),
    # release_node_lock (node lock delete)
}
SCHEDULER = {
    ("list", "/nodes"),  # hami/scheduler/extender/state.py ClusterState: Informer(nodes)
    ("watch", "/nodes"),
    ("get", "/nodes"),  # hami/scheduler/extender/nodelock.py: GET node before lock/release
    ("patch", "/nodes"),  # nodelock.py (hami.io/mutex.lock), register.py (handshake annotation)
    ("list", "/pods"),  # state.py: Informer(pods)
    ("watch", "/pods"),
    ("get", "/pods"),  # bind.py: GET pod on a cache miss; nodelock.py: lock owner still exists?
    ("patch", "/pods"),  # roles.py: the leader/follower label on the scheduler's own pods
    ("create", "/pods/binding"),  # bind.py: POST pods/<name>/binding, with the pod annotations
    ("create", "/events"),  # hami/core/kube/events.py EventRecorder._create (daemon.py recorder)
    ("patch", "/events"),  # events.py EventRecorder._write: aggregate a repeated event (count++)
    ("list", "/resourcequotas"),  # state.py: Informer(resourcequotas)
    ("watch", "/resourcequotas"),
    ("list", "coordination.k8s.io/leases@" + m.NAMESPACE),  # leader.py: Informer(leases, namespace,
    ("watch", "coordination.k8s.io/leases@" + m.NAMESPACE),  # fieldSelector metadata.name=<lease>)
}
# The kube-scheduler sidecar's own Lease (its configuration's leaderElection.resourceName).
KUBE_SCHEDULER_LEASE = {
    ("get", "coordination.k8s.io/leases@" + m.NAMESPACE),
    ("update", "coordination.k8s.io/leases@" + m.NAMESPACE),
}


def _grants(service_account: str) -> tuple[set[tuple[str, str]], set[str], set[str]]:
    """(verb, resource[@ns]) from hami's roles bound to the account; bound system ClusterRoles;
    resourceNames of namespaced grants."""
    pairs: set[tuple[str, str]] = set()
    system: set[str] = set()
    names: set[str] = set()
    for binding in m.of_kind("ClusterRoleBinding") + m.of_kind("RoleBinding"):
        subjects = binding["subjects"]
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == service_account and s["namespace"] == m.NAMESPACE
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        if ref["name"].startswith("system:") or ref["name"] == "extension-apiserver-authentication-reader":
            system.add(ref["name"])
            continue
        if ref["kind"] == "ClusterRole":
            role, scope = m.find("ClusterRole", ref["name"]), ""
            if binding["kind"] == "RoleBinding":
                scope = "@" + binding["metadata"]["namespace"]
        else:
            role = m.find("Role", ref["name"])
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"]
            scope = "@" + role["metadata"]["namespace"]
        for rule in role["rules"]:
            names.update(rule.get("resourceNames", []))
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), role["metadata"]["name"]
                        pairs.add((verb, f"{group}/{resource}{scope}"))
    return pairs, system, names


def _role_calls(name: str) -> set[tuple[str, str]]:
    role = m.find("ClusterRole", name)
    return {
        (v, f"{g}/{r}")
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_device_plugin_and_monitor_pods_each_get_exactly_their_calls() -> None:
    """Each node agent runs under its own account: the monitor's is read-only."""
    accounts = set()
    for daemonset, calls in (("hami-device-plugin", DEVICE_PLUGIN), ("hami-vgpu-monitor", MONITOR)):
        account = m.find("DaemonSet", daemonset)["spec"]["template"]["spec"]["serviceAccountName"]
        accounts.add(account)
        pairs, system, _names = _grants(account)
        assert pairs == calls, daemonset
        assert system == set()
        assert _role_calls(daemonset) == calls
    assert len(accounts) == 2
    assert {verb for verb, _ in MONITOR} <= {"get", "list", "watch"}


def test_scheduler_pod_gets_exactly_extender_calls_plus_kube_scheduler_roles() -> None:
    deployment = m.find("Deployment", "hami-scheduler")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    pairs, system, names = _grants(account)
    assert pairs == SCHEDULER | KUBE_SCHEDULER_LEASE
    assert system == {
        "system:kube-scheduler",
        "system:volume-scheduler",
        "extension-apiserver-authentication-reader",
    }
    lease = m.hami_container("hami-scheduler").args().leader_elect_resource_name
    assert names == {lease}  # lease grants are limited to the one Lease both containers use


def test_namespaced_grants_are_in_the_lease_namespace() -> None:
    args = m.hami_container("hami-scheduler").args()
    for role in m.of_kind("Role"):
        assert role["metadata"]["namespace"] == args.leader_elect_resource_namespace
