"""HAMi-core shared regions: layouts as data, a pure parser, and the mmap edge."""

from hami.exporter.region.mapped import MappedRegion
from hami.exporter.region.parse import DeviceUsage, RegionRejected, RegionSnapshot, parse_region

__all__ = ["DeviceUsage", "MappedRegion", "RegionRejected", "RegionSnapshot", "parse_region"]
