"""The container families' sample lines, kept per container device across scrapes.

A node's container series (the ``families.CONTAINER`` gauges per device, plus the kernel's age) are
most of a scrape. ``ContainerText.fill`` gives a scrape the series ``families.container_rows``
would, as sample lines in ``Family.text`` instead of rows, for the rendered path alone
(``MonitorCollector.render``): a device's label set is escaped once while the device persists, and
its lines are formatted again only when one of its values changes (they are kept, not their
``name{labels}`` heads: a thousand devices' heads would be as many megabytes again). The kernel's
age moves with the clock: its line is formatted every scrape. Lines are those ``TextRenderer`` writes
for the rows (``label_set``, ``number``); tests/exporter/test_exposition_fast.py holds the two
paths byte-identical.
"""

from __future__ import annotations

from typing import NamedTuple

from hami.core.serve.families import Labels, Scrape, label_set, number, sample_name
from hami.exporter import families
from hami.exporter.attribution import ContainerView
from hami.exporter.region.parse import DeviceUsage
from hami.exporter.view import NodeView


class _Device(NamedTuple):
    identity: Labels  # its label values
    labels: str  # the device's ``{...}`` label set, escaped and sorted
    values: tuple[int, ...]  # ``families.device_values``
    lines: tuple[str, ...]  # the sample line of each ``values`` entry


class ContainerText:
    """Not thread-safe: the collector renders one scrape at a time."""

    def __init__(self) -> None:
        self._devices: dict[Labels, _Device] = {}  # label values -> the device's lines
        # id(view) -> (the view, its node, its devices' lines): a container view that is the same
        # object as last scrape's (``PodJoin`` reuses unchanged ones) needs no label or value built
        self._views: dict[int, tuple[ContainerView, str, tuple[_Device, ...]]] = {}

    @property
    def cached_devices(self) -> int:
        return len(self._devices)

    def fill(self, view: NodeView, fams: Scrape) -> None:
        """The ``CONTAINER`` families' and the kernel age's series of ``view``, as text."""
        names = [sample_name(c.declared) for c in families.CONTAINER]
        texts = [fams[c.declared].text for c in families.CONTAINER]
        aged, aged_name = fams[families.KERNEL_AGE].text, sample_name(families.KERNEL_AGE)
        # Devices absent from this scrape are dropped: the cache holds this scrape's devices only.
        previous, current = self._devices, dict[Labels, _Device]()
        views, self._views = self._views, {}
        for c in view.containers:
            seen = views.get(id(c))
            if seen is not None and seen[0] is c and seen[1] == view.node:
                devices = seen[2]
            else:
                devices = tuple(
                    self._device(c, d, view.node, names=names, current=current, previous=previous)
                    for d in c.devices
                )
            self._views[id(c)] = (c, view.node, devices)
            since = families.kernel_age(view, c)
            for known in devices:
                current[known.identity] = known
                for text, line in zip(texts, known.lines, strict=True):
                    text.append(line)
                if since is not None:
                    aged.append(f"{aged_name}{known.labels} {number(since)}\n")
        self._devices = current

    @staticmethod
    def _device(
        c: ContainerView,
        d: DeviceUsage,
        node: str,
        *,
        names: list[str],
        current: dict[Labels, _Device],
        previous: dict[Labels, _Device],
    ) -> _Device:
        lv = families.device_labels(c, d, node)
        values = families.device_values(c, d)
        known = current.get(lv) or previous.get(lv)  # a repeated identity renders again
        if known is not None and known.values == values:
            return known
        if known is None:
            labels = label_set(families.CTR_LABELS, lv)
            lines = (f"{name}{labels} {number(v)}\n" for name, v in zip(names, values, strict=True))
            return _Device(lv, labels, values, tuple(lines))
        # only the lines whose value changed are formatted again (limits rarely move, usage does)
        labels, was = known.labels, known.values
        lines = (
            line if v == old else f"{name}{labels} {number(v)}\n"
            for name, v, old, line in zip(names, values, was, known.lines, strict=True)
        )
        return _Device(lv, labels, values, tuple(lines))
