"""The cgroup v2 ``dmem`` controller's files, parsed (pure).

Each of ``dmem.current``, ``dmem.min``, ``dmem.low`` and ``dmem.max`` in a cgroup holds one line per
device memory region, ``<region> <value>``; ``dmem.capacity`` at the root lists every region's size
the same way. A value is bytes, or ``max`` (no limit; ``dmem.min`` and ``dmem.low`` then read 0 when
unset). The driver names a region after its device, ``drm/<PCI bus id>/<memory>`` for DRM devices,
so a region belongs to the GPU whose bus id it carries (``region_bus_id``).

Section signs (§) refer to docs/design/node-agent-monitor.md (§B.6).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A PCI address as sysfs writes it (domain:bus:device.function); NVML pads the domain to 8 digits.
_BUS = re.compile(
    r"(?:^|/)(?P<domain>[0-9a-fA-F]{4,8}):(?P<rest>[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])(?:/|$)"
)
_REGION = re.compile(r"[!-~]{1,255}")  # printable, no space: a region name as the kernel prints it
_MAX_VALUE = (1 << 64) - 1


@dataclass
class DmemFile:
    """One parsed dmem file: region -> bytes (``None`` = ``max``), and the lines it refused."""

    values: dict[str, int | None] = field(default_factory=dict)
    malformed: int = 0


def parse_dmem(text: str) -> DmemFile:
    """``<region> <value>`` lines; a malformed line is counted and skipped, the others kept."""
    out = DmemFile()
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not _REGION.fullmatch(parts[0]):
            out.malformed += 1
            continue
        region, raw = parts
        if raw == "max":
            out.values[region] = None
        elif raw.isdigit() and int(raw) <= _MAX_VALUE:
            out.values[region] = int(raw)
        else:
            out.malformed += 1
    return out


def bus_id(pci: str) -> str:
    """A PCI bus id in one spelling: 4-digit domain, lower case (``00000000:3B:00.0`` -> ``0000:3b:00.0``)."""
    m = _BUS.search(pci)
    if m is None:
        return pci.lower()
    return f"{int(m.group('domain'), 16):04x}:{m.group('rest').lower()}"


def region_bus_id(region: str) -> str | None:
    """The PCI bus id a region name carries (``drm/0000:3b:00.0/vram0``), or None."""
    return bus_id(region) if _BUS.search(region) else None
