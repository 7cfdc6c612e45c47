"""``hami-doctor logs`` classifies every warning, error and fatal line our daemons can write, at the
severity they write it: an AST walk over the daemons' source finds each log call (whatever its
logger is named), renders its format string into a klog line with sample arguments (and with the
messages a ``%s`` carries where the source says what they are), and the doctor must name a pattern
for it whose level is the line's. Ordinary info lines must not be flagged."""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from hami.doctor import logscan
from hami.scheduler.extender import events

ROOT = Path(__file__).resolve().parents[2]
DAEMONS = ("core", "exporter", "scheduler", "deviceplugin")  # hami.core runs inside each daemon
LEVELS = {"info": "I", "warning": "W", "error": "E", "fatal": "F", "critical": "F", "exception": "E"}
# The klog letters a catalogue level may be written at: a fatal line is F (klog.Fatal), or E where
# the daemon exits through its own shutdown after it.
CATALOGUE_LETTERS = {"Fatal": ("F", "E"), "Error": ("E",), "Warning": ("W",)}
# HAMi's own lines at HAMi's level, where the guide's severity column (the catalogue's) says otherwise.
HAMI_LEVELS = {
    ("src/hami/deviceplugin/registrar.py", "retrying"),  # klog.Errorf in HAMi's register.go
}
SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?([sdrgfx])")
SAMPLE = {"s": "gpu-node-01", "d": "7", "r": "'x'", "g": "20", "f": "1.5", "x": "1f"}
# Calls that make a logger, and so name a logger receiver.
LOGGER_FACTORIES = {"get_logger", "getLogger"}
# A call whose format starts with a value from a bounded set, by file and level: the values it takes.
EVENTS = "src/hami/scheduler/extender/events.py"
LEADING_VALUES = {
    (EVENTS, "W"): (events.FILTERING_FAILED, events.REQUEST_CLAMPED, events.PERCENTAGE_CLAMPED),
    (EVENTS, "E"): (events.BINDING_FAILED,),
    (EVENTS, "I"): (events.FILTERING_SUCCEED, events.BINDING_SUCCEED),
}
# Callbacks whose message a later log call writes: the device plugin's fatal messages (a GRPC server
# that keeps crashing) reach ``log.fatal("hami-device-plugin: %s", fatal[0])`` through them.
SINKS = {"_on_give_up", "on_give_up", "_on_fatal", "on_fatal"}
SINK_READERS = {("src/hami/deviceplugin/main.py", "fatal")}
# Info lines the catalogue flags on purpose, at its level, and why.
FLAGGED_INFO = {
    "client-side-throttling",  # client-go's line, logged at I as client-go does; the guides call it a warning
    "xid-critical",  # HAMi's health check logs "XidCriticalError: ... marking device as unhealthy" at I
    "informer-watch-error",  # the repeats of an informer's first warning, at -v=4
    "node-lock-expired",  # HAMi's words at HAMi's level, which the tuning guide greps for
}


@dataclass(frozen=True)
class Call:
    where: str
    line: int
    level: str  # klog letter
    messages: tuple[str, ...]  # the rendered lines


def _format_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "%s" for v in node.values)
    return None


def _loggers(tree: ast.AST) -> set[str]:
    """Names (``log``, ``self._log``) bound to a logger in this module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
            func = node.value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in LOGGER_FACTORIES:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(ast.unparse(t) for t in targets)
    return names


def _strings(scope: ast.AST) -> dict[str, list[str]]:
    """The string formats each plain name is assigned in ``scope``."""
    out: dict[str, list[str]] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            fmt = _format_of(node.value)
            if fmt is not None:
                out.setdefault(node.targets[0].id, []).append(fmt)
    return out


def _sink_messages(trees: dict[str, ast.AST]) -> list[str]:
    found = []
    for tree in trees.values():
        for scope in ast.walk(tree):
            if not isinstance(scope, ast.FunctionDef):
                continue
            named = _strings(scope)
            for node in ast.walk(scope):
                if isinstance(node, ast.Call) and node.args and _callee(node) in SINKS:
                    arg = node.args[0]
                    fmt = _format_of(arg)
                    found += [fmt] if fmt is not None else named.get(getattr(arg, "id", ""), [])
    return found


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _render(fmt: str, args: list[ast.expr], values: Callable[[ast.expr], list[str]]) -> list[str]:
    """``fmt`` with each spec replaced: by what the source says its argument is, else a sample."""
    specs = list(SPEC.finditer(fmt))
    choices = [
        (values(args[i]) if i < len(args) and m.group(1) == "s" else []) or [SAMPLE[m.group(1)]]
        for i, m in enumerate(specs)
    ]
    out = []
    for picked in itertools.product(*choices):
        parts = SPEC.split(fmt)[::2]  # the text between the specs (SPEC has one group)
        out.append("".join(p + v for p, v in zip(parts, (*picked, ""), strict=True)))
    return out


def log_calls() -> list[Call]:
    """Every log call in the daemons whose format the source spells, with its level and lines."""
    trees = {
        str(path.relative_to(ROOT)): ast.parse(path.read_text(encoding="utf-8"))
        for package in DAEMONS
        for path in sorted((ROOT / "src" / "hami" / package).rglob("*.py"))
    }
    sinks = _sink_messages(trees)
    found = []
    for where, tree in trees.items():
        loggers = _loggers(tree)
        scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        for scope in scopes:
            named = _strings(scope)

            def values(arg: ast.expr, named: dict[str, list[str]] = named, where: str = where) -> list[str]:
                if isinstance(arg, ast.Name):
                    return named.get(arg.id, [])
                if isinstance(arg, ast.Subscript) and (where, ast.unparse(arg.value)) in SINK_READERS:
                    return sinks
                return []

            for node in ast.walk(scope):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                receiver = node.func.value
                if isinstance(receiver, ast.Call) and _callee(receiver) == "v":  # log.v(4).info(...)
                    receiver = receiver.func.value if isinstance(receiver.func, ast.Attribute) else receiver
                if node.func.attr not in LEVELS or ast.unparse(receiver) not in loggers or not node.args:
                    continue
                level = LEVELS[node.func.attr]
                fmt = _format_of(node.args[0])
                if fmt is None and isinstance(node.args[0], ast.Name):
                    fmt = next(iter(named.get(node.args[0].id, [])), None)
                if fmt is None:
                    assert level == "I", f"{where}:{node.lineno}: the format of a log call must be a literal"
                    continue  # an info line built by the reason catalogue (hami.core.reasons)
                messages = []
                for first in LEADING_VALUES.get((where, level), ("",)) if fmt.startswith("%s") else ("",):
                    rest = fmt[2:] if first else fmt
                    messages += [first + m for m in _render(rest, node.args[2 if first else 1:], values)]
                found.append(Call(where, node.lineno, level, tuple(messages)))
    return sorted(set(found), key=lambda c: (c.where, c.line))


CALLS = log_calls()
FLAGGABLE = [c for c in CALLS if c.level != "I"]
INFO = [c for c in CALLS if c.level == "I"]


def _klog(call: Call, message: str) -> str:
    return f"{call.level}1128 10:30:15.123456       1 {Path(call.where).name}:{call.line}] {message}"


def test_the_walk_finds_the_daemons_log_calls() -> None:
    assert len(FLAGGABLE) > 80 and len(INFO) > 50
    assert {c.where.split("/")[2] for c in FLAGGABLE} == set(DAEMONS)
    # Loggers not named `log` are walked too (klog's own, hypercorn's error log in hami.core.serve).
    assert any(c.where.endswith("core/serve/server.py") for c in CALLS)


@pytest.mark.parametrize("call", FLAGGABLE, ids=[f"{c.where}:{c.line}" for c in FLAGGABLE])
def test_every_warning_and_error_line_is_classified_at_its_level(call: Call) -> None:
    for message in call.messages:
        assert re.search(r"[A-Za-z]{3}", message), f"{call.where}:{call.line}: {message!r} has no words"
        found = logscan.classify(_klog(call, message))
        assert found is not None, f"{call.where}:{call.line} unclassified: {_klog(call, message)}"
        allowed = CATALOGUE_LETTERS.get(found[0].level, ())
        assert call.level in allowed or (call.where, found[1]) in HAMI_LEVELS, (
            f"{call.where}:{call.line} is logged at {call.level}, the catalogue's {found[1]} says "
            f"{found[0].level}: {message}"
        )


@pytest.mark.parametrize("call", INFO, ids=[f"{c.where}:{c.line}" for c in INFO])
def test_ordinary_info_lines_are_not_flagged(call: Call) -> None:
    for message in call.messages:
        found = logscan.classify(_klog(call, message))
        if found is not None and found[0].level != "Info":
            assert found[1] in FLAGGED_INFO, f"{call.where}:{call.line} flagged as {found[1]}: {message}"


@pytest.mark.parametrize(
    ("where", "key", "level"),
    [
        ("src/hami/deviceplugin/main.py", "grpc-crashed", "F"),
        ("src/hami/core/kube/client.py", "client-side-throttling", "I"),
        ("src/hami/scheduler/extender/register.py", "undecodable-node", "E"),
    ],
)
def test_the_three_missed_lines_are_found_in_the_source_and_classified(
    where: str, key: str, level: str
) -> None:
    """The lines issue 33 named, as the walk renders them from the code, not as written by hand."""
    keys = {
        found[1]
        for c in CALLS
        if c.where == where and c.level == level
        for m in c.messages
        if (found := logscan.classify(_klog(c, m))) is not None
    }
    assert key in keys, (where, keys)


def test_a_pattern_that_two_daemons_write_names_both() -> None:
    """The XID line comes from the device plugin's health check and from the monitor: the report must
    not send the reader of device-plugin.log to the monitor alone."""
    writers = {Path(c.where).parts[2] for c in CALLS for m in c.messages if "XidCriticalError: Xid=" in m}
    pattern = next(p for p in logscan.PATTERNS if p.key == "xid-critical")
    assert writers == {"deviceplugin", "exporter"}, writers
    assert "device-plugin" in pattern.component and "vgpu-monitor" in pattern.component
