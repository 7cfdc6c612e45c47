"""One known log line: the regular expression that finds it, and what it means."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LogPattern:
    key: str
    pattern: str  # a regular expression, searched in each line
    component: str  # the daemon that writes it
    level: str  # a key of logscan.LEVELS
    meaning: str
    action: str
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern))
