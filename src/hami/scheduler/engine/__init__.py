"""The scheduling engine: pure logic, no I/O. The extender (``hami.scheduler.extender``) calls it.

Modules: ``requests`` (pod specs → per-container requests, user annotations, webhook defaults;
``pod_request`` decodes a pod once into the ``PodRequest`` the filter works on, or None for a pod
that asks for no device), ``device_config`` (the device-config YAML subset),
``nodes``/``device_view`` (node annotations → ``NodeState`` via ``node_state``, and the flattened
views), ``fit`` (HAMi Fit per node), ``policy``/``score`` (GPU and node policies, scores, scoring
weights), ``usage`` (node usage from decoded allocation annotations, init-container collapse),
``quota`` (ResourceQuota on HAMi resources), ``mig`` (MIG placement), ``reasons`` (reason codes,
GenReason, event/kube-scheduler messages), ``ranking`` (incremental node order), ``decision``
(``filter_pod`` + ``commit``) and ``admission`` (the webhook's patch).

Decisions on the quirks of docs/design/scheduler-filter.md §4.9 and other divergences from HAMi v2.10:

- Q1 placeholder keys — FIXED. Containers without a device request get an empty entry under the
  vendor key, so the pod's devices always have one entry per container, init containers first,
  as HAMi's protocol notes (docs/design/scheduler.md §9.1) and the device plugin's ``GetNextDeviceRequest``
  expect. HAMi pads under the model name instead, which misaligns mixed GPU/non-GPU pods on real nodes.
- Q2 request term in the GPU score — FIXED: the container's request is always part of the
  device score, as HAMi's scheduling-policy notes say (docs/design/scheduler.md §9.2) and as HAMi's own unit
  tests (devices typed ``NVIDIA``) exercise; production HAMi never matches ``NVIDIA`` with a model name and so
  scores usage only. This changes which card is tried first only between cards of different
  sizes; it never changes whether a node fits.
- Per-visit reason counts on revisited MIG cards — FIXED: a ``mig`` card that gave a container an
  instance is examined again for the next one (HAMi's ``i++``), but when that re-examination fails
  it is not counted as a rejection, and ``AllocatedCardsInsufficientRequest``/``NumaNotFit`` count
  distinct cards, not instances. So every card is counted exactly once and ``n/total`` never
  exceeds the card count (HAMi can print ``3/1 AllocatedCardsInsufficientRequest``). Unchanged
  for ``hami-core`` cards, which are never revisited.
- ``Coresreq > 100`` clamp persisting for later cards — REPRODUCED (it is harmless: every card
  would clamp the same way); ``container_request`` already clamps, so the webhook's quota
  pre-check and the device score see the 100 that Fit places. Topology requests never decrement
  Nums — REPRODUCED (it is how topology-aware collects every candidate).
- Node ties — DETERMINISTIC: HAMi's tie order depends on goroutine timing; here the node listed
  first in the request wins among equal scores. Device ties follow HAMi (Go's sort of ≤ 12
  elements is an insertion sort, i.e. stable, like Python's).
- Empty entries in use-/nouse-gputype lists (``"A100,"``) are ignored; in HAMi an empty entry is
  a substring of every model and would silently allow everything.
- MIG profile choice (``mig``): the smallest profile (memory, then slice count) whose memory
  covers the resolved request and that has a registered placement overlapping nothing in use;
  the device entry's ``Usedmem`` is the profile's memory (the instance holds all of it). Cores
  are accounted as requested, so HAMi's exclusivity rules (gpucores=100) apply to MIG cards too.
- MIG placements across init and app containers — CHANGED: HAMi fits each init container on a
  fresh copy of the node, so an init and an app container could be given overlapping
  placements that the device plugin cannot both create. Here every placement chosen for the
  pod (init containers included) is in use for its later containers; slot, memory and core
  accounting keep HAMi's init/app peak rule.
- MIG reservations (docs/design/scheduler-extender.md §6.2): an undecodable ``hami.io/vgpu-mig-allocations``
  counts as no
  reservation, so the card is taken out of service (unknown placement) rather than overbooked.
- Devices are placed only on the chosen node (``FilterResult.devices``); HAMi computes them for
  every fitting node and discards all but one. Whether a node fits is decided by an order-free
  scan when order cannot matter (no numa-bind, topology or quota, at most one requesting app
  container), memoised per node view and request shape; a property test checks it against the
  faithful Fit.
- Quantities: HAMi's ``Quantity.AsInt64`` is reproduced by ``requests.int_quantity`` on
  ``hami.core.codec.quantity`` (exact integers only), so ``gpumem: 16Gi`` still drops the whole
  request, as in HAMi.

Section signs (§) refer to docs/design/scheduler.md.
"""
