"""``hami-doctor logs`` classifies every warning, error and fatal line our daemons can write: an AST
walk over the daemons' source finds each such log call, renders its format string into a klog line,
and the doctor must name a pattern for it. Three lines the doctor used to miss are checked as the
daemons write them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from hami.doctor import logscan
from hami.scheduler.extender import events

ROOT = Path(__file__).resolve().parents[2]
DAEMONS = ("core", "exporter", "scheduler", "deviceplugin")  # hami.core runs inside each daemon
LEVELS = {"warning": "W", "error": "E", "fatal": "F", "critical": "F", "exception": "E"}
SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?([sdrgfx])")
SAMPLE = {"s": "gpu-node-01", "d": "7", "r": "'x'", "g": "20", "f": "1.5", "x": "1f"}
# A call whose format starts with a value from a bounded set: the values it takes.
LEADING_VALUES = {
    "src/hami/scheduler/extender/events.py": (
        events.FILTERING_FAILED, events.BINDING_FAILED, events.REQUEST_CLAMPED
    ),
}


def _format_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "%s" for v in node.values)
    return None


def log_calls() -> list[tuple[str, int, str, str]]:
    """(file, line, klog level letter, format) of every W/E/F log call in the daemons."""
    found = []
    for package in DAEMONS:
        for path in sorted((ROOT / "src" / "hami" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                receiver = node.func.value
                is_log = isinstance(receiver, ast.Name) and receiver.id == "log"
                if node.func.attr not in LEVELS or not is_log:
                    continue
                fmt = _format_of(node.args[0]) if node.args else None
                where = str(path.relative_to(ROOT))
                assert fmt is not None, f"{where}:{node.lineno}: the format of a log call must be a literal"
                found.append((where, node.lineno, LEVELS[node.func.attr], fmt))
    return found


CALLS = log_calls()


def test_the_walk_finds_the_daemons_log_calls() -> None:
    assert len(CALLS) > 80
    assert {c[0].split("/")[2] for c in CALLS} == set(DAEMONS)


def _lines(where: str, fmt: str) -> list[str]:
    firsts = LEADING_VALUES.get(where, ("",)) if fmt.startswith("%s") else ("",)
    out = []
    for first in firsts:
        text = SPEC.sub(lambda m: SAMPLE[m.group(1)], fmt[2:] if first else fmt)
        out.append(first + text)
    return out


@pytest.mark.parametrize(("where", "line", "level", "fmt"), CALLS, ids=[f"{c[0]}:{c[1]}" for c in CALLS])
def test_every_warning_and_error_line_is_classified(where: str, line: int, level: str, fmt: str) -> None:
    for message in _lines(where, fmt):
        assert re.search(r"[A-Za-z]{3}", message), f"{where}:{line}: {fmt!r} has no words to classify"
        klog_line = f"{level}1128 10:30:15.123456       1 {Path(where).name}:{line}] {message}"
        assert logscan.classify(klog_line) is not None, f"{where}:{line} unclassified: {klog_line}"


@pytest.mark.parametrize(
    ("line", "key"),
    [
        (
            "E1128 10:30:15.123456       1 server.py:277] hami-device-plugin: GRPC server for "
            "'nvidia.com/gpu' has repeatedly crashed recently. Quitting",
            "grpc-crashed",
        ),
        (
            "I1128 10:30:15.123456       1 client.py:149] Waited for 1.503s due to client-side throttling, "
            "not priority and fairness, request: PATCH:https://10.96.0.1:443/api/v1/nodes/gpu-node-01",
            "client-side-throttling",
        ),
        (
            "W1128 10:30:15.123456       1 register.py:174] node gpu-node-01: skipping undecodable device "
            "annotations: hami.io/node-nvidia-register: unexpected end of JSON",
            "undecodable-node",
        ),
    ],
)
def test_the_three_missed_lines_are_classified(line: str, key: str) -> None:
    found = logscan.classify(line)
    assert found is not None and found[1] == key, found
