"""`hami_build_info` and the standard process/platform/GC collectors on a given registry.

Labels follow Prometheus' `<namespace>_build_info` convention (prometheus/common/version:
version, revision, branch, goversion), with `pythonversion` in place of `goversion` and
`component` added so one PromQL join covers all three daemons. `revision` and `branch` come
from the image build (`HAMI_BUILD_REVISION`, `HAMI_BUILD_BRANCH`), "unknown" otherwise.
"""

from __future__ import annotations

import os
import platform

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)

import hami


def build_labels(component: str) -> dict[str, str]:
    return {
        "version": hami.__version__,
        "revision": os.environ.get("HAMI_BUILD_REVISION") or "unknown",
        "branch": os.environ.get("HAMI_BUILD_BRANCH") or "unknown",
        "pythonversion": platform.python_version(),
        "component": component,
    }


def build_info(component: str, registry: CollectorRegistry = REGISTRY) -> None:
    """Register `hami_build_info{...} 1` and, on a non-default registry, the process (`process_*`),
    platform (`python_info`) and GC (`python_gc_*`) collectors (the default registry has them)."""
    labels = build_labels(component)
    gauge = Gauge("hami_build_info",
                  "A metric with a constant '1' value labeled by version, revision, branch, "
                  "pythonversion and component from which hami was built.",
                  list(labels), registry=registry)
    gauge.labels(**labels).set(1)
    # prometheus_client registers these on its default registry at import time.
    if registry is not REGISTRY:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
