"""Every text file the code or the tests read or write names its encoding: without one Python uses
the locale's, so a UTF-8 file (the runbooks, the golden outputs, metrics.md) reads differently, or
fails, under another LANG, and a file written under it is not the UTF-8 its readers expect."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("src", "tests", "scripts", "alerts", "dashboards", "bench")


def _text_mode(call: ast.Call, mode_at: int) -> bool:
    """Whether the call's mode (positional ``mode_at`` or ``mode=``) is text: absent or without ``b``."""
    mode: ast.expr | None = call.args[mode_at] if len(call.args) > mode_at else None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return True
    return not (isinstance(mode, ast.Constant) and isinstance(mode.value, str) and "b" in mode.value)


def _a_path(node: ast.expr) -> bool:
    """``a / b`` or ``Path(...)``: a pathlib receiver (``os.open``, ``tarfile.open`` take a path first)."""
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.Div)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Path"


def unnamed_encodings(source: str) -> list[int]:
    """Lines of ``read_text``, ``write_text``, ``open(...)`` and ``Path.open(...)`` on text with no
    encoding."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or any(kw.arg == "encoding" for kw in node.keywords):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "read_text":
            bad = not node.args  # read_text("utf-8") names it positionally
        elif isinstance(func, ast.Attribute) and func.attr == "write_text":
            bad = len(node.args) < 2  # write_text(data, "utf-8") names it positionally
        elif isinstance(func, ast.Name) and func.id == "open":
            bad = len(node.args) < 4 and _text_mode(node, 1)
        elif isinstance(func, ast.Attribute) and func.attr == "open" and _a_path(func.value):
            bad = _text_mode(node, 0)  # pathlib's open(mode, buffering, encoding)
        else:
            continue
        if bad:
            found.append(node.lineno)
    return found


def test_the_checker_sees_each_form() -> None:
    source = (
        "p.read_text()\nopen(x)\nopen(x, 'w')\n(d / 'f').open('w')\np.write_text(s)\n"
        "p.read_text(encoding='utf-8')\nopen(x, 'rb')\np.read_text('utf-8')\nos.open(x, 1)\n"
        "p.write_text(s, encoding='utf-8')\np.write_text(s, 'utf-8')\np.write_bytes(b)\n"
    )
    assert unnamed_encodings(source) == [1, 2, 3, 4, 5]


def test_every_text_read_and_write_names_its_encoding() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}"
        for tree in TREES
        for path in sorted((ROOT / tree).rglob("*.py"))
        for line in unnamed_encodings(path.read_text(encoding="utf-8"))
    ]
    assert not bad, bad
