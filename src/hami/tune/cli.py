"""What the hami-tune commands share: their exit statuses besides 0 (done) and argparse's 2."""

from __future__ import annotations

EXIT_REFUSED = 3  # refused for missing data or history, or a pending pod left unplaceable
EXIT_BAD_SNAPSHOT = 2  # bad input: a snapshot that cannot be read or replayed
