"""Fitting one pod on one node (§4.3–§4.7): HAMi ``scoreNode``, ``fitInDevices`` and NVIDIA ``Fit``.

Per container, the node's NVIDIA devices are sorted by the GPU policy and walked from the end;
each card is accepted or rejected with a reason code, in HAMi's check order. The result per node
is either the pod's devices (one entry per container, init containers first) or a reason string.
A card in ``mig`` mode also needs a MIG profile with a free placement (``hami.scheduler.engine.mig``); it
may serve several devices of one container, one instance each (HAMi's ``i++`` revisit).

Section signs (§) refer to docs/design/scheduler-filter.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations
from typing import NamedTuple

from hami.core import reasons as r
from hami.core.devices import ContainerDevice, ContainerDevices, MigAllocation, MigPlacement, PodDevices
from hami.scheduler.engine.mig import MigChoice, allocations, select
from hami.scheduler.engine.nodes import NodeView
from hami.scheduler.engine.policy import GpuPolicy, Weights, device_sort_key
from hami.scheduler.engine.quota import QuotaManager
from hami.scheduler.engine.requests import PERCENT_UNSET, VENDOR, ContainerRequest, PodRequest
from hami.scheduler.engine.score import Load, device_scores
from hami.scheduler.engine.usage import collapse_init_containers, quota_usage

# One accepted card: (position in the view, MiB, cores, MIG choice on a ``mig`` card).
Pick = tuple[int, int, int, MigChoice | None]
# MIG placements this pod took on each card (by position) in containers fitted before.
Taken = Mapping[int, Sequence[MigPlacement]]
_NOTHING_TAKEN: Taken = {}


class Placed(NamedTuple):
    """A pod placed on a node: its devices and the MIG reservations among them."""

    devices: PodDevices
    mig: tuple[MigAllocation, ...]


@dataclass(frozen=True)
class PodContext:
    """Everything about the pod that is the same for every node of one filter call: the decoded
    request and what the filter derives from it (policy, weights, the namespace's quota)."""

    request: PodRequest
    policy: GpuPolicy
    weights: Weights
    quota: QuotaManager | None  # None when the namespace has no HAMi limit
    quota_credit: tuple[int, int] = (0, 0)

    @cached_property
    def shape(self) -> str:
        """The request shape as one string: memo key whose hash Python computes only once."""
        req = self.request
        return repr((req.reqs, req.n_init, req.options, self.policy.mutex))

    @cached_property
    def order_free(self) -> bool:
        """True when whether a node fits does not depend on which cards are tried first.

        Then ``fits_quickly`` may decide fit/no-fit without sorting: no numa-bind or topology
        (they group or collect cards), no quota (it depends on the cards already picked), and at
        most one app container with a request (init containers each fit on the node as it is).
        """
        req = self.request
        if req.options.numa_bind or self.policy.topology or self.quota is not None:
            return False
        return sum(1 for r in req.reqs[req.n_init:] if r is not None) <= 1

    @property
    def mig_request(self) -> bool:
        mode = self.request.options.vgpu_mode
        return mode is None or "mig" in mode


def _order(view: NodeView, load: Load, req: ContainerRequest, ctx: PodContext) -> list[int]:
    pct = req.mem_percentage
    scores = device_scores(ctx.weights, view.devs, view.nvidia, load,
                           (req.coresreq, req.memreq, 0 if pct == PERCENT_UNSET else pct))
    key = device_sort_key(ctx.policy, ctx.request.options.numa_bind, scores=scores, numas=view.numas,
                          useds=load[0], indexes=view.indexes)
    return sorted(view.nvidia, key=key)


def _quota_ok(ctx: PodContext, view: NodeView, done: Sequence[ContainerDevices],
              tmp: Sequence[Pick], candidate: Pick) -> bool:
    assert ctx.quota is not None
    devs = view.devs
    current = tuple(ContainerDevice(devs[p].id, VENDOR, m, c) for p, m, c, _ in (*tmp, candidate))
    pod_mem, pod_cores = quota_usage(collapse_init_containers((*done, current), ctx.request.n_init))
    return ctx.quota.fits(ctx.request.namespace, pod_mem, pod_cores, ctx.quota_credit)


def _pair(view: NodeView, a: int, b: int) -> int:
    return view.devs[a].pair_score.get(view.devs[b].id, 0)


def _topology_pick(view: NodeView, tmp: list[Pick], want: int) -> list[Pick]:
    """§4.7: one card → the least connected to the others; several → the best-connected set."""
    if want == 1:
        best, best_sum = tmp[0], None
        for cand in tmp:
            total = sum(_pair(view, cand[0], o[0]) for o in tmp if o is not cand)
            if best_sum is None or total < best_sum:
                best, best_sum = cand, total
        return [best]
    best_combo: tuple[Pick, ...] = ()
    best_total: int | None = None
    for combo in combinations(tmp, want):
        total = sum(_pair(view, a[0], b[0]) for a, b in combinations(combo, 2))
        if best_total is None or total > best_total:
            best_combo, best_total = combo, total
    return list(best_combo)


def fit_container(view: NodeView, load: Load, req: ContainerRequest, ctx: PodContext,
                  done: Sequence[ContainerDevices], *, taken: Taken = _NOTHING_TAKEN) -> list[Pick] | str:
    """``fitInDevices``: the node-level count check, then NVIDIA ``Fit``."""
    if req.nums > len(view.nvidia) and not (view.any_mig and ctx.mig_request):
        return r.NODE_INSUFFICIENT_DEVICE
    return fit_devices(view, load, req, ctx, done, taken=taken)


def _mig_choice(view: NodeView, pos: int, mem: int, taken: Taken, tmp: Sequence[Pick]) -> MigChoice | None:
    """CustomFilterRule (§4.5 step 15): a profile for ``mem`` MiB with a placement still free.

    In use are the card's reservations, this pod's earlier containers' instances and the ones
    chosen earlier in this container.
    """
    d = view.devs[pos]
    occupied = [*d.occupied, *taken.get(pos, ())]
    occupied.extend(c[2] for p, _, _, c in tmp if p == pos and c is not None)
    return select(d.profiles, occupied, mem)


def fit_devices(view: NodeView, load: Load, req: ContainerRequest, ctx: PodContext,
                done: Sequence[ContainerDevices], *, taken: Taken = _NOTHING_TAKEN) -> list[Pick] | str:
    """NVIDIA ``Fit`` for one container: its picks, or the reason string (``GenReason``).

    ``done`` holds the pod's containers fitted so far on this node (for the in-Fit quota check),
    ``taken`` the MIG placements they were given. After an accepted ``mig`` card the same card is
    examined again (HAMi's ``i++``) for another instance; a failed re-examination is not counted
    as a rejection (each card counts once in the reason, quirk decision in the package doc).
    """
    orig = nums = req.nums
    opts = ctx.request.options
    filters_type, filters_uuid, numa_bind = opts.filters_type, opts.filters_uuid, opts.numa_bind
    # HAMi's checkType also demands the request be of the card's device type (NVIDIA): a request of
    # another type is CardTypeMismatch on every card, whatever the annotations say.
    other_type = req.type != VENDOR
    mutex, topology = ctx.policy.mutex, ctx.policy.topology
    check_quota = ctx.quota is not None
    cores = req.coresreq
    memreq = req.memreq
    use_pct = req.mem_percentage != PERCENT_UNSET and memreq == 0
    pct = req.mem_percentage
    devs = view.devs
    counts: dict[str, int] = {}
    tmp: list[Pick] = []
    prevnuma = -1
    used, umem, ucores = load
    order = _order(view, load, req, ctx)
    k = len(order) - 1
    revisit = False
    choice: MigChoice | None = None
    while k >= 0:
        pos = order[k]
        d = devs[pos]
        if not d.health:
            reason = r.CARD_NOT_HEALTH
        elif d.cordoned:
            reason = r.CARD_CORDONED
        elif other_type or (filters_type and not opts.type_ok(d.type, d.mode, d.enforcement)):
            reason = r.CARD_TYPE_MISMATCH
        else:
            if numa_bind and d.numa != prevnuma:
                if nums != orig:
                    counts[r.NUMA_NOT_FIT] = counts.get(r.NUMA_NOT_FIT, 0) + len({p[0] for p in tmp})
                nums, tmp, prevnuma = orig, [], d.numa
            u = used[pos]
            if filters_uuid and not opts.uuid_ok(d.id):
                reason = r.CARD_UUID_MISMATCH
            elif d.count <= u:
                reason = r.CARD_TIME_SLICING_EXHAUSTED
            elif mutex and u > 0:
                reason = r.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
            else:
                cores = min(cores, 100)
                mem = d.totalmem * pct // 100 if use_pct else memreq
                uc = ucores[pos]
                if check_quota and not _quota_ok(ctx, view, done, tmp, (pos, mem, cores, None)):
                    reason = r.RESOURCE_QUOTA_NOT_FIT
                elif d.totalmem - umem[pos] < mem:
                    reason = r.CARD_INSUFFICIENT_MEMORY
                elif d.totalcore - uc < cores:
                    reason = r.CARD_INSUFFICIENT_CORE
                elif d.totalcore == 100 and cores == 100 and u > 0:
                    reason = r.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
                elif d.totalcore != 0 and uc == d.totalcore and cores == 0:
                    reason = r.CARD_COMPUTE_UNITS_EXHAUSTED
                elif d.mig and (choice := _mig_choice(view, pos, mem, taken, tmp)) is None:
                    reason = r.CARD_MIG_TOPOLOGY_INFEASIBLE
                else:
                    if nums > 0:
                        if not topology:
                            nums -= 1
                        if choice is not None:
                            # The instance holds the whole profile: account its memory.
                            tmp.append((pos, choice[1], cores, choice))
                        else:
                            tmp.append((pos, mem, cores, None))
                    if nums == 0 and not topology:
                        return tmp
                    revisit = d.mig
                    if not revisit:
                        k -= 1
                    continue
        if not revisit:
            counts[reason] = counts.get(reason, 0) + 1
        revisit = False
        k -= 1
    if topology and len(tmp) >= orig:
        return tmp if len(tmp) == orig else _topology_pick(view, tmp, orig)
    if tmp:
        counts[r.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len({p[0] for p in tmp})
    return r.gen_reason(counts, len(view.nvidia))


def _devices(view: NodeView, picks: Sequence[Pick]) -> ContainerDevices:
    devs = view.devs
    return tuple(ContainerDevice(devs[p].id, VENDOR, m, c) for p, m, c, _ in picks)


def _enough_cards(view: NodeView, req: ContainerRequest, ctx: PodContext) -> bool:
    """Do at least ``req.nums`` cards pass every check of Fit? (for ``order_free`` contexts)."""
    nums = req.nums
    if nums > len(view.avail) or req.type != VENDOR:
        return False
    opts = ctx.request.options
    filters_type, filters_uuid, mutex = opts.filters_type, opts.filters_uuid, ctx.policy.mutex
    cores = min(req.coresreq, 100)
    memreq = req.memreq
    pct = req.mem_percentage if req.mem_percentage != PERCENT_UNSET and memreq == 0 else 0
    devs, used, umem, ucores = view.devs, view.used, view.umem, view.ucores
    found = 0
    for i in view.avail:
        d = devs[i]
        if filters_type and not opts.type_ok(d.type, d.mode, d.enforcement):
            continue
        if filters_uuid and not opts.uuid_ok(d.id):
            continue
        u = used[i]
        if mutex and u:
            continue
        totalmem, totalcore, uc = d.totalmem, d.totalcore, ucores[i]
        mem = totalmem * pct // 100 if pct else memreq
        if totalmem - umem[i] < mem or totalcore - uc < cores:
            continue
        if u and cores == 100 and totalcore == 100:
            continue
        if cores == 0 and totalcore and uc == totalcore:
            continue
        found += 1
        if found == nums:
            return True
    return False


def fits_quickly(view: NodeView, ctx: PodContext) -> bool | str:
    """Fit verdict without placing the pod: True, or the reason string ``fit_node`` gives.

    Only for ``ctx.order_free``; the verdict is memoised on the view per request shape.
    """
    key = ctx.shape
    verdict = view.memo.get(key)
    if verdict is None:
        ok = True
        for req in ctx.request.reqs:
            if req is not None and not _enough_cards(view, req, ctx):
                ok = False
                break
        if ok:
            verdict = True
        else:
            placed = fit_node(view, ctx)
            verdict = placed if isinstance(placed, str) else True
        if len(view.memo) >= 16:
            view.memo.clear()
        view.memo[key] = verdict
    return verdict


def fit_node(view: NodeView, ctx: PodContext) -> Placed | str:
    """HAMi ``scoreNode`` minus the score: the pod's devices on this node, or why it does not fit.

    Init containers each fit against the node's current usage (they run one at a time); app
    containers fit cumulatively. Containers without a request get an empty entry, so the result
    has one entry per container (quirk Q1 fixed). MIG placements are cumulative over all
    containers, init included: the device plugin realises every instance of the pod at once.
    """
    reqs, n_init = ctx.request.reqs, ctx.request.n_init
    out: list[ContainerDevices] = []
    choices: list[tuple[MigChoice | None, ...]] = []
    taken: dict[int, list[MigPlacement]] = {}
    app = reqs[n_init:]
    remaining = sum(1 for req in app if req is not None)
    used: Sequence[int] = view.used
    umem: Sequence[int] = view.umem
    ucores: Sequence[int] = view.ucores
    for i, req in enumerate(reqs):
        if req is None:
            out.append(())
            choices.append(())
            continue
        is_init = i < n_init
        if not is_init and remaining > 1 and not isinstance(used, list):
            used, umem, ucores = list(used), list(umem), list(ucores)
        load = (view.used, view.umem, view.ucores) if is_init else (used, umem, ucores)
        picks = fit_container(view, load, req, ctx, out, taken=taken)
        if isinstance(picks, str):
            return picks
        out.append(_devices(view, picks))
        choices.append(tuple(p[3] for p in picks))
        for p, _, _, choice in picks:
            if choice is not None:
                taken.setdefault(p, []).append(choice[2])
        if is_init:
            continue
        remaining -= 1
        if remaining:
            assert isinstance(used, list) and isinstance(umem, list) and isinstance(ucores, list)
            for p, m, c, _ in picks:
                used[p] += 1
                umem[p] += m
                ucores[p] += c
    devices = tuple(out)
    return Placed(devices, allocations(devices, choices) if taken else ())
