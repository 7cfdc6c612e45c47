"""The bounded set of reasons for ``hami_monitor_region_skips_total{reason}``.

The last three count what the monitor refuses while it reads the driver's accounting: a container
cgroup is the driver's region of a container, and is refused, counted and logged the same way.

A region-level reason drops the whole container for that scrape; a slot-level one drops one
process slot; a device-level one drops one device of one container; a clamp keeps the series but
bounds its value. The counter adds one when a region starts meeting a reason (not at every scrape
while it keeps meeting it); ``hami_monitor_regions_skipped`` shows the regions meeting each now.
"""

from typing import Final

# Region level.
FILE_TOO_SMALL: Final = "file_too_small"  # < 12 bytes: not even magic + version
BAD_MAGIC: Final = "bad_magic"  # non-zero and not 19920718 (zero means "initialising")
BAD_SIZE: Final = "bad_size"  # magic ok, size fits no layout
UNKNOWN_VERSION: Final = "unknown_version"  # v1-sized file with major != 1, or v0-initial
INTERIM_LAYOUT: Final = "interim_layout"  # a shifted 2026-01..03 build that claims 1.1
DEVICE_COUNT_OUT_OF_RANGE: Final = "device_count_out_of_range"  # device_num > 16
TRUNCATED: Final = "truncated"  # the file shrank since it was opened: a copy came back short
OPEN_FAILED: Final = "open_failed"  # open/stat error
SYMLINK: Final = "symlink"  # the cache file is a symlink: never followed (it could point anywhere)
NOT_REGULAR_FILE: Final = "not_regular_file"  # a FIFO, device, socket...: never opened for reading
# Slot level.
DEAD_SLOT: Final = "dead_slot"  # pid 0 or status 0 inside [0, proc_num)
TORN_READ: Final = "torn_read"  # the seqlock never settled within the retry budget
# Device level.
UUID_UNINITIALISED: Final = "uuid_uninitialised"  # uuids[i][0] == 0
BAD_UUID: Final = "bad_uuid"  # not UTF-8, or not printable
# Clamps.
PROC_NUM_OUT_OF_RANGE: Final = "proc_num_out_of_range"  # clamped to [0, 1024]
USAGE_OVER_LIMIT: Final = "usage_over_limit"  # used > limit > 0: exported as the limit
SM_UTIL_OVER_100: Final = "sm_util_over_100"  # Σ sm_util > 100: hami_vgpu_core_used_percent reads 100
SM_LIMIT_OUT_OF_RANGE: Final = "sm_limit_out_of_range"  # sm_limit > 100: exported as 100
# The driver's accounting (cgroup v2 directories and their dmem files, hami.exporter.cgroupfs).
CGROUP_OUTSIDE_ROOT: Final = "cgroup_outside_root"  # a symlink or a ``..`` path: never followed
CGROUP_VANISHED: Final = "cgroup_vanished"  # removed while read (its container exited)
DMEM_MALFORMED: Final = "dmem_malformed"  # a dmem line that is not ``<region> <bytes|max>``: skipped
# no dmem region names the bus id of one of the container's GPUs (the drm/<bus>/vram0 naming is assumed)
DMEM_NO_REGION: Final = "dmem_no_region"

ALL: Final = (
    FILE_TOO_SMALL,
    BAD_MAGIC,
    BAD_SIZE,
    UNKNOWN_VERSION,
    INTERIM_LAYOUT,
    DEVICE_COUNT_OUT_OF_RANGE,
    TRUNCATED,
    OPEN_FAILED,
    SYMLINK,
    NOT_REGULAR_FILE,
    DEAD_SLOT,
    TORN_READ,
    UUID_UNINITIALISED,
    BAD_UUID,
    PROC_NUM_OUT_OF_RANGE,
    USAGE_OVER_LIMIT,
    SM_UTIL_OVER_100,
    SM_LIMIT_OUT_OF_RANGE,
    CGROUP_OUTSIDE_ROOT,
    CGROUP_VANISHED,
    DMEM_MALFORMED,
    DMEM_NO_REGION,
)
