"""Function names for profiles: `module.qualname`, e.g. `hami.core.serve.app.make_app.<locals>.app`.

Live frames (CPU samples, thread stacks) carry their code object. tracemalloc frames carry only
file and line, so the enclosing function is found by parsing the file once (cached).
"""

from __future__ import annotations

import ast
import bisect
import linecache
import sys
import threading
from dataclasses import dataclass
from types import FrameType

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


@dataclass(frozen=True)
class _Scope:
    start: int
    end: int
    qualname: str


class _FileScopes:
    """Function/class scopes of one source file, innermost found by line."""

    def __init__(self, filename: str) -> None:
        self.scopes: list[_Scope] = []
        source = "".join(linecache.getlines(filename))
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return
        self._walk(tree, "")
        self.scopes.sort(key=lambda s: (s.start, -s.end))
        self._starts = [s.start for s in self.scopes]

    def _walk(self, node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qualname = prefix + child.name
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                self.scopes.append(_Scope(start, child.end_lineno or child.lineno, qualname))
                inner = qualname + (".<locals>." if not isinstance(child, ast.ClassDef) else ".")
                self._walk(child, inner)
            else:
                self._walk(child, prefix)

    def find(self, line: int) -> _Scope | None:
        best = None
        # Scopes starting at or before `line`; the last one containing it is the innermost.
        for scope in self.scopes[: bisect.bisect_right(self._starts, line)] if self.scopes else []:
            if scope.start <= line <= scope.end:
                best = scope
        return best


class LineResolver:
    """Maps (filename, line) to a Frame with the enclosing function's qualified name."""

    def __init__(self) -> None:
        self._files: dict[str, _FileScopes] = {}
        self._modules: dict[str, str] = {}
        self._lock = threading.Lock()

    def frame(self, filename: str, line: int) -> Frame:
        with self._lock:
            scopes = self._files.get(filename)
            if scopes is None:
                scopes = self._files[filename] = _FileScopes(filename)
            module = self._modules.get(filename)
            if module is None:
                module = self._modules[filename] = module_of(filename)
        scope = scopes.find(line)
        if scope is None:
            return Frame(f"{module}.<module>", filename, 1, line)
        return Frame(f"{module}.{scope.qualname}", filename, scope.start, line)
