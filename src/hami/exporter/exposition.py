"""Every family of one monitor scrape, in exposition order, from the declarations alone
(docs/design/metric-families.md).

``CATALOGUE`` is every family the monitor declares, in the order a scrape writes them;
``scrape_families`` fills one scrape's, for both of the collector's paths: rows throughout for
``collect()``, the container series as ``ContainerText``'s kept lines for a rendered scrape.
tests/exporter/test_exposition_fast.py holds the two byte-identical.
"""

from __future__ import annotations

from hami.core.serve.families import Catalogue, Declared, Family
from hami.exporter.container_text import ContainerText
from hami.exporter.driver import SOURCES
from hami.exporter.families import GPU, container_rows, host_series, legacy_container_series
from hami.exporter.host import NVML_CALLS
from hami.exporter.node_families import (
    NODE,
    POD_LABELS,
    inconsistency_series,
    mig_series,
    pod_label_series,
    self_series,
    unlimited_series,
)
from hami.exporter.reconcile import KINDS
from hami.exporter.region import reasons
from hami.exporter.source_families import SOURCE, source_series
from hami.exporter.view import Counters, NodeView

CATALOGUE = Catalogue(GPU, NODE, SOURCE)


def scrape_families(
    view: NodeView, counters: Counters, legacy: bool, text: ContainerText | None = None,
) -> list[Family]:
    """One scrape's families; ``text``: the container series as its kept lines (the rendered path)."""
    fams = CATALOGUE.scrape(legacy)
    host_series(view, fams)
    if text is None:
        container_rows(view, fams)
    else:
        text.fill(view, fams)
    legacy_container_series(view, fams)
    unlimited_series(view, fams)
    mig_series(view, fams)
    pod_label_series(view, fams)
    self_series(view, counters, reasons.ALL, NVML_CALLS, fams)
    inconsistency_series(view, KINDS, fams)
    source_series(view, SOURCES, fams)
    return fams.families()


def declarations(legacy: bool, pod_labels: bool) -> list[Declared]:
    """Every family a scrape can yield (``hami_pod_labels`` only with an allow-list; its allow-listed
    label names are added per sample)."""
    return [d for d in CATALOGUE.declared(legacy) if pod_labels or d is not POD_LABELS]
