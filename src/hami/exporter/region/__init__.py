"""HAMi-core shared regions: layouts as data, a pure parser, and the file edge."""

from hami.exporter.region.file import RegionFile
from hami.exporter.region.parse import DeviceUsage, RegionRejected, RegionSnapshot, parse_region

__all__ = ["DeviceUsage", "RegionFile", "RegionRejected", "RegionSnapshot", "parse_region"]
