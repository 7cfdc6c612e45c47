"""What every hami-tune command shares: its exit statuses (each command's --help says which it uses)."""

from __future__ import annotations

EXIT_REFUSED = 3  # refused for missing data or history, or a pending pod left unplaceable
EXIT_BAD_SNAPSHOT = 2  # bad input: here a snapshot that cannot be read or replayed
