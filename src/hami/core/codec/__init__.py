"""Wire codecs for HAMi v2.10 annotations (§1–§2).

Every decoder takes text and returns data from ``hami.core.devices``; on malformed input it raises
``CodecError`` and nothing else.

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from hami.core.codec.errors import CodecError

__all__ = ["CodecError"]
