"""Function names for profiles: `module.qualname`, e.g. `hami.core.serve.app.make_app.<locals>.app`.

Live frames (CPU samples, thread stacks) carry their code object. tracemalloc frames carry only
file and line, so the enclosing function is found by compiling the file once (cached).
"""

from __future__ import annotations

import linecache
import sys
import threading
from types import CodeType, FrameType

from hami.core.profiling.pprof_proto import Frame

MAX_DEPTH = 128  # deeper stacks are truncated at the root end


def module_of(filename: str) -> str:
    """The module name loaded from `filename`, or the file's stem if none is loaded."""
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == filename:
            return name
    stem = filename.rsplit("/", 1)[-1]
    return stem.removesuffix(".py")


def frame_of(frame: FrameType) -> Frame:
    code = frame.f_code
    module = frame.f_globals.get("__name__") or module_of(code.co_filename)
    return Frame(f"{module}.{code.co_qualname}", code.co_filename, code.co_firstlineno, frame.f_lineno or 0)


def stack_of(frame: FrameType | None) -> list[Frame]:
    """The stack from `frame` (leaf) towards the root, leaf first."""
    stack: list[Frame] = []
    while frame is not None and len(stack) < MAX_DEPTH:
        stack.append(frame_of(frame))
        frame = frame.f_back
    return stack


def _line_table(filename: str) -> dict[int, tuple[str, int]]:
    """line -> (qualname, first line) of the innermost code object owning that line.

    Compiles the source (C speed) and walks nested code objects: their `co_qualname` is exactly
    what live frames report, so heap and CPU profiles name functions identically.
    """
    source = "".join(linecache.getlines(filename))
    table: dict[int, tuple[str, int]] = {}
    if not source:
        return table
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return table
    pending = [code]
    while pending:  # outer code first, so inner code objects overwrite the lines they own
        current = pending.pop(0)
        name = "<module>" if current is code else current.co_qualname
        for _, _, line in current.co_lines():
            if line is not None:
                table[line] = (name, current.co_firstlineno)
        pending.extend(c for c in current.co_consts if isinstance(c, CodeType))
    return table


class LineResolver:
    """Maps (filename, line) to a Frame with the enclosing function's qualified name (cached)."""

    def __init__(self, modules: dict[str, str] | None = None) -> None:
        """`modules`: file -> module name when resolving for another process."""
        self._files: dict[str, dict[int, tuple[str, int]]] = {}
        self._modules: dict[str, str] = dict(modules or {})
        self._frames: dict[tuple[str, int], Frame] = {}
        self._lock = threading.Lock()

    def frame(self, filename: str, line: int) -> Frame:
        key = (filename, line)
        found = self._frames.get(key)
        if found is not None:
            return found
        with self._lock:
            table = self._files.get(filename)
            if table is None:
                table = self._files[filename] = _line_table(filename)
            module = self._modules.get(filename)
            if module is None:
                module = self._modules[filename] = module_of(filename)
            qualname, start = table.get(line, ("<module>", 1))
            found = self._frames[key] = Frame(f"{module}.{qualname}", filename, start, line)
        return found
