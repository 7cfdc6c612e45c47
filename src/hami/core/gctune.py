"""Keeping long-lived caches and request churn from costing the cyclic garbage collector.

A daemon's informer caches (every node and pod, as JSON dicts) are built at start and live as long
as the daemon. In the collector's oldest generation every full collection walks all of them, a
pass that grows with the cluster, several times a minute under load, charged to whichever request
happened to allocate at that moment. ``settle`` moves what is alive now into the permanent
generation, which the collector never scans. Frozen objects are still freed by reference counting
when the caches drop them (they hold no cycles); objects created later are collected as usual.

It also raises the youngest generation's threshold: one filter request decodes thousands of
containers (a 1,000-node request, the pod, watch events), so at Python's default of 700 a young
collection ran about every other request and rescanned the objects of the requests in flight.
"""

from __future__ import annotations

import gc

from hami.core import klog

log = klog.get_logger(__name__)

YOUNG_THRESHOLD = 10_000


def settle(what: str) -> None:
    """Collect once, freeze everything still alive, and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    log.v(2).info("gc: froze %d objects after %s; young generation threshold %d",
                  gc.get_freeze_count(), what, YOUNG_THRESHOLD)
