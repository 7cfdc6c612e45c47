"""A stateful Kubernetes API server emulator for tests, served over real HTTP.

Tests drive it with the official `kubernetes` client (CoreV1Api, CoordinationV1Api, EventsV1Api,
`kubernetes.watch.Watch`), so they exercise the same wire protocol as production.

Why not kmock: we evaluated kmock 0.8 (PyPI). Its `KubernetesEmulator` does not track
resourceVersion (it answers '...'), so there is no 409 on a stale resourceVersion and no 410 Gone
for expired watches; it has no JSON or strategic merge patch, no label or field selectors and no
pods/binding subresource. HAMi's node lock, its scheduler's bind and every informer depend on exactly
those semantics, so we keep our own emulator: small, and tested against the official client.

Usage (tests/conftest.py has the fixtures `kube_api`, `kube_client`, `kube_config_file`)::

    with KubeAPIServer() as api:                      # port 0: the OS picks; api.url
        api.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
        api.faults.add(method="PATCH", path=r"/nodes/n$", status=409, times=1)
        api.faults.add(method="GET", path=r"/pods$", delay=10.0)          # client-side timeout
        api.faults.add(path=r"/api/v1/pods$", drop_watch=True, after_events=2)
        ...
        assert api.requests.count(method="GET", path=r"^/api/v1/nodes$", watch="true") == 1

Served: core/v1 namespaces, nodes (+status), pods (+binding, +status, +log), events,
resourcequotas (+status), configmaps, secrets, services, serviceaccounts, the namespaced `bindings`
collection; events.k8s.io/v1 events; coordination.k8s.io/v1 leases; what the Helm chart installs
(apps/v1 deployments and daemonsets, RBAC, networkpolicies, mutatingwebhookconfigurations, and the
custom resources of cert-manager and the Prometheus Operator); discovery (/version, /api, /api/v1,
/apis, group versions) and OpenAPI v3 (/openapi/v3, see openapi.py).

For the real `kubectl`: `fieldValidation=Strict` (kubectl's default) checks bodies against the
Kubernetes schemas; `Accept: ...;as=Table` answers the API server's columns (tables.py); pods/log
reads `log_dir` (logs.py). So `kubectl apply`, `get` (with `-l`, `-o wide`, `-L`), `describe`,
`logs`, `annotate`, `patch` and `edit` work against it.

Semantics: one global resourceVersion; uid, creationTimestamp, generateName; a resourceVersion in a
PUT body or in a patched object is a precondition (409 Conflict); writes to the main resource keep
the stored status and writes to `status` change only status; lists page with limit/continue; watches
replay a bounded history (`history=`) and answer ERROR 410 Expired beyond it.

Not emulated (simplifications a test must not rely on): deletion is immediate (no graceful pod
termination, no finalizers, no namespace cascade); namespaces are implicit (objects may be created
in any namespace); pod create resets status to {"phase": "Pending"} as the real API does, so create
running pods with `store.put`; no validation beyond names and patch documents; no admission,
defaulting beyond `spec.schedulerName`, server-side apply, protobuf, or authentication; no
controllers (a Deployment makes no pods: hami.testing.install stands in for them); core/v1
and events.k8s.io/v1 events are separate collections (no conversion between them); a `continue`
page shows the live state after the previous page, not a snapshot.
"""

from hami.testing.kubeapi.errors import ApiError
from hami.testing.kubeapi.faults import Fault, Faults, Request, RequestLog
from hami.testing.kubeapi.server import SERVING, KubeAPIServer
from hami.testing.kubeapi.store import Change, Store

__all__ = [
    "SERVING",
    "ApiError",
    "Change",
    "Fault",
    "Faults",
    "KubeAPIServer",
    "Request",
    "RequestLog",
    "Store",
]
