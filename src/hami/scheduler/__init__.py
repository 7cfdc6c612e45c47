"""Scheduler extender. The core (this package's pure modules) decides; HTTP/bind/webhook call it.

Core modules, no I/O: ``requests`` (pod specs → per-container requests, user annotations, webhook
defaults), ``device_config`` (the device-config YAML subset), ``fit`` (HAMi Fit per node),
``policy``/``score`` (GPU and node policies, scores, scoring weights), ``usage`` (node usage from
decoded allocation annotations, init-container collapse), ``quota`` (ResourceQuota on HAMi
resources), ``reasons`` (reason codes, GenReason, event/kube-scheduler messages) and ``filter``
(``filter_pod`` + ``commit``).

Decisions on the quirks of spec §4.9 and other divergences from HAMi v2.10:

- Q1 placeholder keys — FIXED. Containers without a device request get an empty entry under the
  vendor key, so the pod's devices always have one entry per container, init containers first,
  as protocol.md and the device plugin's ``GetNextDeviceRequest`` expect. HAMi pads under the
  model name instead, which misaligns mixed GPU/non-GPU pods on real nodes.
- Q2 request term in the GPU score — FIXED: the container's request is always part of the
  device score, as docs/develop/scheduler-policy.md says and as HAMi's own unit tests (devices
  typed ``NVIDIA``) exercise; production HAMi never matches ``NVIDIA`` with a model name and so
  scores usage only. This changes which card is tried first only between cards of different
  sizes; it never changes whether a node fits.
- Per-visit reason counts on revisited MIG cards — NOT REACHABLE: MIG cards are never handed out
  (below), so each card is counted once.
- ``Coresreq > 100`` clamp persisting for later cards — REPRODUCED (it is harmless: every card
  would clamp the same way). Topology requests never decrement Nums — REPRODUCED (it is how
  topology-aware collects every candidate).
- Node ties — DETERMINISTIC: HAMi's tie order depends on goroutine timing; here the node listed
  first in the request wins among equal scores. Device ties follow HAMi (Go's sort of ≤ 12
  elements is an insertion sort, i.e. stable, like Python's).
- Empty entries in use-/nouse-gputype lists (``"A100,"``) are ignored; in HAMi an empty entry is
  a substring of every model and would silently allow everything.
- MIG — NOT MODELLED: placement of MIG profiles (``CardMigTopologyInfeasible`` rule) needs the
  mig-allocations reservations; until then a card in ``mig`` mode is always rejected with
  ``CardMigTopologyInfeasible`` rather than handed out without a placement.
- Devices are placed only on the chosen node (``FilterResult.devices``); HAMi computes them for
  every fitting node and discards all but one. Whether a node fits is decided by an order-free
  scan when order cannot matter (no numa-bind, topology or quota, at most one requesting app
  container), memoised per node view and request shape; a property test checks it against the
  faithful Fit.
- Quantities: HAMi's ``Quantity.AsInt64`` is reproduced by ``quantity.int_quantity`` (exact
  integers only), so ``gpumem: 16Gi`` still drops the whole request, as in HAMi.
"""
