"""Thread stacks as Go's goroutine profile: pprof proto, or `debug=1` / `debug=2` text.

Python threads stand in for goroutines. `debug=1` groups identical stacks with a count, as Go
does (Go's `@ 0x...` PC list has no Python meaning and is left out). `debug=2` prints every
thread like a Go panic trace: `goroutine <thread ident> [<thread name>, daemon]:`, then each frame
`func(...)` / `\tfile:line`, innermost first.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter

from hami.core.profiling.pprof_proto import Frame, ProfileBuilder
from hami.core.profiling.symbols import stack_of


def _thread_stacks() -> list[tuple[threading.Thread | None, int, list[Frame]]]:
    threads = {t.ident: t for t in threading.enumerate()}
    return [(threads.get(ident), ident, stack_of(frame))
            for ident, frame in sorted(sys._current_frames().items())]


def goroutine_profile() -> ProfileBuilder:
    builder = ProfileBuilder([("goroutine", "count")], ("goroutine", "count"), 1)
    builder.time_nanos = time.time_ns()
    for _, _, stack in _thread_stacks():
        builder.add(stack, [1])
    return builder


def goroutine_text(debug: int) -> str:
    stacks = _thread_stacks()
    if debug >= 2:
        blocks = []
        for thread, ident, stack in stacks:
            name = thread.name if thread is not None else "unknown"
            daemon = ", daemon" if thread is not None and thread.daemon else ""
            lines = [f"goroutine {ident} [{name}{daemon}]:"]
            for f in stack:
                lines += [f"{f.name}(...)", f"\t{f.filename}:{f.line}"]
            blocks.append("\n".join(lines) + "\n")
        return "\n".join(blocks)
    groups = Counter(tuple(stack) for _, _, stack in stacks)
    out = [f"goroutine profile: total {len(stacks)}"]
    for group, count in groups.most_common():
        out.append(f"{count} @")
        out.extend(f"#\t{f.name}\t{f.filename}:{f.line}" for f in group)
        out.append("")
    return "\n".join(out) + "\n"
