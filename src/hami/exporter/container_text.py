"""The container families' sample lines, kept per container device across scrapes.

A node's container series (eleven gauges per device, plus the kernel's age) are most of a scrape.
``ContainerText.families`` yields the families ``families.container_families`` builds, with their
sample lines in ``Family.text`` instead of rows, for the rendered path alone
(``MonitorCollector.render``): a device's label set is escaped once while the device persists, and
its lines are formatted again only when one of its values changes (they are kept, not their
``name{labels}`` heads: a thousand devices' heads would be as many megabytes again). The kernel's
age moves with the clock: its line is formatted every scrape. Lines are those ``TextRenderer`` writes
for the rows (``label_set``, ``number``); tests/exporter/test_exposition_fast.py holds the two
paths byte-identical.
"""

from __future__ import annotations

from typing import NamedTuple

from hami.core.serve.families import Family, Labels, label_set, number, sample_name
from hami.exporter import families
from hami.exporter.view import NodeView


class _Device(NamedTuple):
    labels: str  # the device's ``{...}`` label set, escaped and sorted
    values: tuple[int, ...]  # ``families.device_values``
    lines: tuple[str, ...]  # the sample line of each ``values`` entry


class ContainerText:
    """Not thread-safe: the collector renders one scrape at a time."""

    def __init__(self) -> None:
        self._devices: dict[Labels, _Device] = {}  # label values -> the device's lines

    @property
    def cached_devices(self) -> int:
        return len(self._devices)

    def families(self, view: NodeView, legacy: bool) -> list[Family]:
        defs = families.container_defs()
        names = [sample_name(f) for f in defs[:-1]]
        texts = [f.text for f in defs[:-1]]
        aged, aged_name = defs[-1].text, sample_name(defs[-1])
        # Devices absent from this scrape are dropped: the cache holds this scrape's devices only.
        previous, current = self._devices, dict[Labels, _Device]()
        for c in view.containers:
            since = families.kernel_age(view, c)
            for d in c.devices:
                lv = families.device_labels(c, d, view.node)
                values = families.device_values(c, d)
                known = current.get(lv) or previous.get(lv)  # a repeated identity renders again
                if known is None or known.values != values:
                    labels = known.labels if known is not None else label_set(families.CTR_LABELS, lv)
                    lines = (f"{name}{labels} {number(v)}\n" for name, v in zip(names, values, strict=True))
                    known = _Device(labels, values, tuple(lines))
                current[lv] = known
                for text, line in zip(texts, known.lines, strict=True):
                    text.append(line)
                if since is not None:
                    aged.append(f"{aged_name}{known.labels} {number(since)}\n")
        self._devices = current
        return [*defs, *families.legacy_container_families(view)] if legacy else defs
