"""A stateful Kubernetes API server emulator for tests, served over real HTTP.

Tests drive it with the official `kubernetes` client (CoreV1Api, CoordinationV1Api, EventsV1Api,
`kubernetes.watch.Watch`), so they exercise the same wire protocol as production.

Why not kmock: we evaluated kmock 0.8 (PyPI). Its `KubernetesEmulator` does not track
resourceVersion (it answers '...'), so there is no 409 on a stale resourceVersion and no 410 Gone
for expired watches; it has no JSON or strategic merge patch, no label or field selectors and no
pods/binding subresource. HAMi's node lock, its scheduler's bind and every informer depend on exactly
those semantics, so we keep our own emulator: small, and tested against the official client.

Served: core/v1 namespaces, nodes, pods (+ binding, status), events, resourcequotas, configmaps;
events.k8s.io/v1 events (a separate store from core/v1 events: no conversion between them);
coordination.k8s.io/v1 leases; discovery. Deletion is immediate (no graceful pod termination, no
finalizers, no namespace cascade). Namespaces are implicit: objects may be created in any namespace.
"""

from hami.testing.kubeapi.errors import ApiError
from hami.testing.kubeapi.faults import Fault, Faults, Request, RequestLog
from hami.testing.kubeapi.server import KubeAPIServer
from hami.testing.kubeapi.store import Change, Store

__all__ = ["ApiError", "Change", "Fault", "Faults", "KubeAPIServer", "Request", "RequestLog", "Store"]
