"""Samples of the cluster state at regular times: pending and running pods, allocation, fragmentation."""

from __future__ import annotations

from hami.core.devices import MODE_MIG
from hami.scheduler.engine.nodes import NodeState
from hami.tune.simulate.engine_state import ReplayState
from hami.tune.simulate.records import Sample


class Sampling(ReplayState):
    """Takes the samples that feed the report's time series and fragmentation."""

    def _card_figures(
        self, node: NodeState, usage: dict[str, tuple[int, int, int]]
    ) -> tuple[int, int, int, int]:
        """(free MiB on usable cards, of it stranded, cards over-committed, least headroom MiB)."""
        typ_mem, typ_cores = self.result.typical
        free = stranded = over = 0
        headroom: int | None = None
        for d in node.devices:
            slots, mem, cores = usage.get(d.id, (0, 0, 0))
            physical = self.cluster.physical_mib.get(d.id, d.devmem)
            room = physical - mem
            headroom = room if headroom is None else min(headroom, room)
            over += mem > physical
            if not d.health or d.mode == MODE_MIG or d.id in node.cordoned:
                continue
            spare = max(d.devmem - mem, 0)
            free += spare
            if slots >= d.count or spare < typ_mem or d.devcore - cores < typ_cores:
                stranded += spare
        return free, stranded, over, headroom if headroom is not None else 0

    def _sample(self, t: float) -> None:
        free = stranded = over = 0
        headroom: int | None = None
        held_peak = self._peak_by_card() if self._peaks else None
        peak_headroom: int | None = None
        for node in self.cluster.nodes:
            usage = self.usage.node_usage(node.name)
            figures = self._idle.get(node.name) if not usage else None
            if figures is None:
                figures = self._card_figures(node, usage)
                if not usage:
                    self._idle[node.name] = figures
            free, stranded, over = free + figures[0], stranded + figures[1], over + figures[2]
            headroom = figures[3] if headroom is None else min(headroom, figures[3])
            if held_peak is not None:
                for d in node.devices:
                    left = self.cluster.physical_mib.get(d.id, d.devmem) - held_peak.get(d.id, 0)
                    peak_headroom = left if peak_headroom is None else min(peak_headroom, left)
        running = sum(1 for _ in self.usage.pods())
        self.result.samples.append(
            Sample(
                t,
                len(self.pending),
                running,
                self._mem,
                self._cores,
                free,
                stranded,
                over,
                headroom or 0,
                peak_headroom,
            )
        )

    def _peak_by_card(self) -> dict[str, int]:
        """Per card, the sum of its holders' peak use, each pod's peak split over its cards by share."""
        peaks = {run.pod.uid: run.pod.peak_memory_bytes for run in self.runs if run.pod.peak_memory_bytes}
        out: dict[str, int] = {}
        for alloc in self.usage.pods():
            peak = peaks.get(alloc.uid)
            total = sum(s.usedmem for s in alloc.shares)
            for s in alloc.shares:
                share = s.usedmem if peak is None or not total else int(peak / (1 << 20) * s.usedmem / total)
                out[s.uuid] = out.get(s.uuid, 0) + share
        return out
